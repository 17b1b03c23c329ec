"""Wall time of training all eight policies on a sweep, and of a cold `specband recommend`.

Not a test: it prints figures. Targets on the 2-core development machine (issue 2, item 9):
all eight trained in one process on a 228-row sweep in under 5 s (the published study's
eight training scripts take about 47 s there on a sweep of that size), and a cold
`specband recommend` with lookup_table under 0.3 s.

Usage:
    python benchmarks/bench_train.py [SWEEP.jsonl] [--rows 228] [--repeats 3] [--recommend-runs 7]

Without SWEEP the bundled published measurements (29 rows) are replicated to --rows rows
(each copy a separate trial, so every copy is scored against its own baselines). Pass a
228-row sweep (e.g. from `specband simulate`) to time the real shape: 4 batch sizes x 19
actions x 3 repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# benchmarks/ is on sys.path when this runs as a script
from bench_recommend import time_recommend


def replicated_bundled(rows: int, out: Path) -> Path:
    """The bundled rows copied until there are ``rows`` of them (copy k is trial "<trial>#k")."""
    from specband.sweeps.dataset import bundled_data_path

    base = [json.loads(line) for line in bundled_data_path().read_text().splitlines() if line.strip()]
    records = []
    copy = 0
    while len(records) < rows:
        for r in base:
            if len(records) == rows:
                break
            rec = dict(r)
            rec["trial"] = f"{r.get('trial')}#{copy}"
            rec["index"] = len(records)
            records.append(rec)
        copy += 1
    out.write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


def time_training(path: Path, seed: int) -> dict[str, float]:
    """Fit all eight in this process (fresh training cache), then save them; wall seconds
    (and "fit all eight (CPU)": CPU seconds of this process, less sensitive to other load)."""
    from specband.artifacts.fit import build_manifest, train_policies
    from specband.artifacts.folder import save_artifacts
    from specband.policies import ALGORITHMS
    from specband.policies.nets import clear_training_cache
    from specband.sweeps.dataset import load_sweep

    clear_training_cache()
    times: dict[str, float] = {}
    start = time.perf_counter()
    sweep = load_sweep(path)
    data = sweep.training_data("contract")
    times["load + rewards"] = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    policies = train_policies(data, ALGORITHMS, seed=seed, on_done=lambda name, s: times.__setitem__(name, s))
    times["fit all eight"] = time.perf_counter() - start
    times["fit all eight (CPU)"] = time.process_time() - cpu
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        save_artifacts(policies, Path(tmp) / "models", build_manifest(data, ALGORITHMS, seed=seed, sweep=sweep))
        times["save artifacts"] = time.perf_counter() - start
    times["rows"] = float(len(sweep.rows))
    times["training rows"] = float(len(data))
    return times


def time_fresh_process(path: Path, seed: int) -> float:
    """Wall time of a fresh interpreter that imports specband and fits all eight."""
    code = (
        "import sys; from specband.sweeps.dataset import load_sweep; "
        "from specband.artifacts.fit import train_policies; "
        f"train_policies(load_sweep(sys.argv[1]).training_data('contract'), seed={seed})"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", nargs="?", type=Path, help="sweep JSONL (default: bundled rows replicated)")
    parser.add_argument("--rows", type=int, default=228, help="rows to replicate the bundled data to")
    parser.add_argument("--repeats", type=int, default=3, help="training repetitions (min and median shown)")
    parser.add_argument("--recommend-runs", type=int, default=7, help="cold recommend runs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    start = time.perf_counter()
    import specband.artifacts.folder
    import specband.sweeps.dataset

    imported = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        path = args.sweep or replicated_bundled(args.rows, Path(tmp) / "replicated.jsonl")
        label = str(args.sweep) if args.sweep else f"bundled published rows replicated to {args.rows}"
        print(f"sweep: {label}")
        print(f"import {specband.sweeps.dataset.__name__}, {specband.artifacts.folder.__name__}: {imported:.2f} s")
        runs = [time_training(path, args.seed) for _ in range(args.repeats)]
        keys = [k for k in runs[0] if k not in ("rows", "training rows")]
        print(
            f"rows: {int(runs[0]['rows'])} ({int(runs[0]['training rows'])} trained on); "
            f"{args.repeats} repetitions in one process (the first pays the scipy/sklearn imports)"
        )
        print(f"{'step':<22}{'min s':>8}{'median s':>10}")
        for k in keys:
            values = [r[k] for r in runs]
            print(f"{k:<22}{min(values):>8.2f}{statistics.median(values):>10.2f}")
        fresh = time_fresh_process(path, args.seed)
        print(f"fresh process, import + fit all eight: {fresh:.2f} s   (target < 5 s; published scripts ~47 s)")

        rec = time_recommend(args.recommend_runs, [])
        print(
            f"cold `specband recommend --batch-size 16` (lookup_table, embedded): "
            f"min {min(rec):.3f} s, median {statistics.median(rec):.3f} s over {len(rec)} runs   (target < 0.3 s)"
        )
        models = Path(tmp) / "bench-models"
        subprocess.run(
            [sys.executable, "-m", "specband", "train", str(path), "--out", str(models), "--algo", "lookup_table"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        rec = time_recommend(args.recommend_runs, ["--models", str(models)])
        print(
            f"cold `specband recommend --batch-size 16 --models DIR` (lookup_table): "
            f"min {min(rec):.3f} s, median {statistics.median(rec):.3f} s"
        )


if __name__ == "__main__":
    main()

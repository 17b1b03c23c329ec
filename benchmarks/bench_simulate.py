"""Speed of the simulator: a default 228-row sweep (target: under a second), one
``predict`` call, and the calibration fit. Prints figures; asserts nothing.

Run: ``python benchmarks/bench_simulate.py [--repeats N]``
"""

from __future__ import annotations

import argparse
import statistics
import time


def _time(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-fit", action="store_true", help="do not time the calibration fit")
    args = parser.parse_args()

    t0 = time.perf_counter()
    from specband.sim import build_model, simulate_sweep

    model = build_model("rtx4060-laptop")
    print(f"import + build_model: {time.perf_counter() - t0:.3f} s")

    sweeps = _time(lambda: simulate_sweep(model, seed=0), args.repeats)
    print(
        f"simulate_sweep, 228 rows: median {statistics.median(sweeps):.3f} s, "
        f"max {max(sweeps):.3f} s over {args.repeats} runs (target < 1 s)"
    )
    n = 2000
    t0 = time.perf_counter()
    for i in range(n):
        model.predict(16, (3, 4, 8), 50.0 + (i % 7))
    print(f"predict: {1e6 * (time.perf_counter() - t0) / n:.1f} us per call")
    cli = _time(lambda: _run_cli(), 1)
    print(f"`specband simulate --out` in-process: {cli[0]:.3f} s")
    if not args.skip_fit:
        from specband.sim.calibrate import calibration_report, fit_profile

        t0 = time.perf_counter()
        fitted = fit_profile(model)
        fit_s = time.perf_counter() - t0
        from specband.sim.model import SpeculativeDecodingModel

        report = calibration_report(SpeculativeDecodingModel(fitted, model.target, model.draft))
        held = report.summary(False)
        print(
            f"calibration fit: {fit_s:.1f} s; refitted held-out median |speed err| "
            f"{100 * held['speed_median']:.2f} %, |util err| {held['util_median']:.4f}"
        )


def _run_cli() -> None:
    import tempfile
    from pathlib import Path

    from specband.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        try:
            main(["simulate", "--out", str(Path(tmp) / "s.jsonl")])
        except SystemExit as exc:
            if exc.code:
                raise


if __name__ == "__main__":
    main()

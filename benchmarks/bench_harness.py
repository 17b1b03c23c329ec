"""How long a full 76-run sweep pass takes against the emulator, and how close the
emulated rows stay to the performance model behind it.

Usage::

    python benchmarks/bench_harness.py [--time-scale 0.002] [--one-launch-per-config]
                                       [--model calibrated|module:function] [--repeats 1]

Prints the real time of the pass, the launches, and per batch size the median ratio of
the row's speed (``accept / p20(step time)``) and energy utilisation to the model's own
prediction at the row's starting temperature (1.00 = exact). The pass runs in a
temporary directory on a free loopback port.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    """Run the pass and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=0.002)
    parser.add_argument("--one-launch-per-config", action="store_true")
    parser.add_argument("--model", default="calibrated")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    from specband.contract.actions import ACTIONS
    from specband.emulator.models import load_performance_model

    model = load_performance_model(args.model, "rtx4060-laptop")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep.jsonl"
        cmd = [
            sys.executable,
            "-m",
            "specband",
            "sweep",
            "--target",
            "m",
            "--draft",
            "d",
            "--out",
            str(out),
            "--repeats",
            str(args.repeats),
            "--server-command",
            "python -m specband emulate",
            "--time-scale",
            str(args.time_scale),
            "--emulator-model",
            args.model,
            "--port",
            str(_free_port()),
            "--quiet",
        ]
        if args.one_launch_per_config:
            cmd.append("--one-launch-per-config")
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True)
        elapsed = time.monotonic() - t0
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            raise SystemExit(done.returncode)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    print(f"time scale {args.time_scale:g}, one launch per config: {args.one_launch_per_config}, model: {args.model}")
    print(done.stdout.strip())
    print(f"real time: {elapsed:.1f} s for {len(rows)} rows ({elapsed / max(1, len(rows)):.2f} s per row)")
    print("bs  speed/model  util/model  wall-clock/step-time speed  (medians over successful rows)")
    for bs in sorted({r["batch_size"] for r in rows}):
        speed_ratio, util_ratio, wall_ratio = [], [], []
        for r in rows:
            if r["batch_size"] != bs or r["error"]:
                continue
            action = ACTIONS[[tuple(a) for a in ACTIONS].index((r["steps"], r["topk"], r["num_draft_tokens"]))]
            pred = model.predict(bs, action, r["gpu_temp_c_before"] or model.ambient_temp_c, r["mem_fraction_static"])
            speed_ratio.append(r["speed_tok_s"] / pred.speed_tok_s)
            if r["avg_power_watts"]:
                util_ratio.append(r["avg_power_watts"] / pred.avg_power_w)
            if r["wall_clock_tok_s"]:
                wall_ratio.append(r["wall_clock_tok_s"] / r["speed_tok_s"])
        med = lambda v: f"{statistics.median(v):.3f}" if v else "-"  # noqa: E731
        print(f"{bs:>2}  {med(speed_ratio):>11}  {med(util_ratio):>10}  {med(wall_ratio):>26}")


if __name__ == "__main__":
    main()

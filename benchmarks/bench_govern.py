"""The governor against one limit and against the engine's defaults: time in band, J/token and
tok/s. Prints figures; asserts nothing.

Part 1 (EMULATED, real processes): ``specband emulate`` serving the 8B pair
(Llama-3.1-8B-Instruct + its EAGLE3 head) on the H100 SXM profile, its power with the prefill
bursts of arriving requests (``specband.emulator.engine``), under a load that holds 1 -> 8 ->
32 -> 8 -> 1 requests in flight (``specband.govern.load``, 1024-token prompts, 256 new tokens,
``--phase-s`` emulated seconds each), three ways:

* (a) ``default``: the GPU's default limit (700 W) with sglang's default speculation
  (``--speculative-adaptive``, its default tiers);
* (b) ``one-limit``: specband's schedule (the first guess's flags per tier, as an sglang
  adaptive config) with one limit for the whole mix: the lowest limit whose mix-weighted speed
  is within 2 % of the fastest (simulated, the serving-power model);
* (c) ``governor``: the same schedule, and ``specband govern`` moving the limit (in-process,
  on the emulator's GPU state file).

One observer measures the three the same way, once a second of the emulator's clock: the GPU's
energy counter and limit (the emulated GPU state file) and the server's ``/metrics`` (running
batch, output tokens); time in band is over the window the governor holds (5 s at one limit)
and over each second alone, counted where the band is reachable.

Part 2 (SIMULATED): the same three replayed by :mod:`specband.govern.replay` on the H100 SXM and
H200 profiles over ``benchmarks/data/govern_trace_synthetic.csv`` (a synthetic batch-size trace,
``benchmarks/make_govern_trace.py``), the governor acting on the batch size read one second before.

Targets (issue 34): time in band >= 90 % of the time at batch sizes where the band is reachable,
J/token below (a), tok/s within 2 % of (b).

Run: ``python benchmarks/bench_govern.py [--time-scale 0.2] [--phase-s 60] [--skip-emulator] [--skip-replay]``
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from specband.devices.base import Clock  # noqa: E402
from specband.emulator.gpu import EmulatedDevice  # noqa: E402
from specband.engines.base import get_engine  # noqa: E402
from specband.engines.schedule_files import Tier, sglang_schedule_flags  # noqa: E402
from specband.govern.controller import GpuRange, GpuReading  # noqa: E402
from specband.govern.firstguess import first_guess_plan  # noqa: E402
from specband.govern.ledger import Ledger, SlidingUtilization, interval_of  # noqa: E402
from specband.govern.load import run_phases  # noqa: E402
from specband.govern.plan import GovernorPlan  # noqa: E402
from specband.govern.replay import one_limit, read_trace, replay  # noqa: E402
from specband.govern.request import GovernRequest  # noqa: E402
from specband.govern.run import run_governor  # noqa: E402
from specband.govern.sources import ServerScraper  # noqa: E402
from specband.sim.model import build_model  # noqa: E402
from specband.sim.power_capped import model_power_limit_range  # noqa: E402

TARGET = "llama-3.1-8b-instruct"
PHASES = (1, 8, 32, 8, 1)
TRACE = ROOT / "benchmarks" / "data" / "govern_trace_synthetic.csv"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _schedule(plan: GovernorPlan, folder: Path) -> list[str]:
    """The plan's flags per tier as an sglang adaptive config (one candidate per tier)."""
    tiers: list[Tier] = []
    for t in plan.tiers:
        steps = t.action[0]
        if tiers and tiers[-1].steps == (steps,):
            tiers[-1] = Tier(tiers[-1].start, t.high, (steps,), steps)
        else:
            tiers.append(Tier(t.low, t.high, (steps,), steps))
    config = get_engine("sglang").schedule_config(tiers, None)
    path = folder / "schedule.json"
    path.write_text(json.dumps(config))
    entries = {int(k): v for k, v in config.items()}
    return sglang_schedule_flags(path, entries, "draft")


class _Quiet:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, line: str) -> None:
        self.lines.append(line)

    def status(self, status: Any) -> None:
        return None


def _observe(url: str, device: EmulatedDevice, plan: GovernorPlan, clock: Clock, seconds: float) -> Ledger:
    """Measure the run once a second of the emulator's clock (module docstring)."""
    rng = model_power_limit_range(device.gpu.model)
    gpu_range = GpuRange(rng.min_w, rng.default_w)
    scraper = ServerScraper(url, get_engine("sglang"), 5.0, clock)
    ledger, window = Ledger([t.label for t in plan.tiers]), SlidingUtilization(5.0)
    before: GpuReading | None = None
    last_tokens: float | None = None
    tier: int | None = None
    start = clock.now()
    next_t = start
    while clock.now() - start < seconds:
        scrape = scraper.scrape(5.0)
        limit = device.power_limit_setting_w()
        reading = GpuReading(clock.now(), device.read_power_w() or 0.0, device.read_energy_mj(), limit)
        m = scrape.metrics
        tokens = m.output_tokens_total if m is not None else None
        if before is not None and m is not None and m.running is not None:
            part = interval_of(before, reading, limit, gpu_range, plan.band, window)
            delta = 0.0 if tokens is None or last_tokens is None else tokens - last_tokens
            if part is not None:
                ledger.add(tier, part.seconds, [(0, part)], delta)
        if m is not None and m.running is not None:
            tier = plan.tier_index(round(m.running))
        before, last_tokens = reading, tokens
        next_t += 1.0
        clock.sleep(max(0.0, next_t - clock.now()))
    scraper.close()
    return ledger


def _run_emulated(
    strategy: str, plan: GovernorPlan, limit_w: float, args: argparse.Namespace
) -> tuple[Ledger, list[str]]:
    folder = Path(tempfile.mkdtemp(prefix=f"bench-govern-{strategy}-"))
    state, port = folder / "gpu.json", _free_port()
    model = build_model(args.profile, target_config=TARGET)
    device = EmulatedDevice(state, model, args.profile, args.time_scale)
    device.set_power_limit_w(limit_w)
    if strategy == "default":
        spec = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "draft",
                "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                "--speculative-adaptive"]  # fmt: skip
    else:
        spec = _schedule(plan, folder)
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'benchmarks'}:{ROOT / 'src'}", "SPECBAND_EMULATOR_SGLANG_PARSER": "0"}
    command = [sys.executable, "-m", "specband", "emulate", "--hardware", args.profile, "--perf-model",
               "govern_models:pair_8b", "--state-file", str(state), "--time-scale", str(args.time_scale),
               "--load-time", "1", "--model-path", "target", "--port", str(port), "--enable-metrics",
               "--max-running-requests", "64", *spec]  # fmt: skip
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    notes: list[str] = []
    try:
        import httpx

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        clock = Clock(args.time_scale)
        total = args.phase_s * len(PHASES)
        load = threading.Thread(
            target=run_phases,
            args=(url, [(c, args.phase_s) for c in PHASES]),
            kwargs={"time_scale": args.time_scale, "prompt_tokens": 1024, "max_new_tokens": 256},
            daemon=True,
        )
        governor = None
        if strategy == "governor":
            plan_file = folder / "plan.json"
            plan_file.write_text(plan.dumps())
            request = GovernRequest(
                url=url, plan=str(plan_file), device="emulated", emulator_state=state, emulator_hardware=args.profile,
                duration_s=total + 2, quiet=True, log=folder / "govern.jsonl",
                plugged=lambda ts: _Spec(state, args.profile, model, ts),
            )  # fmt: skip
            reporter = _Quiet()
            governor = threading.Thread(target=run_governor, args=(request, reporter), daemon=True)
            governor.start()
            notes = reporter.lines
        load.start()
        ledger = _observe(url, device, plan, clock, total)
        if governor is not None:
            governor.join(timeout=120)
        return ledger, notes
    finally:
        server.terminate()
        server.wait(timeout=60)


class _Spec:
    """The emulated GPU for the in-process governor (a DeviceSpec)."""

    def __init__(self, state: Path, hardware: str, model: Any, time_scale: float) -> None:
        self.state, self.hardware, self.model, self.time_scale = state, hardware, model, time_scale

    def open(self) -> EmulatedDevice:
        return EmulatedDevice(self.state, self.model, self.hardware, self.time_scale)


def _line(label: str, ledger: Ledger, wall_s: float) -> str:
    busy = ledger.total(busy_only=True)
    window = busy.reachable_in_band_window_s / busy.reachable_s if busy.reachable_s else float("nan")
    each = busy.reachable_in_band_s / busy.reachable_s if busy.reachable_s else float("nan")
    jpt = busy.energy_j / busy.output_tokens if busy.output_tokens else float("nan")
    tok_s = busy.output_tokens / busy.seconds if busy.seconds else float("nan")
    return (
        f"  {label:<10} in band {window:6.1%} of {busy.reachable_s:4.0f} reachable s (each second alone {each:6.1%}), "
        f"{jpt:.4f} J/token, {tok_s:7.0f} tok/s, throttled {busy.throttled_s:4.0f} s"
    )


def emulated(args: argparse.Namespace) -> None:
    model = build_model(args.profile, target_config=TARGET)
    rng = model_power_limit_range(model)
    plan = first_guess_plan(args.profile, TARGET, None, gpu_range=rng, range_source="the profile's range")
    trace = [(float(i * args.phase_s), c) for i, c in enumerate(PHASES)] + [(args.phase_s * len(PHASES), 0)]
    mix_limit = one_limit(model, plan, trace, GpuRange(rng.min_w, rng.default_w))
    print(f"EMULATED: {args.profile}, {TARGET} pair, phases {' -> '.join(map(str, PHASES))} x {args.phase_s:g} s, "
          f"time scale {args.time_scale:g}; one limit for the mix: {mix_limit:g} W (simulated rule)")  # fmt: skip
    for strategy, limit in (("default", rng.default_w), ("one-limit", mix_limit), ("governor", rng.default_w)):
        if strategy not in args.strategies.split(","):
            continue
        start = time.monotonic()
        ledger, notes = _run_emulated(strategy, plan, limit, args)
        print(_line(strategy, ledger, time.monotonic() - start), flush=True)
        for t, tally in ledger.tiers.items():
            if t is not None and tally.seconds > 0:
                print(f"      tier {plan.tiers[t].label}: {tally.seconds:.0f} s, in band "
                      f"{tally.in_band_window_s / max(tally.gpu_seconds, 1e-9):.1%}, "
                      f"{tally.energy_j / max(tally.output_tokens, 1):.4f} J/token")  # fmt: skip
        if notes:
            print(f"      governor: {len(notes)} lines, last: {notes[-1][:150]}")


def replayed() -> None:
    trace = read_trace(TRACE)
    print(f"SIMULATED replay over {TRACE.name} ({len(trace)} s, synthetic), governor one reading late:")
    for profile in ("h100-sxm", "h200"):
        model = build_model(profile, target_config=TARGET)
        plan = first_guess_plan(profile, TARGET, None)
        print(f" {profile} ({TARGET} pair):")
        for strategy in ("default", "one-limit", "governor"):
            r = replay(model, plan, trace, strategy)
            held = r.window_in_band_of_reachable or 0
            print(
                f"  {strategy:<10} in band {held:6.1%} of {r.reachable_s:4.0f} reachable s "
                f"(each second alone {r.in_band_of_reachable or 0:6.1%}), {r.joules_per_token:.4f} J/token, "
                f"{r.tok_s:7.0f} tok/s, throttled {r.throttled_s:4.0f} s {r.limits[:80]}"
            )
        exact = replay(model, plan, trace, "governor", lag=0)
        print(f"  governor with no lag: in band {exact.window_in_band_of_reachable or 0:.1%} (an upper bound)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=0.2)
    parser.add_argument("--phase-s", type=float, default=60.0)
    parser.add_argument("--profile", default="h100-sxm")
    parser.add_argument("--skip-emulator", action="store_true")
    parser.add_argument("--skip-replay", action="store_true")
    parser.add_argument("--strategies", default="default,one-limit,governor", help="emulated runs to make")
    args = parser.parse_args()
    if not args.skip_replay:
        replayed()
    if not args.skip_emulator:
        emulated(args)


if __name__ == "__main__":
    main()

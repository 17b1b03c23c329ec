"""``specband govern``: hold the band on a running server by moving each GPU's power limit with
its batch size; the loop is :mod:`specband.govern.run`, this module prints (a live status line
on a terminal, the decisions, the summary)."""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

import typer

from specband.cli.output import say
from specband.cli.params import request_command
from specband.core.errors import one_line
from specband.govern.request import GovernRequest

if TYPE_CHECKING:
    from specband.govern.plan import GovernorPlan
    from specband.govern.run import GovernOutcome, Status


def register(app: typer.Typer) -> None:
    """Add ``govern`` to ``app``."""
    app.command("govern")(govern_command)


class _Terminal:
    """The status line (stderr, a terminal only, rewritten in place) and the loop's lines
    (stdout; the status line is cleared first and drawn again after)."""

    def __init__(self, quiet: bool) -> None:
        isatty = getattr(sys.stderr, "isatty", None)
        self.live = not quiet and callable(isatty) and bool(isatty())
        self._shown = ""

    def _clear(self) -> None:
        if self.live and self._shown:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()

    def note(self, line: str) -> None:
        self._clear()
        say(line)
        sys.stdout.flush()
        self._draw()

    def status(self, s: Status) -> None:
        gpus = "; ".join(
            f"GPU {g.index} {g.limit_w:.0f} W" + ("" if g.power_w is None else f" {g.power_w:.0f} W")
            + ("" if g.utilization is None else f" u {g.utilization:.3f}")
            for g in s.gpus
        )  # fmt: skip
        band = "-" if s.in_band_fraction is None else f"{s.in_band_fraction:.0%}"
        what = "would set" if s.dry_run else "limit"
        where = f"{s.elapsed_s:6.0f} s  tier {s.tier}  bs {s.batch_size}"
        self._shown = one_line(f"{where}  {what}: {gpus}  in band {band} ({s.in_band_s:.0f} s)")
        self._draw()

    def _draw(self) -> None:
        if self.live and self._shown:
            sys.stderr.write("\r\x1b[2K" + self._shown[:200])
            sys.stderr.flush()

    def close(self) -> None:
        self._clear()
        self._shown = ""


def _plugged(request: GovernRequest) -> GovernRequest:
    """The request with the emulator's GPU plugged in for ``--device emulated`` (the govern
    stage imports no emulator)."""
    if request.device != "emulated" or request.emulator_state is None:
        return request
    from specband.emulator.spec import EmulatedGpuSpec  # lazy: only against the emulator

    state, hardware, model = request.emulator_state, request.emulator_hardware, request.emulator_model

    def spec(time_scale: float) -> Any:
        return EmulatedGpuSpec(state, hardware, model, time_scale)

    return dataclasses.replace(request, plugged=spec)


@request_command(GovernRequest)
def govern_command(request: GovernRequest) -> None:
    """Hold the GPU's energy utilisation in the 95-98 % band on a running sglang or vLLM server: every
    --interval, read its running batch size (/metrics) and the GPUs' power (NVML), set each GPU's power limit
    for the batch size's tier (a plan: --plan FILE, or a simulated first guess), and move it in bounded steps
    while the utilisation leaves the band. Holds the GPUs' power-limit lock and restores their limits on every
    exit; --dry-run sets nothing."""
    from specband.govern.oneshot import restore_gpus, write_plan  # lazy: the loop's modules load with the command
    from specband.govern.run import run_governor  # lazy: as above

    request = _plugged(request)
    if request.restore:
        for line in restore_gpus(request):
            say(line)
        return
    if request.write_plan is not None:
        path, plan = write_plan(request)
        _print_plan(plan)
        say(f"wrote {path}", err=True)
        return
    terminal = _Terminal(request.quiet)
    try:
        outcome = run_governor(request, terminal)
    finally:
        terminal.close()
    _print_summary(outcome)
    if outcome.error is not None:
        raise outcome.error


def _print_plan(plan: GovernorPlan) -> None:
    say(f"plan: {plan.source}")
    for t in plan.tiers:
        util = t.expected.get("utilization")
        speed = t.expected.get("tok_s")
        figures = ""
        if util is not None:
            figures += f", utilisation {util.value:.3f} ({util.source})"
        if speed is not None and speed.low is not None and speed.high is not None:
            figures += f", {speed.value:.0f} [{speed.low:.0f}, {speed.high:.0f}] tok/s ({speed.source})"
        say(f"  tier {t.label} (planned at {t.planned_batch_size}): {t.action} at {t.power_limit_w:g} W "
            f"({t.power_limit_source}){figures}")  # fmt: skip
    for line in plan.notes:
        say(f"  note: {line}")


def _fraction(part: Any, whole: Any) -> str:
    return "-" if not whole else f"{part / whole:.1%}"


def _print_summary(outcome: GovernOutcome) -> None:
    s = outcome.summary
    busy, total = s.get("busy", {}), s.get("total", {})
    if not total:
        return
    say(f"summary ({outcome.provenance}; {total['seconds']:.0f} s, GPUs {', '.join(map(str, outcome.gpus))}; "
        f"stopped by {outcome.stopped_by}):")  # fmt: skip
    reachable = _fraction(busy["reachable_in_band_window_s"], busy["reachable_s"])
    each = _fraction(busy["reachable_in_band_s"], busy["reachable_s"])
    say(f"  time in band (utilisation over --window): {_fraction(busy['in_band_window_s'], busy['gpu_seconds'])} of "
        f"{busy['gpu_seconds']:.0f} busy GPU-seconds, {reachable} where the band is reachable (each interval "
        f"alone: {each})")  # fmt: skip
    for label, t in s.get("tiers", {}).items():
        name = "idle (batch size 0)" if label == "idle" else f"tier {label}"
        say(f"  {name}: {t['seconds']:.0f} s, in band {_fraction(t['in_band_window_s'], t['gpu_seconds'])}, "
            f"reachable {t['reachable_s']:.0f} GPU-s, throttled {t['throttled_s']:.0f} s")  # fmt: skip
    jpt = total.get("joules_per_token")
    say(f"  energy {total['energy_j']:.0f} J, output tokens {total['output_tokens']:.0f} (the server's counter), "
        f"{'-' if jpt is None else f'{jpt:.4f}'} J/token, throttled {total['throttled_s']:.0f} GPU-s, "
        f"readings skipped {s.get('unread_s', 0):.0f} s")  # fmt: skip
    for line in outcome.restored:
        say(f"  {line}")

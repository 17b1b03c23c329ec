"""``specband govern``: the loop beside a running server (:func:`run_governor`).

Every ``--interval`` it reads each governed GPU (power, energy counter, limit) and the server's
``/metrics`` (running batch, output tokens, acceptance), checks both
(:mod:`specband.govern.readings`: a bad reading is logged and skipped), follows the batch size
to a plan tier (:class:`~specband.govern.controller.TierTracker`) and lets each GPU's
:class:`~specband.govern.controller.BandController` move its limit; it accounts every interval
(:class:`~specband.govern.ledger.Ledger`), logs readings and decisions
(:class:`~specband.govern.log.GovernLog`), updates ``--metrics-port``
(:class:`~specband.govern.exporter.GovernMetrics`) and the status line, and checks the measured
acceptance against the plan (:mod:`specband.govern.drift`).

A GPU's limit is set through :class:`~specband.devices.power_limit.PowerLimitGuard`, whose lock
is taken for every governed GPU before the loop starts and held until the end (a sweep, a
launch or another governor on the same GPU is refused meanwhile); the limit each GPU had is put
back however the loop ends: ``--duration`` reached, Ctrl-C, SIGTERM, an exception, or the server
giving no usable reading for ``--server-timeout`` seconds (then govern exits with status 3). A
governor killed with SIGKILL restores nothing, but the lock's record lets the next ``govern``
(or ``govern --restore``) put the original back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from specband.core.errors import EngineError, SpecbandError
from specband.devices.base import NullDevice
from specband.devices.power_limit import PowerLimitGuard
from specband.engines.client import ProbeHttp
from specband.govern.controller import BandController, ControlSettings, Decision, GpuRange, GpuReading, TierTracker
from specband.govern.drift import AcceptanceWindow, AcceptanceWindows, DriftCheck
from specband.govern.exporter import GovernMetrics
from specband.govern.ledger import GpuInterval, Ledger, SlidingUtilization, interval_of
from specband.govern.log import GovernLog
from specband.govern.plan import GovernorPlan
from specband.govern.readings import GpuRaw, ServerSample, Skip, check_gpu, check_server
from specband.govern.replan import DriftReport, drift_report
from specband.govern.request import GovernRequest
from specband.govern.setup import Governed, prepare
from specband.govern.sources import GpuReader, Scrape, ServerScraper
from specband.harness.interrupts import deferred, interrupts_as_keyboard_interrupt

__all__ = ["DRIFT_WINDOW_S", "GovernOutcome", "GpuStatus", "Reporter", "Status", "run_governor"]

#: Seconds of the server's counters behind one windowed acceptance (drift): at batch size 8 and
#: ~200 tokens/s per request, 30 s holds ~50 000 tokens, a mean good to well under 1 %.
DRIFT_WINDOW_S = 30.0


@dataclass(frozen=True)
class GpuStatus:
    """One GPU on the status line: its index, the limit set (dry run: would set), the last
    power read and utilisation (``None`` before a reading)."""

    index: int
    limit_w: float
    power_w: float | None
    utilization: float | None


@dataclass(frozen=True)
class Status:
    """What the status line shows after each reading."""

    elapsed_s: float
    tier: str
    batch_size: int | None
    gpus: tuple[GpuStatus, ...]
    in_band_fraction: float | None
    in_band_s: float
    dry_run: bool


class Reporter(Protocol):
    """Where the loop says what it does (the CLI prints; tests collect)."""

    def note(self, line: str) -> None:
        """One line to print (above the status line)."""
        ...

    def status(self, status: Status) -> None:
        """The status after a reading."""
        ...


@dataclass
class GovernOutcome:
    """How the run ended.

    Attributes:
        plan: the plan followed.
        summary: the ledger's summary (:meth:`~specband.govern.ledger.Ledger.to_json`).
        restored: one line per GPU whose limit was put back.
        error: why the run stopped, when it failed (the server lost: an EngineError), else ``None``.
        drift: the drift found, or ``None``.
        stopped_by: ``"duration"``, ``"signal"`` or ``"error"``.
        gpus: the governed NVML indices.
        provenance: what the power figures are (``measured`` through NVML, ``emulated``).
    """

    plan: GovernorPlan
    summary: dict[str, Any]
    restored: list[str] = field(default_factory=list)
    error: SpecbandError | None = None
    drift: DriftReport | None = None
    stopped_by: str = "duration"
    gpus: tuple[int, ...] = ()
    provenance: str = "measured"


class _Loop:
    """The loop's state (module docstring)."""

    def __init__(self, r: GovernRequest, gov: Governed, reporter: Reporter) -> None:
        self.r, self.gov, self.reporter = r, gov, reporter
        plan = gov.plan
        self.clock = gov.clock
        self.ranges = [
            GpuRange(rng.min_w, rng.default_w)
            if rng is not None
            else GpuRange(plan.gpu.min_limit_w, plan.gpu.max_limit_w)
            for rng in gov.ranges
        ]
        default_w = self.ranges[0].max_w
        self.settings = ControlSettings(
            band_low=plan.band[0],
            band_high=plan.band[1],
            window_s=r.window_s,
            dwell_s=r.dwell_s,
            max_step_w=r.max_step_w or round(0.1 * default_w, 1),
        )
        self.readers = [GpuReader(d, i, self.clock) for d, i in zip(gov.devices, gov.gpus, strict=True)]
        starts = [self._start_limit(d, rng) for d, rng in zip(gov.devices, self.ranges, strict=True)]
        self.controllers = [
            BandController(self.settings, rng, [t.power_limit_w for t in plan.tiers], w)
            for rng, w in zip(self.ranges, starts, strict=True)
        ]
        self.tracker = TierTracker(plan.tier_index, self.settings.switch_readings)
        self.guards: list[PowerLimitGuard] = []
        self.ledger = Ledger([t.label for t in plan.tiers])
        self.sliding = [SlidingUtilization(r.window_s) for _ in gov.devices]
        self.log = GovernLog(r.log, r.log_max_bytes, reporter.note) if r.log is not None else None
        self.metrics = GovernMetrics(list(gov.gpus), plan.band) if r.metrics_port is not None else None
        self.windows = AcceptanceWindows(DRIFT_WINDOW_S, None if gov.facts.adaptive else gov.facts.action)
        self.drift_check = DriftCheck(plan.acceptance)
        self.drift: DriftReport | None = None
        self.last_sample: ServerSample | None = None
        self.last_gpu: list[GpuReading | None] = [None] * len(gov.devices)
        self.last_raw: list[GpuRaw | None] = [None] * len(gov.devices)
        self.frozen_since: float | None = None
        self.tier: int | None = None
        self.t_start = self.clock.now()
        self.last_ok = self.t_start
        self._limit_notes: set[int] = set()
        self.set_at_read = [c.current_w for c in self.controllers]

    @staticmethod
    def _start_limit(device: Any, rng: GpuRange) -> float:
        found = device.power_limit_setting_w() if hasattr(device, "power_limit_setting_w") else None
        return float(found) if found is not None else rng.max_w

    # ------------------------------------------------------------------ start and end
    def take_locks(self) -> None:
        """Take every governed GPU's lock (setting the limit it has: nothing changes yet).

        Raises:
            PowerLimitBusyError: another process sets one of them (the locks taken are released).
        """
        if self.r.dry_run:
            return
        for device, controller in zip(self.gov.devices, self.controllers, strict=True):
            guard = PowerLimitGuard(device)
            self.guards.append(guard)
            guard.set(controller.current_w)
        originals = ", ".join(f"GPU {i}: {g.original_w:g} W" for i, g in zip(self.gov.gpus, self.guards, strict=True))
        self.event("start_limits", originals=originals)

    def restore(self) -> list[str]:
        """Put every limit back (once), however the loop ended."""
        lines = []
        for index, guard in zip(self.gov.gpus, self.guards, strict=False):
            if guard.original_w is not None and guard.current_w is not None:
                lines.append(f"GPU {index}: power limit restored to {guard.original_w:g} W")
            guard.restore()
        self.guards = []
        for line in lines:
            self.event("restore", message=line)
        return lines

    def close(self) -> None:
        """Close the log, the metrics server and the devices."""
        if self.metrics is not None:
            self.metrics.close()
        if self.log is not None:
            self.log.close()
        for d in self.gov.devices:
            d.close()

    def event(self, kind: str, /, **fields: Any) -> None:
        """One log line (no-op without ``--log``)."""
        if self.log is not None:
            self.log.write(kind, t_s=round(self.clock.now() - self.t_start, 3), **fields)

    # ------------------------------------------------------------------ one reading
    def tick(self, scraper: ServerScraper) -> None:
        """Read, check, decide and account once.

        Raises:
            EngineError: no usable server reading for ``--server-timeout`` seconds.
        """
        raws = [reader.read() for reader in self.readers]
        self.set_at_read = [c.current_w for c in self.controllers]
        scrape = scraper.scrape(self.r.timeout_s)
        sample = self._server(scrape)
        if sample is None:
            lost_for = self.clock.now() - self.last_ok
            if lost_for > self.r.server_timeout_s:
                raise EngineError(f"{self.r.url}: no usable reading for {lost_for:.0f} s (--server-timeout)")
            return
        self.last_ok = sample.t_s
        tokens = self._tokens(sample)
        tier_before = self.tier
        self.tier, switched = self.tracker.observe(sample.batch_size)
        if switched:
            for i, c in enumerate(self.controllers):
                self.apply(i, c.enter(self.tier, sample.t_s))
        parts = self._gpus(raws)
        seconds = sample.t_s - self.last_sample.t_s if self.last_sample is not None else 0.0
        if seconds > 0:
            self.ledger.add(tier_before, seconds, parts, tokens)
        self.last_sample = sample
        self._acceptance(sample)
        self._report(sample, parts, tokens)

    def _server(self, scrape: Scrape) -> ServerSample | None:
        if scrape.metrics is None or scrape.arrived_s is None:
            self._skip(Skip("server", scrape.error or "no answer"))
            return None
        m, last = scrape.metrics, self.last_sample
        running = m.running is not None and m.running > 0
        if running and last is not None and m.output_tokens_total is not None:
            if m.output_tokens_total == last.output_tokens_total:
                self.frozen_since = self.frozen_since or last.t_s
            else:
                self.frozen_since = None
        else:
            self.frozen_since = None
        checked = check_server(
            m,
            scrape.arrived_s,
            asked_s=scrape.asked_s,
            max_age_s=self.r.timeout_s,
            previous=last,
            max_batch_size=self.gov.facts.max_batch_size,
            frozen_since_s=self.frozen_since,
        )
        if isinstance(checked, Skip):
            self._skip(checked)
            if "went back" in checked.reason:
                self.last_sample = None  # a restarted server: its next reading starts afresh
            return None
        return checked

    def _skip(self, skip: Skip) -> None:
        self.ledger.unread_s += self.r.interval_s
        self.event("skipped", source=skip.what, reason=skip.reason)
        if self.metrics is not None:
            self.metrics.skipped.labels(source=skip.what.split()[0]).inc()

    def _tokens(self, sample: ServerSample) -> float:
        last = self.last_sample
        if last is None or sample.output_tokens_total is None or last.output_tokens_total is None:
            return 0.0
        return max(0.0, sample.output_tokens_total - last.output_tokens_total)

    def _gpus(self, raws: list[GpuRaw]) -> list[tuple[int, GpuInterval]]:
        parts: list[tuple[int, GpuInterval]] = []
        for i, (raw, c) in enumerate(zip(raws, self.controllers, strict=True)):
            index = self.gov.gpus[i]
            limit_w = self.set_at_read[i] if self.r.dry_run or raw.limit_w is None else raw.limit_w
            self._check_limit(i, raw, c)
            checked = check_gpu(
                raw, index, max_limit_w=self.ranges[i].max_w, previous=self.last_raw[i], limit_w=limit_w
            )
            if isinstance(checked, Skip):
                if not isinstance(self.gov.devices[i], NullDevice):  # a dry run without NVML reads no GPU
                    self._skip(checked)
                continue
            before = self.last_gpu[i]
            if before is not None:
                part = interval_of(before, checked, limit_w, self.ranges[i], self.settings_band, self.sliding[i])
                if part is not None:
                    parts.append((index, part))
            self.last_gpu[i], self.last_raw[i] = checked, raw
            if self.tier is not None:
                self.apply(i, c.observe(checked))
        return parts

    @property
    def settings_band(self) -> tuple[float, float]:
        """The band, fractions of the limit."""
        return self.settings.band_low, self.settings.band_high

    def _check_limit(self, i: int, raw: GpuRaw, c: BandController) -> None:
        """Say once when a GPU's limit is not the one govern set (another tool moved it)."""
        if self.r.dry_run or raw.limit_w is None or abs(raw.limit_w - self.set_at_read[i]) <= 1.0:
            return
        if i not in self._limit_notes:
            self._limit_notes.add(i)
            where = f"GPU {self.gov.gpus[i]} is at {raw.limit_w:g} W"
            line = f"{where}, not the {self.set_at_read[i]:g} W govern set (changed by another tool?)"
            self.reporter.note(line)
            self.event("note", message=line)

    def apply(self, i: int, decision: Decision | None) -> None:
        """Carry out (or, in a dry run, only say) one GPU's decision."""
        if decision is None:
            return
        index = self.gov.gpus[i]
        verb = "would set" if self.r.dry_run else "set"
        if decision.changes:
            if not self.r.dry_run:
                self.controllers[i].current_w = self.guards[i].set(decision.limit_w)
            tier = self.gov.plan.tiers[decision.tier].label
            what = f"{verb} {decision.limit_w:g} W (was {decision.previous_w:g} W)"
            line = f"GPU {index}: {what}, tier {tier}: {decision.reason}"
        else:
            line = f"GPU {index}, tier {self.gov.plan.tiers[decision.tier].label}: {decision.reason}"
        self.reporter.note(line)
        self.event(
            "decision",
            gpu=index,
            kind=decision.kind,
            tier=self.gov.plan.tiers[decision.tier].label,
            limit_w=decision.limit_w,
            previous_w=decision.previous_w,
            utilization=None if decision.utilization is None else round(decision.utilization, 4),
            reason=decision.reason,
            dry_run=self.r.dry_run,
        )

    def _acceptance(self, sample: ServerSample) -> None:
        window = self.windows.add(sample)
        if window is None:
            return
        note, drifted = self.drift_check.check(window)
        self.event("acceptance", action=window.action, accept_length=round(window.accept_length, 4),
                   weight=window.weight, batch_size=window.batch_size)  # fmt: skip
        if note:
            self.reporter.note(note)
            self.event("note", message=note)
        if drifted:
            self._drifted(window)

    def _drifted(self, window: AcceptanceWindow) -> None:
        self.drift = drift_report(self.r, self.gov, self.drift_check, window)
        for line in self.drift.lines:
            self.reporter.note(line)
        self.event("drift", lines=list(self.drift.lines), path=str(self.drift.path))
        if self.metrics is not None:
            self.metrics.drift.set(1)

    def _report(self, sample: ServerSample, parts: list[tuple[int, GpuInterval]], tokens: float) -> None:
        plan = self.gov.plan
        tier = "idle" if self.tier is None else plan.tiers[self.tier].label
        gpus = []
        for i, c in enumerate(self.controllers):
            last = self.last_gpu[i]
            power = None if last is None else last.power_w
            u = None if last is None else last.power_w / c.current_w
            gpus.append(GpuStatus(self.gov.gpus[i], c.current_w, power, u))
        busy = self.ledger.total(busy_only=True)
        frac = None if busy.gpu_seconds <= 0 else busy.in_band_window_s / busy.gpu_seconds
        elapsed = sample.t_s - self.t_start
        status = Status(elapsed, tier, sample.batch_size, tuple(gpus), frac, busy.in_band_window_s, self.r.dry_run)
        self.reporter.status(status)
        self.event(
            "reading",
            batch_size=sample.batch_size,
            waiting=sample.waiting,
            tier=tier,
            output_tokens_total=sample.output_tokens_total,
            accept_length=sample.accept_length,
            gpus=[{"gpu": g.index, "limit_w": g.limit_w, "power_w": g.power_w,
                   "utilization": None if g.utilization is None else round(g.utilization, 4)} for g in gpus],
        )  # fmt: skip
        if self.metrics is not None:
            self._export(sample, gpus, parts, tokens)

    def _export(
        self, sample: ServerSample, gpus: list[GpuStatus], parts: list[tuple[int, GpuInterval]], tokens: float
    ) -> None:
        m = self.metrics
        assert m is not None
        m.tier.set(0 if self.tier is None else self.gov.plan.tiers[self.tier].planned_batch_size)
        m.batch_size.set(sample.batch_size)
        for g in gpus:
            m.limit.labels(gpu=str(g.index)).set(g.limit_w)
            if g.power_w is not None and g.utilization is not None:
                m.power.labels(gpu=str(g.index)).set(g.power_w)
                m.utilization.labels(gpu=str(g.index)).set(g.utilization)
        for index, part in parts:
            m.energy.labels(gpu=str(index)).inc(part.energy_j)
            if part.in_band_window:
                m.in_band.labels(gpu=str(index)).inc(part.seconds)
        m.tokens.inc(tokens)
        jpt = self.ledger.joules_per_token()
        if jpt is not None:
            m.jpt.set(jpt)


def _loop(loop: _Loop, scraper: ServerScraper) -> str:
    """Tick until ``--duration`` (or a signal: KeyboardInterrupt); ``"duration"`` or ``"signal"``."""
    r, clock = loop.r, loop.clock
    next_t = clock.now()
    while True:
        if r.duration_s and clock.now() - loop.t_start >= r.duration_s:
            return "duration"
        loop.tick(scraper)
        next_t += r.interval_s
        clock.sleep(max(0.0, next_t - clock.now()))
        if next_t < clock.now() - r.interval_s:
            next_t = clock.now()  # fell behind (a slow read): no burst of catch-up readings


def run_governor(r: GovernRequest, reporter: Reporter, *, http: Callable[[], ProbeHttp] | None = None) -> GovernOutcome:
    """Govern the server of ``r.url`` until ``--duration``, Ctrl-C or SIGTERM (module docstring).

    Args:
        r: the options.
        reporter: where notes and the status go.
        http: a factory of the client for the start-up reads (default: the bounded probe client).

    Returns:
        the outcome; a failure that ended the loop after the limits were restored is in
        ``error`` (the caller prints the summary first).

    Raises:
        ConfigError, DataError, EngineError, DeviceError: before the loop starts (nothing set).
    """
    assert r.url is not None
    url = r.url
    gov = prepare(r, http or (lambda: ProbeHttp(url, r.timeout_s)))
    for line in gov.notes:
        reporter.note(line)
    loop = _Loop(r, gov, reporter)
    read = not isinstance(gov.devices[0], NullDevice)
    outcome = GovernOutcome(
        gov.plan, {}, gpus=gov.gpus, provenance=gov.devices[0].provenance if read else "no GPU read"
    )
    scraper = ServerScraper(url, gov.engine, r.timeout_s, gov.clock)
    try:
        with interrupts_as_keyboard_interrupt():
            try:
                loop.take_locks()
                loop.event("start", url=url, engine=gov.engine.name, gpus=list(gov.gpus), dry_run=r.dry_run,
                           plan=gov.plan.to_json(), time_scale=gov.clock.time_scale)  # fmt: skip
                if loop.metrics is not None:
                    loop.metrics.serve(r.metrics_port or 0, r.metrics_host)
                outcome.stopped_by = _loop(loop, scraper)
            except KeyboardInterrupt:
                outcome.stopped_by = "signal"
            except EngineError as exc:
                outcome.error, outcome.stopped_by = exc, "error"
            finally:
                with contextlib.suppress(KeyboardInterrupt), deferred():
                    outcome.restored = loop.restore()
    finally:
        scraper.close()
        outcome.summary = loop.ledger.to_json()
        outcome.drift = loop.drift
        loop.event("summary", stopped_by=outcome.stopped_by, **outcome.summary)
        loop.close()
    return outcome

"""Where the governor's readings come from, bounded in size and in time.

:class:`ServerScraper` reads the server's ``/metrics`` through the probe's bounded client
(:class:`~specband.engines.client.ProbeHttp`: each answer read in chunks up to 8 MiB, no
proxies, no redirects) in a worker thread, and waits for it no longer than the time left: an
answer that has not come is *no reading* this time (the worker is not asked again until it
returns, so a server that drips one byte at a time ties up one thread, not one per second),
and an answer that comes late is stale. :class:`GpuReader` reads one GPU through the devices
layer (NVML, or the emulator's GPU); a backend error is a missing reading, never an exception
in the loop.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from specband.core.errors import SpecbandError
from specband.devices.base import Clock, GpuDevice, is_throttling
from specband.engines.base import Engine
from specband.engines.client import ProbeHttp
from specband.engines.probing import LiveMetrics
from specband.govern.readings import GpuRaw

__all__ = ["GpuReader", "Scrape", "ServerScraper"]


@dataclass(frozen=True)
class Scrape:
    """One attempt to read the server: its metrics (``None`` with ``error``), when it was asked
    for and when the answer came (governor clock, s)."""

    metrics: LiveMetrics | None
    asked_s: float
    arrived_s: float | None
    error: str | None


class _Fetch:
    """One ``GET /metrics`` in flight in a daemon thread."""

    def __init__(self, http: ProbeHttp, clock: Clock) -> None:
        self.asked_s = clock.now()
        self.done = threading.Event()
        self.page: str | None = None
        self.error: str | None = None
        self.arrived_s: float | None = None

        def run() -> None:
            try:
                self.page = http.get_text("/metrics")
                if self.page is None:
                    self.error = "/metrics answered 404 (sglang serves it with --enable-metrics)"
            except SpecbandError as exc:
                self.error = str(exc)
            except Exception as exc:  # a closed client at exit, a decoding failure: never in the loop
                self.error = f"{type(exc).__name__}: {str(exc)[:200]}"
            finally:
                self.arrived_s = clock.now()
                self.done.set()

        threading.Thread(target=run, name="specband-govern-scrape", daemon=True).start()


class ServerScraper:
    """Reads ``/metrics`` with a bound on the time waited (module docstring).

    Args:
        url: the server's base URL.
        engine: its engine (parses the page).
        timeout_s: seconds one read may take (each network read; the wait is bounded apart).
        clock: the governor's clock.
    """

    def __init__(self, url: str, engine: Engine, timeout_s: float, clock: Clock) -> None:
        self.http = ProbeHttp(url, timeout_s)
        self.engine = engine
        self.clock = clock
        self._inflight: _Fetch | None = None

    def scrape(self, wait_s: float) -> Scrape:
        """Ask (unless a read is still in flight) and wait up to ``wait_s`` seconds of the
        governor's clock for the answer."""
        fetch = self._inflight
        if fetch is None:
            fetch = self._inflight = _Fetch(self.http, self.clock)
        if not fetch.done.wait(max(0.0, self.clock.to_real(wait_s))):
            waited = self.clock.now() - fetch.asked_s
            return Scrape(None, fetch.asked_s, None, f"no answer from /metrics for {waited:.1f} s")
        self._inflight = None
        if fetch.error is not None or fetch.page is None:
            return Scrape(None, fetch.asked_s, fetch.arrived_s, fetch.error or "no page")
        return Scrape(self.engine.serving.live_metrics(fetch.page), fetch.asked_s, fetch.arrived_s, None)

    def close(self) -> None:
        """Close the connections (a read still in flight ends with an error in its thread)."""
        self.http.close()


class GpuReader:
    """One GPU's readings (module docstring).

    Args:
        device: the GPU.
        index: its NVML index (for messages).
        clock: the governor's clock.
    """

    def __init__(self, device: GpuDevice, index: int, clock: Clock) -> None:
        self.device = device
        self.index = index
        self.clock = clock

    def _get(self, read: Any) -> Any:
        try:
            return read()
        except SpecbandError:
            return None

    def read(self) -> GpuRaw:
        """Power, energy counter, the limit set and whether a power or thermal cap holds it."""
        d = self.device
        t = self.clock.now()
        power = self._get(d.read_power_w)
        energy = self._get(d.read_energy_mj) if d.energy_method == "counter" else None
        limit = self._get(d.power_limit_setting_w)
        reasons = self._get(d.read_clock_event_reasons)
        return GpuRaw(t, power, energy, limit, is_throttling(reasons))

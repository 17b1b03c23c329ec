"""The governor's state in Prometheus's text format (``--metrics-port``), served with
prometheus-client from a registry of its own (only these metrics, none of the process
collectors), on 127.0.0.1 unless ``--metrics-host`` says otherwise.

Metrics (``gpu`` label: the NVML index; every figure measured on this machine):

=====================================================  ======  =====================================
``specband_govern_tier``                               gauge   the tier's planned batch size (0: idle)
``specband_govern_batch_size``                         gauge   the server's running batch
``specband_govern_power_limit_watts{gpu}``             gauge   the limit set (dry run: would set)
``specband_govern_power_watts{gpu}``                   gauge   board power
``specband_govern_utilization{gpu}``                   gauge   power / limit
``specband_govern_in_band_seconds_total{gpu}``         counter seconds inside the band
``specband_govern_energy_joules_total{gpu}``           counter energy (NVML's counter)
``specband_govern_output_tokens_total``                counter the server's output tokens
``specband_govern_joules_per_token``                   gauge   energy / output tokens so far
``specband_govern_drift``                              gauge   1 once the acceptance left the plan's interval
``specband_govern_skipped_readings_total{source}``     counter readings logged and not acted on
``specband_govern_band_low`` / ``_band_high``           gauge   the band (fractions), for panels
=====================================================  ======  =====================================
"""

from __future__ import annotations

from typing import Any

from specband.core.errors import ConfigError

__all__ = ["GovernMetrics"]

_PREFIX = "specband_govern_"


class GovernMetrics:
    """The exported gauges and counters (module docstring), and the HTTP server serving them.

    Args:
        gpus: the governed GPUs' indices.
        band: the band, fractions of the limit.
    """

    def __init__(self, gpus: list[int], band: tuple[float, float]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge  # lazy: only with --metrics-port

        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.tier = Gauge(_PREFIX + "tier", "The plan tier's planned batch size (0: idle).", registry=reg)
        self.batch_size = Gauge(_PREFIX + "batch_size", "The server's running batch size.", registry=reg)
        self.limit = Gauge(
            _PREFIX + "power_limit_watts", "Power limit set (dry run: would set), W.", ["gpu"], registry=reg
        )
        self.power = Gauge(_PREFIX + "power_watts", "Board power, W (NVML).", ["gpu"], registry=reg)
        self.utilization = Gauge(_PREFIX + "utilization", "Board power over the limit.", ["gpu"], registry=reg)
        self.in_band = Counter(_PREFIX + "in_band_seconds", "Seconds inside the band.", ["gpu"], registry=reg)
        self.energy = Counter(_PREFIX + "energy_joules", "Energy drawn, J (NVML's counter).", ["gpu"], registry=reg)
        self.tokens = Counter(_PREFIX + "output_tokens", "Output tokens of the server.", registry=reg)
        self.jpt = Gauge(_PREFIX + "joules_per_token", "Energy over output tokens so far, J.", registry=reg)
        self.drift = Gauge(_PREFIX + "drift", "1 once the acceptance left the plan's interval.", registry=reg)
        self.skipped = Counter(_PREFIX + "skipped_readings", "Readings not acted on.", ["source"], registry=reg)
        Gauge(_PREFIX + "band_low", "The band's bottom, fraction of the limit.", registry=reg).set(band[0])
        Gauge(_PREFIX + "band_high", "The band's top, fraction of the limit.", registry=reg).set(band[1])
        for g in gpus:
            for family in (self.in_band, self.energy):
                family.labels(gpu=str(g))
        self._server: Any = None

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Start serving ``/metrics`` on ``host:port`` in a daemon thread.

        Raises:
            ConfigError: the port cannot be bound (one line naming ``--metrics-port``).
        """
        from prometheus_client import start_http_server  # lazy: only with --metrics-port

        try:
            self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"--metrics-port {port}: cannot listen on {host} ({exc.strerror or exc})") from None

    @property
    def port(self) -> int | None:
        """The port served on (``None`` before :meth:`serve`)."""
        return None if self._server is None else int(self._server.server_address[1])

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def text(self) -> str:
        """The page as a scrape would read it."""
        from prometheus_client import generate_latest  # lazy: only with --metrics-port

        return generate_latest(self.registry).decode()

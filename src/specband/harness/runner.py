"""Measuring one sweep row (docs/FACTS.md §4, sglang's ``bench_speculative.py`` method plus energy).

For one ``(batch size, action)``:

1. read the idle GPU (the ``pre`` decision state: temperature, memory, utilisation)
   before the server launches;
2. launch the server (:mod:`specband.harness.process`) and wait for ``/health``; a failed
   launch is retried once at ``retry_mem_fraction`` (0.65 -> 0.55);
3. send one warm-up batch of ``bs`` requests;
4. read ``/get_server_info`` (to know which step times were recorded before the timed
   batch), open the energy and telemetry window, send ``max(num_prompts, bs)`` requests
   at concurrency ``bs``, close the window, read ``/get_server_info`` again;
5. ``step_time_s = p20`` of the step times recorded at batch size ``bs`` *during the timed
   batch only* (:func:`specband.engines.sglang_serving.timed_batch_step_times`); ``speed_tok_s =
   accept_length / step_time_s`` (``speed_source = "step_time"``); without step times or
   accept length, ``speed_tok_s = tokens / elapsed / bs`` (``"wall_clock"``);
6. stop the server's process group and sleep the cool-down (5 s).

``accept_length`` is the timed batch's own ``sum(completion_tokens) /
sum(spec_verify_ct)`` from each response's ``meta_info`` when sglang returns
``spec_verify_ct`` (the workload's, warm-up excluded); else sglang's
``avg_spec_accept_length`` (as sglang's bench script reads it; cumulative since launch or
``/flush_cache``, warm-up included); the baseline's is 1 by definition; otherwise it stays
null (``accept_length_source`` says which: ``meta_info``, ``server_info``, ``baseline``).
That is sglang's way; each engine has its own (:meth:`specband.engines.base.EngineServing.accept_probe`):
vLLM records no step times and gives the accept length through its ``/metrics`` spec-decode
counters (source ``metrics``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specband.contract.actions import Action
from specband.contract.record import SweepRecord, error_class_of
from specband.core.errors import ConfigError, EngineError
from specband.devices.base import Clock, GpuDevice, TelemetrySample, TelemetryWindow, WindowResult
from specband.engines.client import PROMPTS, emulator_time_scale, new_client, p20, run_batch
from specband.engines.failures import LaunchError
from specband.engines.serverconfig import ServerConfig, build_launch_command
from specband.harness.draft_health import draft_flag
from specband.harness.process import ServerProcess

__all__ = [
    "LaunchOutcome",
    "MeasureSettings",
    "Measurement",
    "RetriedLaunchError",
    "base_record",
    "error_record",
    "launch_with_retry",
    "measure_on_server",
    "measured_record",
]


def check_mem_fractions(mem_fraction_static: float, retry_mem_fraction: float | None) -> None:
    """Check ``--mem-fraction-static`` and ``--retry-mem-fraction`` (``None``: no retry).

    Raises:
        ConfigError: a fraction outside (0, 1), or a retry fraction not below the first
            (the retry after a failed launch asks sglang for less memory, docs/FACTS.md §1).
    """
    for option, value in (("--mem-fraction-static", mem_fraction_static), ("--retry-mem-fraction", retry_mem_fraction)):
        if value is not None and not 0.0 < value < 1.0:
            raise ConfigError(f"{option} must be in (0, 1), got {value}")
    if retry_mem_fraction is not None and retry_mem_fraction >= mem_fraction_static:
        raise ConfigError(
            f"--retry-mem-fraction {retry_mem_fraction:g} must be below --mem-fraction-static "
            f"{mem_fraction_static:g}: the retry after a failed launch asks for less memory"
        )


@dataclass(frozen=True)
class MeasureSettings:
    """How runs are launched and measured.

    Attributes:
        server: model, draft, port, command and fixed flags.
        mem_fraction_static: first ``--mem-fraction-static`` (0.65).
        retry_mem_fraction: the one retry after a failed launch (0.55; ``None``: no retry).
        num_prompts: timed requests are ``max(num_prompts, bs)`` (16).
        max_new_tokens: tokens per request (512).
        prompts: the prompt cycle (4 fixed prompts, or ``--prompts FILE``).
        workload: the workload's name (``builtin``, or the prompts file's name).
        warmup: send a warm-up batch of ``bs`` requests first.
        launch_timeout_s: (emulated) seconds to wait for ``/health``.
        health_poll_s: (emulated) seconds between health polls.
        cooldown_s: (emulated) seconds to sleep after a server stops (5).
        request_timeout_s: (emulated) seconds one request may take (at least 10 s real).
        stop_grace_s: real seconds between SIGTERM and SIGKILL.
        port_wait_s: real seconds to wait for a busy server port to free before refusing
            it (a previous server may still be exiting), at the sweep's start and before
            each launch.
        sample_period_s: real seconds between telemetry samples.
        hardware: ``hardware`` column (``None``: the device's name).
        log_dir: where server logs go.
        env: the servers' environment (``None``: this process's plus :data:`SGLANG_ENV`).
        action_set: the grid's action set (``contract``, or ``extended`` when an action is outside
            the 19): written into every row as ``action_set`` when not ``contract`` (contract rows
            keep the published columns); a resumed or merged sweep must share it.
        time_scale: real seconds per emulated second of the runs (``--time-scale``; 1 for
            real time): a row's ``time_scale``, which a resumed sweep must share.
        provenance: the rows' ``provenance`` when the server, not the device, decides it
            (``"emulated"``: the server command runs ``specband emulate`` whatever
            ``--device`` reads); ``None``: the device's.
    """

    server: ServerConfig
    action_set: str = "contract"
    mem_fraction_static: float = 0.65
    retry_mem_fraction: float | None = 0.55
    num_prompts: int = 16
    max_new_tokens: int = 512
    prompts: tuple[str, ...] = PROMPTS
    workload: str = "builtin"
    warmup: bool = True
    launch_timeout_s: float = 600.0
    health_poll_s: float = 1.0
    cooldown_s: float = 5.0
    request_timeout_s: float = 1800.0
    stop_grace_s: float = 15.0
    port_wait_s: float = 10.0
    sample_period_s: float = 0.1
    hardware: str | None = None
    log_dir: Path = field(default_factory=lambda: Path("specband-server-logs"))
    env: Mapping[str, str] | None = None
    time_scale: float = 1.0
    provenance: str | None = None

    def __post_init__(self) -> None:
        check_mem_fractions(self.mem_fraction_static, self.retry_mem_fraction)
        for name in ("num_prompts", "max_new_tokens"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        for name, shown in (
            ("launch_timeout_s", "--launch-timeout"),
            ("health_poll_s", "health poll period"),
            ("request_timeout_s", "--request-timeout"),
            ("sample_period_s", "telemetry sample period"),
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{shown} must be > 0 s, got {getattr(self, name)}")
        if not (math.isfinite(self.cooldown_s) and self.cooldown_s >= 0):
            raise ConfigError(f"--cooldown must be a finite number of seconds >= 0, got {self.cooldown_s}")
        if not (math.isfinite(self.stop_grace_s) and self.stop_grace_s >= 0):
            raise ConfigError(f"stop grace must be a finite number of seconds >= 0, got {self.stop_grace_s}")
        if not (math.isfinite(self.port_wait_s) and self.port_wait_s >= 0):
            raise ConfigError(f"port wait must be a finite number of seconds >= 0, got {self.port_wait_s}")
        if not self.prompts:
            raise ConfigError("the workload needs at least one prompt")

    @property
    def workload_sha256(self) -> str:
        """SHA-256 of the prompt cycle (each prompt's UTF-8 bytes, NUL-separated)."""
        return hashlib.sha256("\0".join(self.prompts).encode("utf-8")).hexdigest()

    def run_settings(self) -> dict[str, Any]:
        """The row columns every run of one sweep shares (a resumed sweep must match)."""
        server = self.server
        columns = server.engine.serving.row_columns(server)
        out: dict[str, Any] = {
            "engine": columns.engine,
            "engine_version": columns.engine_version,
            "dtype": server.dtype,
            "attention_backend": columns.attention_backend,
            "max_new_tokens": self.max_new_tokens,
            "num_prompts": self.num_prompts,
            "workload": self.workload,
            "workload_sha256": self.workload_sha256,
            "time_scale": self.time_scale,
        }
        if self.action_set != "contract":
            out["action_set"] = self.action_set
        return out

    def server_env(self) -> dict[str, str]:
        """The environment every server gets: the engine's
        (:meth:`specband.engines.base.EngineServing.server_env`: sglang's docs/FACTS.md §1 variables,
        vLLM's :func:`~specband.engines.vllm_serving.vllm_server_env`) from this one and ``--env``."""
        base = dict(self.env) if self.env is not None else dict(os.environ)
        return self.server.engine.serving.server_env(base, self.server.env)


@dataclass(frozen=True)
class LaunchOutcome:
    """A healthy server.

    Attributes:
        server: the running process group (the caller stops it).
        mem_fraction_static: the fraction it runs with.
        retry_mem_fraction: set when the first launch failed and this is the retry.
        launch_wall_s: real (wall-clock) seconds from the process start to a healthy
            ``/health``, never scaled by the emulator's time scale (the emulator's real
            start-up is not compressed, so scaled it would read e.g. 218 s at 0.002).
        launches: processes started (1, or 2 after a retry).
    """

    server: ServerProcess
    mem_fraction_static: float
    retry_mem_fraction: float | None
    launch_wall_s: float
    launches: int


class RetriedLaunchError(LaunchError):
    """The launch failed at the first mem fraction and again at the retry fraction.

    Attributes:
        retry_mem_fraction: the retry's fraction.
        launches: processes started.
    """

    def __init__(self, error: LaunchError, retry_mem_fraction: float | None, launches: int) -> None:
        super().__init__(error.reason, error.detail, error.returncode)
        self.retry_mem_fraction = retry_mem_fraction
        self.launches = launches


def _start(
    settings: MeasureSettings, clock: Clock, action: Action, max_bs: int | None, mem: float, log_path: Path
) -> tuple[ServerProcess, float]:
    command = build_launch_command(settings.server, action, max_bs, mem)
    server = ServerProcess(
        command,
        host=settings.server.host,
        port=settings.server.port,
        log_path=log_path,
        env=settings.server_env(),
        clock=clock,
        port_wait_s=settings.port_wait_s,
    )
    t0 = time.monotonic()
    try:
        server.start()
        server.wait_healthy(settings.launch_timeout_s, settings.health_poll_s)
    except BaseException:
        server.stop(settings.stop_grace_s)
        raise
    return server, time.monotonic() - (server.started_monotonic or t0)  # real seconds, never scaled


def launch_with_retry(
    settings: MeasureSettings, clock: Clock, action: Action, max_bs: int | None, log_path: Path
) -> LaunchOutcome:
    """Launch a healthy server for ``action`` (valid already: the grid's, or the pick's);
    after a failed launch, retry once at ``retry_mem_fraction``.

    ``max_bs`` pins ``--cuda-graph-max-bs`` and ``--max-running-requests``; ``None`` leaves
    them to sglang (a server whose batch size moves, ``launch --schedule``).

    Raises:
        RetriedLaunchError: both launches failed (or the only one, without a retry).
        PortInUseError: the port answers before launch (the sweep must stop).
        LauncherError: the server command cannot be run at all (not retried; the sweep
            must stop).
        HarnessError: the server log cannot be written.
    """
    mem = settings.mem_fraction_static
    try:
        server, launch_wall_s = _start(settings, clock, action, max_bs, mem, log_path)
        return LaunchOutcome(server, mem, None, launch_wall_s, 1)
    except LaunchError as first:
        retry = settings.retry_mem_fraction
        if retry is None or retry >= mem:
            raise RetriedLaunchError(first, None, 1) from None
    clock.sleep(settings.cooldown_s)
    try:
        server, launch_wall_s = _start(settings, clock, action, max_bs, retry, log_path)
    except LaunchError as second:
        raise RetriedLaunchError(second, retry, 2) from None
    return LaunchOutcome(server, retry, retry, launch_wall_s, 2)


@dataclass(frozen=True)
class Measurement:
    """What one timed batch on a healthy server gave (durations in emulated seconds)."""

    accept_length: float | None
    accept_length_source: str | None
    step_time_s: float | None
    step_time_count: int
    speed_tok_s: float
    speed_source: str
    wall_clock_s: float
    wall_clock_tok_s: float | None
    total_output_tokens: int
    energy_joules: float | None
    avg_power_watts: float | None
    energy_method: str
    energy_flag: str | None
    gpu_temp_c: float | None
    gpu_power_w: float | None
    gpu_util_pct: float | None
    gpu_mem_used_mb: float | None
    gpu_throttling: bool | None


def measure_on_server(
    settings: MeasureSettings,
    device: GpuDevice,
    clock: Clock,
    server: ServerProcess,
    batch_size: int,
    action: Action,
) -> Measurement:
    """Warm-up, timed batch inside the telemetry window, server info before and after
    (``action``: the run's, valid already).

    Raises:
        EngineError: a request failed (``server_died_mid_batch: ...`` when the server
            died), the server info could not be read, or the timed batch produced nothing.
    """
    url = server.base_url
    request_timeout = max(10.0, clock.to_real(settings.request_timeout_s))
    emulator_scale = emulator_time_scale(url, request_timeout)
    if emulator_scale is not None and settings.provenance != "emulated" and device.provenance != "emulated":
        raise ConfigError(
            f"the server at {url} is specband's emulator (its answers say so) but the sweep takes it for a real "
            'engine, so its rows would say measured: run the emulator as `--server-command "python -m specband '
            'emulate"` (the rows then say emulated)'
        )
    window = TelemetryWindow(device, clock, settings.sample_period_s)
    results: list[WindowResult] = []
    serving = settings.server.engine.serving
    probe = serving.accept_probe(url, action, batch_size)
    with new_client(batch_size, request_timeout) as http:
        common: dict[str, Any] = dict(
            max_new_tokens=settings.max_new_tokens,
            prompts=settings.prompts,
            timeout_s=request_timeout,
            server_alive=server.alive,
            client=http,
            openai_model=serving.completion_model(settings.server),
        )
        if settings.warmup:
            run_batch(url, num_requests=batch_size, concurrency=batch_size, **common)
        probe.before()
        try:
            batch = run_batch(
                url,
                num_requests=max(settings.num_prompts, batch_size),
                concurrency=batch_size,
                on_first_send=window.start,
                on_last_done=lambda: results.append(window.stop()),
                **common,
            )
        finally:
            if window.active:
                results.append(window.stop())
    result = results[0]
    if batch.total_output_tokens <= 0:
        raise EngineError("empty_batch: the timed batch returned no tokens")
    accept, accept_source, window_times = probe.after(batch)
    elapsed = result.elapsed_s if result.elapsed_s > 0 else batch.elapsed_real_s / clock.time_scale
    energy_j, energy_flag = result.energy_j, result.energy_flag
    if emulator_scale is not None and not math.isclose(emulator_scale, clock.time_scale, rel_tol=1e-6):
        # an emulator running at its own --time-scale against a sweep on another clock (--device
        # none or nvml): its step times are in its emulated seconds, so the wall clock must be too,
        # and so the energy: the device's power over the emulated seconds (the window's energy
        # was over the real ones: 0.5 J beside 5.9 s at 71.7 W, hostile trial V07)
        elapsed = batch.elapsed_real_s / emulator_scale
        if result.avg_power_w is not None:
            energy_j, energy_flag = result.avg_power_w * elapsed, "energy_on_emulator_clock"
    wall_tok_s = batch.total_output_tokens / elapsed / batch_size if elapsed > 0 else None
    step_time = p20(window_times) if window_times else None
    if accept is not None and step_time is not None and step_time > 0:
        speed, speed_source = accept / step_time, "step_time"
    elif wall_tok_s is not None and wall_tok_s > 0:
        speed, speed_source = wall_tok_s, "wall_clock"
    else:
        raise EngineError("no_speed: neither step times nor a wall-clock duration were measured")
    return Measurement(
        accept_length=accept,
        accept_length_source=accept_source,
        step_time_s=step_time,
        step_time_count=len(window_times),
        speed_tok_s=speed,
        speed_source=speed_source,
        wall_clock_s=elapsed,
        wall_clock_tok_s=wall_tok_s,
        total_output_tokens=batch.total_output_tokens,
        energy_joules=energy_j,
        avg_power_watts=result.avg_power_w,
        energy_method=result.energy_method,
        energy_flag=energy_flag,
        gpu_temp_c=result.temp_c_end,
        gpu_power_w=result.power_w_mean,
        gpu_util_pct=result.util_pct_mean,
        gpu_mem_used_mb=result.mem_used_mb_max,
        gpu_throttling=result.throttling,
    )


def base_record(
    settings: MeasureSettings,
    device: GpuDevice,
    *,
    hardware: str,
    index: int,
    repeat: int,
    batch_size: int,
    action: Action,
    pre: TelemetrySample,
    temp_before: float | None,
) -> SweepRecord:
    """A run's identity (``action``: the grid point's, valid already), its pre-run state (the
    idle GPU before launch, ``temp_before`` right before the run) and the sweep's settings;
    no measurement yet."""
    return SweepRecord(
        hardware=hardware,
        index=index,
        repeat=repeat,
        batch_size=batch_size,
        steps=action.speculative_num_steps,
        topk=action.speculative_eagle_topk,
        num_draft_tokens=action.speculative_num_draft_tokens,
        is_baseline=action.is_baseline,
        gpu_temp_c_before=temp_before,
        power_limit_watts=device.power_limit_w,
        gpu_mem_used_mb_before=pre.mem_used_mb,
        gpu_util_pct_before=pre.util_pct,
        provenance=settings.provenance or device.provenance,
        target_model=settings.server.model_path,
        draft_model=settings.server.draft_model_path,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **settings.run_settings(),
    )


def error_record(
    base: SweepRecord, error: str, retry_mem_fraction: float | None, mem_fraction_static: float | None
) -> SweepRecord:
    """``base`` as the row of a run that failed: ``error`` (first 500 characters) and its
    ``error_class`` (:func:`specband.contract.record.error_class_of`), no measurements."""

    return dataclasses.replace(
        base,
        error=error[:500],
        error_class=error_class_of(error),
        retry_mem_fraction=retry_mem_fraction,
        mem_fraction_static=mem_fraction_static,
    )


def measured_record(base: SweepRecord, measurement: Measurement, launch: LaunchOutcome) -> SweepRecord:
    """``base`` with what one timed batch measured on ``launch``'s server."""
    m = measurement
    return dataclasses.replace(
        base,
        error=None,
        retry_mem_fraction=launch.retry_mem_fraction,
        accept_length=m.accept_length,
        speed_tok_s=m.speed_tok_s,
        speed_source=m.speed_source,
        step_time_s=m.step_time_s,
        wall_clock_s=m.wall_clock_s,
        wall_clock_tok_s=m.wall_clock_tok_s,
        total_output_tokens=m.total_output_tokens,
        energy_joules=m.energy_joules,
        avg_power_watts=m.avg_power_watts,
        joules_per_token=(m.energy_joules / m.total_output_tokens) if m.energy_joules is not None else None,
        gpu_temp_c=m.gpu_temp_c,
        gpu_power_w=m.gpu_power_w,
        gpu_util_pct=m.gpu_util_pct,
        gpu_mem_used_mb=m.gpu_mem_used_mb,
        gpu_throttling=m.gpu_throttling,
        energy_method=m.energy_method,
        mem_fraction_static=launch.mem_fraction_static,
        accept_length_source=m.accept_length_source,
        energy_flag=m.energy_flag,
        step_time_count=m.step_time_count,
        launch_wall_s=launch.launch_wall_s,
        draft_flag=draft_flag(base.triple, m.accept_length),
    )

"""Every option of ``specband govern`` (:class:`GovernRequest`), declared once
(:mod:`specband.core.optionspec`) and checked where the request is built."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError
from specband.core.limits import MAX_GPU_INDEX, MAX_TIMEOUT_S, PORT_RANGE
from specband.core.optionspec import acceptance_from_field, option
from specband.deploy.probe import check_url
from specband.engines.base import engine_names, get_engine
from specband.files.fileio import given_path
from specband.govern.firstguess import DEFAULT_TIER_BATCH_SIZES
from specband.govern.log import DEFAULT_LOG_MAX_BYTES

__all__ = ["DEVICE_CHOICES", "GovernRequest", "parse_gpus", "parse_tiers"]

#: ``--device`` values: NVML (``auto`` is NVML, else nothing with a note, for a dry run),
#: the emulator's GPU, or none (a dry run that reads the server only).
DEVICE_CHOICES = ("auto", "nvml", "emulated", "none")
_EMULATOR = "With --device emulated (a server of `specband emulate`): "


def parse_gpus(text: str) -> tuple[int, ...]:
    """``--gpus`` (``"0"``, ``"0,1,2,3"``) as NVML indices (ConfigError: not a list of distinct
    indices in 0..:data:`~specband.core.limits.MAX_GPU_INDEX`)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or not all(p.isascii() and p.isdigit() and len(p) <= 3 for p in parts):
        raise ConfigError(f"--gpus must be NVML indices separated by commas (e.g. 0,1), got {text!r}")
    values = tuple(int(p) for p in parts)
    if len(set(values)) != len(values) or any(v > MAX_GPU_INDEX for v in values):
        raise ConfigError(f"--gpus must list distinct indices in 0..{MAX_GPU_INDEX}, got {text!r}")
    return values


def parse_tiers(text: str) -> tuple[int, ...]:
    """``--tiers`` (``"1,8,32"``): the increasing batch sizes tiers are planned at."""
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isascii() and p.isdigit() and len(p) <= 7 for p in parts):
        raise ConfigError(f"--tiers must be batch sizes separated by commas (e.g. 1,8,32), got {text!r}")
    values = tuple(int(p) for p in parts)
    if not values or values[0] < 1 or any(a >= b for a, b in itertools.pairwise(values)):
        raise ConfigError(f"--tiers must be increasing batch sizes >= 1, got {text!r}")
    return values


@dataclass(frozen=True)
class GovernRequest:
    """Every option of ``specband govern`` (see docs/govern.md).

    Raises:
        ConfigError: a bad URL, engine, list, duration, or a combination that makes no sense
            (one line each).
    """

    url: str | None = option(
        None,
        "--url",
        help="The running server's address, e.g. http://127.0.0.1:30000 (sglang, started with --enable-metrics) "
        "or http://127.0.0.1:8000 (vLLM).",
        panel="input",
        metavar="URL",
        show_default=False,
    )
    engine: str = option(
        "auto",
        "--engine",
        help=f"The server's engine: auto (found from its endpoints), {' or '.join(engine_names())}.",
        panel="input",
        metavar="NAME",
    )
    plan: str | None = option(
        None,
        "--plan",
        help="A plan file (tiers, flags and starting limits; `specband govern --write-plan` writes one).",
        panel="model",
        metavar="FILE",
        show_default=False,
    )
    gpu: str | None = option(
        None,
        "--gpu",
        help="Without --plan: a simulated first guess on this simulator profile (h100-sxm, h200, a100-sxm4-80gb, "
        "rtx4060-laptop). Default: the profile of NVML's GPU (the emulator's hardware with --device emulated).",
        panel="model",
        metavar="PROFILE",
        show_default=False,
    )
    target_config: str | None = option(
        None,
        "--target-config",
        help="The first guess's target (config.json, folder or bundled name such as llama-3.1-8b-instruct).",
        panel="model",
        metavar="CONFIG",
        show_default=False,
    )
    draft_config: str | None = option(
        None,
        "--draft-config",
        help="The first guess's EAGLE3 draft head (config.json, folder or bundled name).",
        panel="model",
        metavar="CONFIG",
        show_default=False,
    )
    acceptance_from: str | None = acceptance_from_field("the first guess")
    tiers: str = option(
        ",".join(map(str, DEFAULT_TIER_BATCH_SIZES)),
        "--tiers",
        help="The batch sizes the first guess plans tiers at; each tier covers the batch sizes nearest to it "
        "(log scale), the last every larger one.",
        panel="model",
        metavar="LIST",
    )
    gpus: str | None = option(
        None,
        "--gpus",
        help="NVML indices of the server's GPUs (a tensor-parallel server spans several: each is governed). "
        "Default: the GPUs the server reports (sglang), else 0.",
        panel="telemetry",
        metavar="LIST",
        show_default=False,
    )
    device: str = option(
        "auto",
        "--device",
        help="nvml, auto (NVML; without it only --dry-run goes on, reading the server alone), emulated (the GPU "
        "state file of `specband emulate`) or none (with --dry-run).",
        panel="telemetry",
        metavar="KIND",
        choices=DEVICE_CHOICES,
    )
    interval_s: float = option(
        1.0, "--interval", help="Seconds between readings.", panel="pick", metavar="S", min=0.05, max=3600.0
    )
    window_s: float = option(
        5.0,
        "--window",
        help="Seconds of readings the utilisation is averaged over before the limit moves.",
        panel="pick",
        metavar="S",
        min=0.1,
        max=3600.0,
    )
    dwell_s: float = option(
        5.0,
        "--dwell",
        help="Least seconds at a limit before it moves again.",
        panel="pick",
        metavar="S",
        min=0.0,
        max=3600.0,
    )
    max_step_w: float | None = option(
        None,
        "--max-step",
        help="Largest change of the limit per decision, W. Default: 10 % of the GPU's default limit.",
        panel="pick",
        metavar="W",
        min=1.0,
        max=2000.0,
        show_default=False,
    )
    duration_s: float = option(
        0.0,
        "--duration",
        help="Stop (restoring the limits) after this many seconds; 0: run until Ctrl-C or SIGTERM.",
        panel="pick",
        metavar="S",
        min=0.0,
        max=MAX_TIMEOUT_S,
    )
    timeout_s: float = option(
        5.0,
        "--timeout",
        help="Seconds one /metrics read may take in all (a later answer is stale and skipped).",
        panel="server",
        metavar="S",
        min=0.1,
        max=600.0,
    )
    server_timeout_s: float = option(
        10.0,
        "--server-timeout",
        help="Seconds without a usable reading of the server after which the original limits are restored and "
        "govern exits (status 3).",
        panel="server",
        metavar="S",
        min=0.5,
        max=MAX_TIMEOUT_S,
    )
    emulator_state: Path | None = option(
        None, "--emulator-state", help=_EMULATOR + "its GPU state file (its --state-file).", panel="emulator",
        metavar="FILE", show_default=False,
    )  # fmt: skip
    emulator_hardware: str = option(
        "rtx4060-laptop", "--emulator-hardware", help=_EMULATOR + "its --hardware profile.", panel="emulator",
        metavar="PROFILE",
    )  # fmt: skip
    emulator_model: str = option(
        "calibrated", "--emulator-model", help=_EMULATOR + "its --perf-model.", panel="emulator", metavar="MODEL"
    )
    dry_run: bool = option(
        False, "--dry-run", help="Set nothing: print and log what would be set (no root needed).", panel="output"
    )
    log: Path | None = option(
        None,
        "--log",
        help="JSONL log of every reading and decision (appended, fsynced).",
        panel="output",
        metavar="FILE",
        show_default=False,
    )
    log_max_mb: float = option(
        DEFAULT_LOG_MAX_BYTES / (1 << 20),
        "--log-max-mb",
        help="Readings stop being logged once the log holds this many MiB (decisions still are, up to twice it).",
        panel="output",
        metavar="MB",
        min=0.01,
        max=1 << 20,
    )
    metrics_port: int | None = option(
        None,
        "--metrics-port",
        help="Serve the governor's state for Prometheus on this port (/metrics).",
        panel="output",
        metavar="N",
        min=PORT_RANGE[0],
        max=PORT_RANGE[1],
        show_default=False,
    )
    metrics_host: str = option(
        "127.0.0.1", "--metrics-host", help="Address --metrics-port listens on.", panel="output", metavar="ADDR"
    )
    drift_out: Path = option(
        Path("specband-govern-acceptance.jsonl"),
        "--drift-out",
        help="Where the acceptance measured live is written when it leaves the plan's interval (a sweep-format "
        "JSONL that --acceptance-from reads).",
        panel="output",
        metavar="FILE",
    )
    restore: bool = option(
        False,
        "--restore",
        help="Put back the limit a killed governor, sweep or launch left on --gpus (from the lock's record), and exit.",
        panel="output",
    )
    write_plan: Path | None = option(
        None,
        "--write-plan",
        help="Write the plan (the first guess of --gpu/--target-config/--draft-config) to FILE and exit.",
        panel="output",
        metavar="FILE",
        show_default=False,
    )
    force: bool = option(False, "--force", help="Replace --write-plan's file if it exists.", panel="output")
    quiet: bool = option(False, "--quiet", "-q", help="No live status line.", panel="output")
    #: the emulator's GPU for ``--device emulated``: time scale -> a DeviceSpec (set by the CLI)
    plugged: Any = None

    def __post_init__(self) -> None:
        if self.url is not None:
            object.__setattr__(self, "url", check_url(self.url))
        if self.engine != "auto":
            get_engine(self.engine)  # ConfigError: an unknown name
        modes = [m for m, on in (("--restore", self.restore), ("--write-plan", self.write_plan is not None)) if on]
        if len(modes) > 1:
            raise ConfigError("--restore and --write-plan are separate runs: give one")
        if not modes and self.url is None:
            raise ConfigError("--url is required (the server to govern), unless --restore or --write-plan")
        if self.write_plan is not None and self.plan is not None:
            raise ConfigError("--write-plan writes the simulated first guess: not with --plan")
        if self.plan is not None and (self.gpu or self.target_config or self.draft_config or self.acceptance_from):
            raise ConfigError("--plan gives the tiers: not with --gpu/--target-config/--draft-config/--acceptance-from")
        if self.device == "none" and not (self.dry_run or modes == ["--write-plan"]):
            raise ConfigError("--device none reads no GPU: only with --dry-run")
        for name, value in (("--interval", self.interval_s), ("--window", self.window_s)):
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value}")
        if self.window_s < self.interval_s:
            raise ConfigError(f"--window ({self.window_s:g} s) must be at least --interval ({self.interval_s:g} s)")
        if self.server_timeout_s < self.interval_s:
            raise ConfigError("--server-timeout must be at least --interval")
        if self.gpus is not None:
            parse_gpus(self.gpus)
        parse_tiers(self.tiers)
        for name, path in (("--plan", self.plan), ("--log", self.log), ("--write-plan", self.write_plan)):
            if path is not None:
                given_path(name, path)
        given_path("--drift-out", self.drift_out)

    @property
    def log_max_bytes(self) -> int:
        """``--log-max-mb`` in bytes."""
        return int(self.log_max_mb * (1 << 20))

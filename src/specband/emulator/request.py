"""``specband emulate``'s own options (:class:`EmulateRequest`, declared once; each takes
its default from the variable the sweep sets, :mod:`specband.emulator.env`). The sglang
launch flags after them are parsed by :func:`specband.emulator.launchargs.parse_launch_args`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specband.core.limits import MAX_SEED, MAX_TIMEOUT_S
from specband.core.optionspec import option
from specband.emulator.env import HARDWARE_ENV, MODEL_ENV, STATE_ENV, TIME_SCALE_ENV
from specband.engines.base import EMULATOR_ENGINE_ENV, Engine, engine_field, engine_names, get_engine

__all__ = ["EmulateRequest"]


@dataclass(frozen=True)
class EmulateRequest:
    """The emulator's options (``None``: from the environment, else the emulator's default)."""

    hardware: str | None = option(
        None,
        "--hardware",
        help="Performance-model profile (default rtx4060-laptop).",
        panel="emulator",
        metavar="PROFILE",
        envvar=HARDWARE_ENV,
        show_default=False,
    )
    perf_model: str | None = option(
        None,
        "--perf-model",
        help="calibrated (default) or module:function.",
        panel="emulator",
        metavar="MODEL",
        envvar=MODEL_ENV,
        show_default=False,
    )
    state_file: Path | None = option(
        None,
        "--state-file",
        help="Emulated GPU state file.",
        panel="emulator",
        metavar="FILE",
        envvar=STATE_ENV,
        show_default=False,
    )
    time_scale: float | None = option(
        None,
        "--time-scale",
        help="Real seconds per emulated second.",
        panel="emulator",
        metavar="X",
        envvar=TIME_SCALE_ENV,
        show_default=False,
    )
    load_time: float | None = option(
        None,
        "--load-time",
        help="Emulated seconds to load (default 30).",
        panel="emulator",
        metavar="S",
        min=0.0,
        max=MAX_TIMEOUT_S,
        show_default=False,
    )
    seed: int | None = option(
        None, "--seed", help="Noise seed of the emulated runs.", panel="emulator", metavar="N", min=0, max=MAX_SEED
    )
    engine: Engine = engine_field(
        f"The engine to answer as, {' or '.join(engine_names())}: its launch flags and endpoints (sglang's "
        "/generate and /get_server_info; vLLM's /v1/completions and /metrics).",
        "emulator",
        envvar=EMULATOR_ENGINE_ENV,
    )
    fault: list[str] = option(
        [],
        "--fault",
        help="KIND[:key=value,...] (repeatable); kinds: launch_failure, oom_at_capture, die_mid_batch, "
        "missing_step_times, slow_health.",
        panel="emulator",
        metavar="FAULT",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", get_engine(self.engine))  # resolved once, here

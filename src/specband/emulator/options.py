"""The emulator's own settings, those that are not the engine's flags (:class:`EmulatorOptions`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from specband.emulator.env import FAULTS_ENV
from specband.emulator.faults import Fault, parse_fault
from specband.engines.base import Engine, default_engine, get_engine

__all__ = ["EmulatorOptions"]


@dataclass(frozen=True)
class EmulatorOptions:
    """Emulator settings that are not sglang flags.

    Attributes:
        hardware: performance-model profile.
        model_spec: ``calibrated`` (the calibrated :func:`specband.sim.build_model`) or
            ``module:function`` (a user-supplied PerformanceModel factory); see
            :mod:`specband.emulator.models`.
        state_file: the emulated GPU's state file (``None``: a private temporary one).
        time_scale: real seconds per emulated second.
        load_time_s: emulated seconds from start to a bound, healthy server.
        seed: noise seed.
        step_noise: log-normal sigma of step times.
        faults: injected faults.
        record_step_time: serve ``step_time_dict`` (sglang needs
            ``SGLANG_RECORD_STEP_TIME``).
        idle_hold_s: emulated seconds the GPU keeps its busy power after the last
            request finished (at least 20 ms real), so that the gap between back-to-back
            requests, stretched by the time scale, does not read as idle.
        engine: the engine it answers as (its flags and endpoints; a name is resolved here).
    """

    hardware: str = "rtx4060-laptop"
    model_spec: str = "calibrated"
    state_file: str | None = None
    time_scale: float = 1.0
    load_time_s: float = 30.0
    seed: int = 0
    step_noise: float = 0.02
    faults: tuple[Fault, ...] = ()
    record_step_time: bool = True
    idle_hold_s: float = 1.0
    engine: Engine = field(default_factory=default_engine)

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", get_engine(self.engine))

    @classmethod
    def from_env(cls, **overrides: Any) -> EmulatorOptions:
        """``overrides`` (``None`` values are ignored: the defaults stay), plus the faults of
        :data:`~specband.emulator.env.FAULTS_ENV` (``;``-separated) and sglang's own
        ``SGLANG_RECORD_STEP_TIME``. (``specband emulate`` reads the other ``SPECBAND_*``
        variables as its options' defaults: typer's ``envvar``.)

        Raises:
            ConfigError: a malformed fault.
        """
        env = os.environ
        values: dict[str, Any] = {}
        faults = [parse_fault(f) for f in env.get(FAULTS_ENV, "").split(";") if f.strip()]
        flag = env.get("SGLANG_RECORD_STEP_TIME", "")
        values["record_step_time"] = flag.lower() in ("1", "true", "yes")
        for key, value in overrides.items():
            if value is None:
                continue
            if key == "faults":
                faults += list(value)
            else:
                values[key] = value
        values["faults"] = tuple(faults)
        return cls(**values)

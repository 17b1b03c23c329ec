"""The environment variables the emulator reads (the sweep sets them for the servers it
launches; ``specband emulate`` takes each as its option's default). Standard library only."""

from __future__ import annotations

__all__ = ["FAULTS_ENV", "HARDWARE_ENV", "MODEL_ENV", "STATE_ENV", "TIME_SCALE_ENV"]

#: Environment variable naming the emulated GPU's state file.
STATE_ENV = "SPECBAND_EMULATOR_STATE"
#: Environment variable with the time scale (real seconds per emulated second).
TIME_SCALE_ENV = "SPECBAND_TIME_SCALE"
#: Environment variable with the hardware profile of the emulated GPU.
HARDWARE_ENV = "SPECBAND_EMULATOR_HARDWARE"
#: Environment variable with injected emulator faults, ``;``-separated (see
#: :mod:`specband.emulator.faults`).
FAULTS_ENV = "SPECBAND_EMULATOR_FAULTS"
#: Environment variable choosing the performance model (``calibrated`` or
#: ``module:function``; see :mod:`specband.emulator.models`).
MODEL_ENV = "SPECBAND_EMULATOR_MODEL"

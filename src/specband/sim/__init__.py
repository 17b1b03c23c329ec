"""specband.sim: a calibrated performance/energy model of sglang EAGLE3 decoding on a GPU,
and simulated sweeps drawn from it.

* :func:`build_model` -> a :class:`~specband.sim.base.PerformanceModel` for a hardware
  profile and a target/draft model pair;
* :func:`simulate_sweep` -> sweep rows in the published schema (``specband simulate``);
* :mod:`specband.sim.calibrate` -> the fit against the published RTX 4060 measurements and
  its report (``specband simulate --calibration-report``).

Everything here is a simulation: rows carry ``"provenance": "simulated"``.
"""

from __future__ import annotations

from specband.sim.base import PerformanceModel, RunPrediction
from specband.sim.hfconfig import ModelSpec
from specband.sim.model import SpeculativeDecodingModel, build_model
from specband.sim.profile import DEFAULT_PROFILE, HardwareProfile, builtin_profiles, load_profile
from specband.sim.simulated import check_out_path, simulate_power_limits, simulate_sweep, write_sweep

__all__ = [
    "DEFAULT_PROFILE",
    "HardwareProfile",
    "ModelSpec",
    "PerformanceModel",
    "RunPrediction",
    "SpeculativeDecodingModel",
    "build_model",
    "builtin_profiles",
    "check_out_path",
    "load_profile",
    "simulate_power_limits",
    "simulate_sweep",
    "write_sweep",
]

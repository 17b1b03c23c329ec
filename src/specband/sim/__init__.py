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

from pathlib import Path
from typing import Any

from specband.sim.base import PerformanceModel, RunPrediction
from specband.sim.hfconfig import BUNDLED_DRAFT_CONFIG, BUNDLED_TARGET_CONFIG, ModelSpec, load_model_spec
from specband.sim.model import SpeculativeDecodingModel
from specband.sim.profile import DEFAULT_PROFILE, HardwareProfile, builtin_profiles, load_profile
from specband.sim.sweep import check_out_path, simulate_power_limits, simulate_sweep, write_sweep

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


def build_model(
    profile: str | Path | HardwareProfile = DEFAULT_PROFILE,
    *,
    target_config: str | Path | dict[str, Any] | ModelSpec | None = None,
    draft_config: str | Path | dict[str, Any] | ModelSpec | None = None,
    workload: str | None = None,
) -> SpeculativeDecodingModel:
    """The performance model for a hardware profile and a target/draft pair.

    Args:
        profile: a built-in profile name (``rtx4060-laptop``, ``a100-sxm4-80gb``,
            ``h100-sxm``, ``h200``), a TOML/JSON profile file, or a :class:`HardwareProfile`.
        target_config: the target's Hugging Face ``config.json`` (path or dict) or a
            :class:`ModelSpec`; ``None``: bundled Llama-3.2-1B-Instruct.
        draft_config: the EAGLE3 draft head's ``config.json`` or spec; ``None``: the
            bundled SpecForge EAGLE3 head for Llama-3.2-1B-Instruct.
        workload: the acceptance workload (``mt-bench``, ...); ``None``: the pair's default
            (:mod:`specband.sim.acceptance`; an uncovered pair or workload borrows a profile
            and says so in ``model.warnings``).

    Returns:
        a :class:`SpeculativeDecodingModel` (satisfies :class:`PerformanceModel`).

    Raises:
        ConfigError: unknown profile, unreadable or invalid profile or model config.
    """
    prof = load_profile(profile)
    target = load_model_spec(target_config, draft=False, default=BUNDLED_TARGET_CONFIG)
    draft = load_model_spec(draft_config, draft=True, default=BUNDLED_DRAFT_CONFIG)
    return SpeculativeDecodingModel(prof, target, draft, workload)

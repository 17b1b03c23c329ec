"""Choosing the performance model behind the emulator and its emulated GPU.

``spec`` values:

* ``"auto"``: the calibrated model ``specband.sim.build_model(hardware)`` when the
  simulator provides it, else :class:`~specband.harness.toy_model.ToyPerformanceModel`
  with a warning;
* ``"calibrated"``: ``specband.sim.build_model(hardware)`` or an error;
* ``"toy"``: the toy model;
* ``"module:function"``: ``function(hardware)`` from an importable module.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from specband.errors import ConfigError

__all__ = ["DEFAULT_HARDWARE", "MODEL_CHOICES", "load_performance_model"]

#: Hardware profile of the published study.
DEFAULT_HARDWARE = "rtx4060-laptop"
MODEL_CHOICES = ("auto", "calibrated", "toy", "module:function")
_REQUIRED = (
    "predict", "advance_temperature", "power_limit_w", "vram_mb", "idle_power_w", "ambient_temp_c", "throttle_temp_c",
)  # fmt: skip


def _calibrated_factory() -> Any | None:
    try:
        sim = importlib.import_module("specband.sim")
    except ImportError:
        return None
    return getattr(sim, "build_model", None)


def load_performance_model(spec: str = "auto", hardware: str = DEFAULT_HARDWARE) -> Any:
    """Build the performance model named by ``spec`` for ``hardware``.

    Returns:
        an object with the :class:`specband.sim.base.PerformanceModel` attributes and methods.

    Raises:
        ConfigError: an unknown spec, a calibrated model that is not available or
            rejects the hardware, or an object missing part of the protocol.
    """
    if spec == "toy":
        from specband.harness.toy_model import ToyPerformanceModel

        model: Any = ToyPerformanceModel(hardware=hardware)
    elif spec in ("auto", "calibrated"):
        factory = _calibrated_factory()
        if factory is None:
            if spec == "calibrated":
                raise ConfigError("the calibrated model (specband.sim.build_model) is not available")
            warnings.warn(
                "specband.sim.build_model is not available; the emulator uses the uncalibrated toy model",
                RuntimeWarning,
                stacklevel=2,
            )
            from specband.harness.toy_model import ToyPerformanceModel

            model = ToyPerformanceModel(hardware=hardware)
        else:
            try:
                model = factory(hardware)
            except Exception as exc:  # the simulator's own error types
                raise ConfigError(f"cannot build the calibrated model for {hardware!r}: {exc}") from None
    elif ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot load performance model {spec!r}: {exc}") from None
        model = factory(hardware)
    else:
        raise ConfigError(f"unknown performance model {spec!r}; expected auto, calibrated, toy or module:function")
    missing = [name for name in _REQUIRED if not hasattr(model, name)]
    if missing:
        raise ConfigError(f"performance model {spec!r} lacks {', '.join(missing)}")
    return model

"""Choosing the performance model behind the emulator and its emulated GPU.

``spec`` values (:data:`MODEL_CHOICES`):

* ``"calibrated"`` (default): the calibrated simulator model
  ``specband.sim.build_model(hardware)``;
* ``"module:function"``: ``function(hardware)`` from an importable module, a user-supplied
  factory of a :class:`specband.sim.base.PerformanceModel` (e.g. a model of other
  hardware, or a fixed model for tests).
"""

from __future__ import annotations

import importlib
from typing import Any

from specband.core.errors import ConfigError
from specband.sim import build_model

__all__ = ["DEFAULT_HARDWARE", "DEFAULT_MODEL", "MODEL_CHOICES", "load_performance_model"]

#: Hardware profile of the published study.
DEFAULT_HARDWARE = "rtx4060-laptop"
#: The performance model used unless another is asked for.
DEFAULT_MODEL = "calibrated"
#: Valid ``spec`` forms, for help texts and error messages.
MODEL_CHOICES = ("calibrated", "module:function")
_REQUIRED = (
    "predict",
    "advance_temperature",
    "power_limit_w",
    "vram_mb",
    "idle_power_w",
    "ambient_temp_c",
    "throttle_temp_c",
)


def load_performance_model(spec: str = DEFAULT_MODEL, hardware: str = DEFAULT_HARDWARE) -> Any:
    """Build the performance model named by ``spec`` for ``hardware``.

    Args:
        spec: ``"calibrated"`` or ``"module:function"`` (see the module docstring).
        hardware: profile name passed to the factory (for ``calibrated``, a built-in
            profile of :func:`specband.sim.build_model` or a profile file).

    Returns:
        an object with the :class:`specband.sim.base.PerformanceModel` attributes and methods.

    Raises:
        ConfigError: an unknown spec (the message names the valid choices), a calibrated
            model that rejects the hardware, a factory that cannot be imported or fails,
            or an object missing part of the protocol.
    """
    if spec == "calibrated":
        try:
            model: Any = build_model(hardware)
        except Exception as exc:  # the simulator's own error types
            raise ConfigError(f"cannot build the calibrated model for {hardware!r}: {exc}") from None
    elif ":" in spec and all(spec.partition(":")[::2]):
        module_name, _, attr = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot load performance model {spec!r}: {exc}") from None
        try:
            model = factory(hardware)
        except Exception as exc:  # whatever the user's factory raises
            raise ConfigError(f"performance model {spec!r} failed for {hardware!r}: {exc}") from None
    else:
        raise ConfigError(f"unknown performance model {spec!r}; expected one of: {', '.join(MODEL_CHOICES)}")
    missing = [name for name in _REQUIRED if not hasattr(model, name)]
    if missing:
        raise ConfigError(f"performance model {spec!r} lacks {', '.join(missing)}")
    return model

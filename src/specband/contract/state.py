"""The decision state without NumPy: the contract's 4 floats and the check of a GPU state
a user gives (``--state``), so that ``specband recommend`` stays cold-fast.

:func:`state_tuple` equals :func:`specband.sweeps.dataset.state_vector` (tested).
"""

from __future__ import annotations

import struct

from specband.core.errors import ConfigError
from specband.core.limits import GPU_MEM_MAX_MB, GPU_TEMP_RANGE_C, GPU_UTIL_RANGE_PCT, out_of_range

__all__ = [
    "FEATURE_KINDS",
    "GPU_MEM_MAX_MB",
    "GPU_TEMP_RANGE_C",
    "GPU_UTIL_RANGE_PCT",
    "check_gpu_state",
    "state_tuple",
]


def check_gpu_state(temp_c: float, mem_used_mb: float, util_pct: float, *, option: str = "state") -> None:
    """Check a user-given GPU state before it becomes a decision state.

    Args:
        temp_c: GPU temperature, C, in [-40, 150].
        mem_used_mb: GPU memory in use, MB, in [0, 16 TiB].
        util_pct: GPU utilisation, %, in [0, 100].
        option: the option name to put in the message.

    Raises:
        ConfigError: a value that is not finite or outside its range.
    """
    checks = (
        ("TEMP_C", temp_c, *GPU_TEMP_RANGE_C),
        ("MEM_MB", mem_used_mb, 0.0, GPU_MEM_MAX_MB),
        ("UTIL_PCT", util_pct, *GPU_UTIL_RANGE_PCT),
    )
    for name, value, low, high in checks:
        problem = out_of_range(value, low, high)
        if problem is not None:
            raise ConfigError(f"{option}: {name} {problem}")


#: Feature kinds (as :data:`specband.sweeps.dataset.FEATURE_KINDS`, repeated here to keep this
#: module free of NumPy at import).
FEATURE_KINDS: tuple[str, ...] = ("contract", "pre")
# state scales and fills of the contract (docs/FACTS.md §1; :func:`specband.sweeps.dataset.state_vector`)
_SCALES = (8.0, 100.0, 8192.0, 100.0)
_FILLS = (40.0, 0.0, 0.0)


def _f32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def state_tuple(
    batch_size: int,
    gpu_temp_c: float | None = None,
    gpu_mem_used_mb: float | None = None,
    gpu_util_pct: float | None = None,
) -> tuple[float, float, float, float]:
    """:func:`specband.sweeps.dataset.state_vector` without NumPy: the contract state
    ``[bs/8, temp/100, mem/8192, util/100]`` rounded to float32, ``None`` filled as upstream."""
    raw = (
        batch_size,
        _FILLS[0] if gpu_temp_c is None else gpu_temp_c,
        _FILLS[1] if gpu_mem_used_mb is None else gpu_mem_used_mb,
        _FILLS[2] if gpu_util_pct is None else gpu_util_pct,
    )
    a, b, c, d = (_f32(v / scale) for v, scale in zip(raw, _SCALES, strict=True))
    return a, b, c, d

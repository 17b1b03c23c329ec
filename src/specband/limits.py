"""Bounds every input of specband is held to, each with its basis, in one place.

The module imports nothing but the standard library, so that CLI option declarations
(typer's ``min``/``max``) and the cold ``specband recommend`` path can use it.

* Batch size (:data:`MAX_BATCH_SIZE`): one bound for sweep rows (``dataset``), ``train``,
  ``recommend``, ``simulate``, ``sweep`` and ``launch`` (``--max-running-requests`` and
  ``--cuda-graph-max-bs``).
* GPU state readings (:data:`GPU_TEMP_RANGE_C`, :data:`GPU_MEM_MAX_MB`,
  :data:`GPU_UTIL_RANGE_PCT`): a decision state given with ``--state`` and the state
  columns of a loaded sweep row.
* Seeds (:data:`MAX_SEED`): ``train --seed`` and ``simulate --seed``.
"""

from __future__ import annotations

import math
from typing import TypeGuard

#: Largest batch size (concurrent requests, sglang ``--max-running-requests``) accepted
#: anywhere: 2**20. Basis: each running request holds at least one token of KV cache, and
#: one GPU holds a few million tokens at most (an H200's 141 GB at Llama-3.2-1B's 32 KiB per
#: token, 16 layers x 8 KV heads x 64 dims x 2 (K, V) x 2 bytes, is about 4.4 M tokens), so
#: 2**20 requests leave ~4 tokens each: beyond it the number is not a decode batch.
#: sglang itself takes any int, and would pass a 31-digit ``--cuda-graph-max-bs`` on.
MAX_BATCH_SIZE = 1 << 20

#: Largest training seed: 2**32 - 1. Basis: scikit-learn's ``random_state`` (gbt) goes to
#: ``numpy.random.RandomState``, which takes seeds in [0, 2**32 - 1]; torch and NumPy's
#: ``SeedSequence`` (the other algorithms) take at least that range.
MAX_SEED = 2**32 - 1

#: GPU temperature, C, a reading may have. Basis: NVML reports the die temperature as an
#: unsigned int in C, and GPUs shut down near 100 C (NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
#: 90-105 C on current NVIDIA parts); -40 C is the lowest rated ambient of electronics
#: (JEDEC industrial range). [-40, 150] holds every real reading with margin.
GPU_TEMP_RANGE_C = (-40.0, 150.0)
#: GPU memory in use, MB: at most 16 TiB. Basis: the largest single GPUs hold 141-192 GB
#: (H200, B200); 16 TiB leaves two orders of magnitude of margin.
GPU_MEM_MAX_MB = 16.0 * 1024 * 1024
#: GPU utilisation, %: NVML's ``utilization.gpu`` is a percentage of time, [0, 100].
GPU_UTIL_RANGE_PCT = (0.0, 100.0)

#: Physical range of each GPU state column of a sweep row: column -> (low, high, basis).
_TEMP_BASIS = "a GPU temperature in C: GPUs shut down near 100 C, -40 C is the lowest rated ambient"
_MEM_BASIS = "GPU memory in use in MB: the largest GPUs hold under 200 GB, 16 TiB is the bound"
_UTIL_BASIS = "GPU utilisation, a percentage of time"
STATE_FIELD_RANGES: dict[str, tuple[float, float, str]] = {
    "gpu_temp_c_before": (*GPU_TEMP_RANGE_C, _TEMP_BASIS),
    "gpu_temp_c": (*GPU_TEMP_RANGE_C, _TEMP_BASIS),
    "gpu_mem_used_mb_before": (0.0, GPU_MEM_MAX_MB, _MEM_BASIS),
    "gpu_mem_used_mb": (0.0, GPU_MEM_MAX_MB, _MEM_BASIS),
    "gpu_util_pct_before": (*GPU_UTIL_RANGE_PCT, _UTIL_BASIS),
    "gpu_util_pct": (*GPU_UTIL_RANGE_PCT, _UTIL_BASIS),
}

#: Largest sweep file read: 1 GiB. Basis: a row is ~1 KB, so 1 GiB is about a million
#: runs, beyond any sweep (19 actions x a few dozen batch sizes x repeats); the file is
#: read whole into memory, so a larger one (or ``/dev/zero``) is refused before reading.
MAX_DATA_FILE_BYTES = 1 << 30


def out_of_range(value: float, low: float, high: float) -> str | None:
    """Why ``value`` is not a finite number in ``[low, high]``, or ``None`` when it is.

    Returns:
        ``"must be a number in [low, high], got value"`` (bounds printed with up to 10
        significant digits) or ``None``.
    """
    if math.isfinite(value) and low <= value <= high:
        return None
    return f"must be a number in [{low:.10g}, {high:.10g}], got {value}"


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` and not a ``bool`` (JSON ``true`` is not a count).

    The one check behind every "must be an integer" message of specband.
    """
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is an ``int`` or ``float`` and not a ``bool`` (NaN and infinities
    included: a JSON reader that rejects them does so first)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is a finite ``int`` or ``float`` and not a ``bool``.

    The one check behind every "must be a finite number" message of specband.
    """
    return is_number(value) and math.isfinite(value)

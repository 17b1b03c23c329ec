"""sglang on a CPU as a serving target: the flags, dtype, attention backend and environment
that make sglang's CPU engine serve EAGLE3 (``specband sweep --cpu``).

Measured with sglang 0.5.18 and its CPU kernel (../shared/engines/README.md): the CPU engine
needs ``--device cpu --disable-overlap-schedule --max-total-tokens 4096 --tp 1``, ``--dtype
bfloat16`` (float32 fails: ``rmsnorm_kernel not implemented for 'Float'``) and
``--attention-backend intel_amx`` (``torch_native`` refuses EAGLE); environment
``SGLANG_USE_CPU_ENGINE=1``, an inductor cache folder ``SGLANG_CACHE_DIR`` and ``LD_PRELOAD`` of
Intel OpenMP (``<venv>/lib/libiomp5.so``) with tcmalloc and tbbmalloc. The kernel is compiled
for AMX: it runs only where /proc/cpuinfo has ``amx_tile``.

A CPU has no power limit nor energy counter that specband reads: rows of such a sweep have
``energy_method: none`` and their rewards are throughput-only.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specband.core.errors import ConfigError

__all__ = [
    "CPU_NOTE",
    "SGLANG_CPU_ATTENTION_BACKEND",
    "SGLANG_CPU_DTYPE",
    "SGLANG_CPU_FLAGS",
    "CpuPreset",
    "cpu_has_amx",
    "cpu_name",
    "sglang_cpu_preset",
]

SGLANG_CPU_FLAGS: tuple[str, ...] = ("--device", "cpu", "--disable-overlap-schedule", "--max-total-tokens", "4096")
SGLANG_CPU_DTYPE = "bfloat16"
SGLANG_CPU_ATTENTION_BACKEND = "intel_amx"
#: Debian's allocator libraries (packages libgoogle-perftools4, libtbb12), searched in this order.
_ALLOCATORS = ("libtcmalloc.so.4", "libtbbmalloc.so.2")
_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu")
#: Said once by a CPU sweep.
CPU_NOTE = (
    "--cpu: sglang's CPU engine; a CPU gives no power or energy readings, so rows have energy_method none "
    "and rewards are throughput-only"
)


@dataclass(frozen=True)
class CpuPreset:
    """What ``--cpu`` sets.

    Attributes:
        dtype: ``--dtype``.
        attention_backend: ``--attention-backend``.
        extra_args: server flags put before the user's ``--server-arg`` values.
        env: server environment (before the user's ``--env`` values).
        hardware: the rows' ``hardware`` column (the CPU's model name).
        missing: libraries for ``LD_PRELOAD`` that were not found (the server still runs, slower).
    """

    dtype: str
    attention_backend: str
    extra_args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    hardware: str = "cpu"
    missing: tuple[str, ...] = ()


def cpu_has_amx(cpuinfo: str | None = None) -> bool:
    """True when the CPU flags list ``amx_tile`` (sglang's CPU kernel needs AMX)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    return any(line.startswith("flags") and " amx_tile" in line for line in cpuinfo.splitlines())


def cpu_name(cpuinfo: str | None = None) -> str:
    """``cpu: <model name>`` from /proc/cpuinfo (``cpu`` when it cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "cpu"
    for line in cpuinfo.splitlines():
        if line.startswith("model name") and ":" in line:
            return "cpu: " + line.split(":", 1)[1].strip()
    return "cpu"


def _venv_of(server_command: str) -> Path | None:
    """The venv of the server command's interpreter (``<venv>/bin/python``), if it is one."""
    try:
        first = shlex.split(server_command)[0]
    except (ValueError, IndexError):
        return None
    path = Path(first)
    if path.parent.name == "bin" and (path.parent.parent / "pyvenv.cfg").is_file():
        return path.parent.parent
    return None


def sglang_cpu_preset(
    server_command: str, cache_dir: str | os.PathLike[str], *, cpuinfo: str | None = None
) -> CpuPreset:
    """The CPU serving preset for ``server_command`` (sglang's launcher in its venv).

    Args:
        server_command: the launch command; when its interpreter is a venv's, that venv's
            ``lib/libiomp5.so`` (intel-openmp) goes first in ``LD_PRELOAD``.
        cache_dir: ``SGLANG_CACHE_DIR`` (inductor's compiled kernels).
        cpuinfo: /proc/cpuinfo's text (tests).
    """
    preload, missing = [], []
    venv = _venv_of(server_command)
    iomp = venv / "lib" / "libiomp5.so" if venv is not None else None
    if iomp is not None and iomp.is_file():
        preload.append(str(iomp))
    else:
        missing.append("libiomp5.so")
    for lib in _ALLOCATORS:
        found = next((Path(d) / lib for d in _LIB_DIRS if (Path(d) / lib).is_file()), None)
        if found is None:
            missing.append(lib)
        else:
            preload.append(str(found))
    env = {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_CACHE_DIR": str(Path(cache_dir).resolve())}
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    return CpuPreset(
        dtype=SGLANG_CPU_DTYPE,
        attention_backend=SGLANG_CPU_ATTENTION_BACKEND,
        extra_args=SGLANG_CPU_FLAGS,
        env=env,
        hardware=cpu_name(cpuinfo),
        missing=tuple(missing),
    )


@dataclass(frozen=True)
class CpuSweepSettings:
    """A sweep's server settings once ``--cpu`` is applied (:func:`apply_cpu_preset`)."""

    dtype: str
    attention_backend: str
    extra_args: tuple[str, ...]
    env: dict[str, str]
    device_kind: str
    hardware: str
    note: str


@dataclass(frozen=True)
class ServingOptions:
    """A sweep's server options that ``--cpu`` may change, as the user gave them: ``--dtype``,
    ``--attention-backend``, the ``--server-arg`` flags, the ``--env`` environment, ``--device``
    and ``--hardware`` (``None``: not given)."""

    dtype: str
    attention_backend: str
    extra_args: tuple[str, ...]
    env: Mapping[str, str]
    device_kind: str
    hardware: str | None


def apply_cpu_preset(
    server_command: str, given: ServingOptions, cache_dir: str | os.PathLike[str], cpuinfo: str | None = None
) -> CpuSweepSettings:
    """``--cpu`` applied to a sweep's options: the preset's dtype, attention backend, flags
    (before the user's ``--server-arg`` values) and environment (the user's ``--env`` wins),
    ``--device none`` and the CPU's name as ``hardware`` (unless ``--hardware``).

    Raises:
        ConfigError: ``--dtype``, ``--attention-backend`` or ``--device`` set to a value the
            CPU engine cannot use (naming the option and what ``--cpu`` sets).
    """

    dtype, attention_backend, device_kind = given.dtype, given.attention_backend, given.device_kind
    if dtype not in ("float16", SGLANG_CPU_DTYPE):  # float16: the GPU default, replaced
        raise ConfigError(f"--cpu sets --dtype {SGLANG_CPU_DTYPE} (sglang's CPU kernels); got --dtype {dtype}")
    if attention_backend not in ("flashinfer", SGLANG_CPU_ATTENTION_BACKEND):
        raise ConfigError(
            f"--cpu sets --attention-backend {SGLANG_CPU_ATTENTION_BACKEND} (the CPU backend that serves EAGLE3); "
            f"got --attention-backend {attention_backend}"
        )
    if device_kind not in ("auto", "none"):
        raise ConfigError(f"--cpu measures no energy (--device none); got --device {device_kind}")
    preset = sglang_cpu_preset(server_command, cache_dir, cpuinfo=cpuinfo)
    note = CPU_NOTE
    if preset.missing:
        note += f" (not found for LD_PRELOAD: {', '.join(preset.missing)})"
    return CpuSweepSettings(
        dtype=preset.dtype,
        attention_backend=preset.attention_backend,
        extra_args=(*preset.extra_args, *given.extra_args),
        env={**preset.env, **given.env},
        device_kind="none",
        hardware=given.hardware or preset.hardware,
        note=note,
    )

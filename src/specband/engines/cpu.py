"""sglang on a CPU as a serving target: the flags, dtype, attention backend and environment
that make sglang's CPU engine serve EAGLE3 (``specband sweep --cpu``).

Measured with sglang 0.5.18 and its CPU kernel (../shared/engines/README.md): the CPU engine
needs ``--device cpu --disable-overlap-schedule --max-total-tokens 4096 --tp 1`` (and, for adaptive
speculation, ``--cuda-graph-backend-decode disabled``), ``--dtype
bfloat16`` (float32 fails: ``rmsnorm_kernel not implemented for 'Float'``) and
``--attention-backend intel_amx`` (``torch_native`` refuses EAGLE); environment
``SGLANG_USE_CPU_ENGINE=1``, an inductor cache folder ``SGLANG_CACHE_DIR`` and ``LD_PRELOAD`` of
Intel OpenMP (``<venv>/lib/libiomp5.so``) with tcmalloc and tbbmalloc.

The kernel executes AVX-512 BF16 and VNNI instructions (``avx512_bf16``, ``avx512_vnni`` in
/proc/cpuinfo), not AMX ones: oneDNN picks its AVX-512 BF16 path at run time on a CPU without AMX
(measured on an AMD EPYC, Zen 4). sglang 0.5.18 itself refuses such a CPU: it reads
``torch.cpu._is_amx_tile_supported()`` once (``srt/utils/common.py``), and without AMX replaces
``intel_amx`` with ``torch_native``, which refuses EAGLE3. ``.ci/install-engines`` edits that one
assignment so that :data:`SGLANG_ASSUME_AMX_ENV` ``=1`` also makes it true (without the variable
the edited file behaves as upstream's); ``--cpu`` sets the variable only when the CPU lacks
``amx_tile``, and says so once.

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
    "SGLANG_ASSUME_AMX_ENV",
    "SGLANG_CPU_ATTENTION_BACKEND",
    "SGLANG_CPU_DTYPE",
    "SGLANG_CPU_FLAGS",
    "CpuPreset",
    "cpu_has_amx",
    "cpu_has_avx512_bf16",
    "cpu_name",
    "sglang_cpu_preset",
]

#: ``--cuda-graph-backend-decode disabled``: the CPU engine captures no graph, but sglang 0.5.18's
#: adaptive speculation (``--speculative-adaptive``) builds a decode graph runner per step count
#: unless that backend is disabled, and the intel_amx backend has none (its ``init_cuda_graph_state``
#: raises at start-up: measured).
SGLANG_CPU_FLAGS: tuple[str, ...] = (
    "--device", "cpu", "--disable-overlap-schedule", "--max-total-tokens", "4096",
    "--cuda-graph-backend-decode", "disabled",
)  # fmt: skip
SGLANG_CPU_DTYPE = "bfloat16"
SGLANG_CPU_ATTENTION_BACKEND = "intel_amx"
#: Debian's allocator libraries (packages libgoogle-perftools4, libtbb12), searched in this order.
_ALLOCATORS = ("libtcmalloc.so.4", "libtbbmalloc.so.2")
_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu")
#: The server's environment variable that tells sglang 0.5.18, once its ``srt/utils/common.py`` has
#: the one-line edit of ``.ci/install-engines`` (``assume_amx``), that its CPU kernels may be used on
#: a CPU without AMX. The name is specband's (no sglang release reads it).
SGLANG_ASSUME_AMX_ENV = "SPECBAND_SGLANG_ASSUME_AMX"
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
        amx_note: what was set (or is lacking) because the CPU has no AMX, or ``None`` on an AMX CPU.
    """

    dtype: str
    attention_backend: str
    extra_args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    hardware: str = "cpu"
    missing: tuple[str, ...] = ()
    amx_note: str | None = None


def _cpu_flags(cpuinfo: str | None) -> set[str]:
    """The first ``flags`` line of /proc/cpuinfo (or of ``cpuinfo``), as a set; empty when unreadable."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_has_amx(cpuinfo: str | None = None) -> bool:
    """True when the CPU flags list ``amx_tile`` (sglang 0.5.18 uses its CPU kernels only then,
    unless told otherwise: :data:`SGLANG_ASSUME_AMX_ENV`)."""
    return "amx_tile" in _cpu_flags(cpuinfo)


def cpu_has_avx512_bf16(cpuinfo: str | None = None) -> bool:
    """True when the CPU flags list ``avx512_bf16`` and ``avx512_vnni``, the instructions sglang's
    CPU kernel executes (compiled with ``-march=x86-64-v4``; without them it dies with SIGILL)."""
    return {"avx512_bf16", "avx512_vnni"} <= _cpu_flags(cpuinfo)


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
        cache_dir: ``SGLANG_CACHE_DIR`` (inductor's compiled kernels), unless this process's
            environment sets one already (kept: EAGLE3's first launch compiles for several seconds).
        cpuinfo: /proc/cpuinfo's text (tests).

    On a CPU without ``amx_tile`` the environment also has :data:`SGLANG_ASSUME_AMX_ENV` ``=1`` and
    ``amx_note`` says so (and names missing AVX-512 BF16/VNNI, with which the kernel cannot run).
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
    # an inductor cache the environment names already is kept (compiled once, reused by every launch)
    cache = os.environ.get("SGLANG_CACHE_DIR") or str(Path(cache_dir).resolve())
    env = {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_CACHE_DIR": cache}
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    amx_note = None
    if not cpu_has_amx(cpuinfo):
        env[SGLANG_ASSUME_AMX_ENV] = "1"
        amx_note = (
            f"--cpu: this CPU has no AMX (no amx_tile): the server gets {SGLANG_ASSUME_AMX_ENV}=1 so that sglang "
            "0.5.18 uses its AVX-512 BF16 CPU kernels; sglang reads it only with the one-line edit of its "
            "srt/utils/common.py that .ci/install-engines applies (docs/real-engines.md), else it falls back to "
            "torch_native, which refuses EAGLE3"
        )
        if not cpu_has_avx512_bf16(cpuinfo):
            amx_note += "; this CPU also lacks avx512_bf16/avx512_vnni, which sglang's CPU kernel executes"
    return CpuPreset(
        dtype=SGLANG_CPU_DTYPE,
        attention_backend=SGLANG_CPU_ATTENTION_BACKEND,
        extra_args=SGLANG_CPU_FLAGS,
        env=env,
        hardware=cpu_name(cpuinfo),
        missing=tuple(missing),
        amx_note=amx_note,
    )


@dataclass(frozen=True)
class CpuSweepSettings:
    """A sweep's server settings once ``--cpu`` is applied (:func:`apply_cpu_preset`): ``note`` is
    said once; ``notes``, said after it, are the CPU's own (no AMX: :data:`SGLANG_ASSUME_AMX_ENV`)."""

    dtype: str
    attention_backend: str
    extra_args: tuple[str, ...]
    env: dict[str, str]
    device_kind: str
    hardware: str
    note: str
    notes: tuple[str, ...] = ()


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
        notes=() if preset.amx_note is None else (preset.amx_note,),
    )

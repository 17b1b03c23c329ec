"""Hardware profiles of the performance model: datasheet numbers, calibrated efficiencies,
power, thermal, memory, acceptance and noise parameters.

A profile is a TOML (or JSON) file with the sections ``[hardware]``, ``[thermal]``,
``[memory]``, ``[efficiency]``, ``[interconnect]`` (GPU-to-GPU links, for tensor parallelism:
:mod:`specband.sim.parallel`), ``[power]``, ``[acceptance]``, ``[wallclock]`` and ``[noise]``.
Built-in profiles live in ``specband/data/profiles/<name>.toml``:

* ``rtx4060-laptop``: calibrated against the published RTX 4060 Laptop measurements
  (:mod:`specband.sim.calibrate`);
* ``a100-sxm4-80gb``, ``h100-sxm``, ``h200``: datasheet numbers only, marked
  ``calibrated = false``; whatever they do not set comes from ``rtx4060-laptop``.

Every profile file needs a ``[hardware]`` table with at least :data:`REQUIRED_HARDWARE_FIELDS`:
``hardware`` (the GPU's name; it labels every simulated row, so it is never inherited and
never taken from the file name), ``power_limit_w``, ``vram_mb``, ``mem_bandwidth_gbs``,
``peak_tflops`` and ``idle_power_w``. Every other value not given is inherited from the
profile named by ``base`` in ``[hardware]`` (default ``rtx4060-laptop``). Power
coefficients are fractions of ``activity_power_w`` (by default the headroom between idle
power and the power limit), so they carry over between chips of different size; the
calibrated profile pins ``activity_power_w`` so that lowering only ``power_limit_w`` (as
``nvidia-smi -pl`` does) keeps the demand and makes the cap bite.
The fields of :data:`NOT_INHERITED` (``activity_power_w``, ``calibrated``, ``source``,
``power_measured``, ``power_source``, ``power_borrowed_from``, ``serving_power_source``) are
not inherited: a profile whose ``[power]`` does not say ``power_measured = true`` has a power
model that rests on no measurement of its GPU, and its rows say so (:mod:`specband.sim.power`);
a profile without its own ``serving_power_source`` takes the serving calibration of the nearest
measured GPU class (:mod:`specband.sim.serving`).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError
from specband.core.limits import MAX_CONFIG_FILE_BYTES, is_finite_number, is_int
from specband.files.fileio import read_bytes_bounded
from specband.sim.draft_tree import AcceptParams

__all__ = [
    "DEFAULT_PROFILE",
    "NOT_INHERITED",
    "REQUIRED_HARDWARE_FIELDS",
    "SECTIONS",
    "HardwareProfile",
    "builtin_profiles",
    "load_profile",
    "profile_to_toml",
]

DEFAULT_PROFILE = "rtx4060-laptop"

#: Fields every profile file must set in ``[hardware]``: what tells one GPU from another
#: (the row label and the datasheet numbers the step time and the power band depend on).
REQUIRED_HARDWARE_FIELDS: tuple[str, ...] = (
    "hardware",
    "power_limit_w",
    "vram_mb",
    "mem_bandwidth_gbs",
    "peak_tflops",
    "idle_power_w",
)


#: Fields that are true/false rather than numbers.
_BOOL_FIELDS: tuple[str, ...] = ("calibrated", "power_measured")
#: Fields that are text.
_STR_FIELDS: tuple[str, ...] = (
    "name",
    "hardware",
    "source",
    "power_source",
    "power_borrowed_from",
    "serving_power_source",
)
#: Fields a profile never inherits from its ``base``: what its own numbers rest on.
NOT_INHERITED: tuple[str, ...] = (
    "calibrated",
    "source",
    "activity_power_w",
    "power_measured",
    "power_source",
    "power_borrowed_from",
    "serving_power_source",
)


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float range
        return False


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _f(default: float, section: str, lo: float, hi: float, doc: str) -> Any:
    return field(default=default, metadata={"section": section, "lo": lo, "hi": hi, "doc": doc})


@dataclass(frozen=True)
class HardwareProfile:
    """All parameters of one hardware profile (units in the names; see each field's
    ``metadata['doc']``).

    Raises:
        ConfigError: from ``__post_init__`` when a value is outside its range.
    """

    # [hardware]
    name: str = field(default="custom", metadata={"section": "hardware", "doc": "profile name"})
    hardware: str = field(default="custom", metadata={"section": "hardware", "doc": "hardware label of sweep rows"})
    calibrated: bool = field(default=False, metadata={"section": "hardware", "doc": "fitted to measurements"})
    source: str = field(default="", metadata={"section": "hardware", "doc": "where the numbers come from"})
    power_limit_w: float = _f(80.0, "hardware", 1.0, 5000.0, "board power limit, W")
    vram_mb: float = _f(8188.0, "hardware", 256.0, 1e7, "GPU memory, MiB")
    mem_bandwidth_gbs: float = _f(256.0, "hardware", 1.0, 1e5, "peak memory bandwidth, GB/s")
    peak_tflops: float = _f(29.0, "hardware", 0.1, 1e5, "peak dense fp16/bf16 tensor TFLOP/s (fp32 accumulate)")
    idle_power_w: float = _f(15.0, "hardware", 0.0, 2000.0, "board power with a server loaded and idle, W")
    idle_mem_used_mb: float = _f(350.0, "hardware", 0.0, 1e7, "memory in use before a launch, MiB")
    idle_util_pct: float = _f(2.0, "hardware", 0.0, 100.0, "utilisation before a launch, %")
    # [thermal]
    ambient_temp_c: float = _f(45.0, "thermal", -20.0, 100.0, "temperature of the idle GPU, C")
    thermal_resistance_c_per_w: float = _f(0.35, "thermal", 0.0, 10.0, "steady-state rise per W, C/W")
    thermal_time_constant_s: float = _f(40.0, "thermal", 0.1, 1e4, "first-order time constant, s")
    throttle_temp_c: float = _f(87.0, "thermal", 0.0, 150.0, "thermal slowdown threshold, C")
    throttle_clock_drop_per_c: float = _f(0.03, "thermal", 0.0, 1.0, "clock fraction lost per C above it")
    leakage_per_c: float = _f(0.004, "thermal", 0.0, 0.1, "static-power growth per C above reference")
    reference_temp_c: float = _f(60.0, "thermal", -20.0, 150.0, "temperature the power fit refers to, C")
    launch_s: float = _f(30.0, "thermal", 0.0, 3600.0, "server launch + CUDA graph capture + warm-up, s")
    launch_power_frac: float = _f(0.2, "thermal", 0.0, 1.0, "launch power above idle, fraction of headroom")
    cooldown_s: float = _f(5.0, "thermal", 0.0, 3600.0, "sleep between launches, s (docs/FACTS.md §4)")
    # [memory]
    cuda_context_mb: float = _f(400.0, "memory", 0.0, 1e6, "CUDA context and runtime outside the pool, MiB")
    runtime_reserved_mb: float = _f(1000.0, "memory", 0.0, 1e6, "static-pool memory that is not weights/KV, MiB")
    spec_buffer_mb_per_verify_token: float = _f(
        7.0, "memory", 0.0, 1e4, "speculative buffers per verified token (bs x draft tokens), MiB"
    )
    graph_mb_per_token: float = _f(1.0, "memory", 0.0, 1e4, "CUDA-graph memory per verified token, MiB")
    # [efficiency]
    bandwidth_efficiency: float = _f(0.9, "efficiency", 0.05, 1.0, "achieved / peak memory bandwidth")
    compute_efficiency: float = _f(0.5, "efficiency", 0.01, 1.0, "achieved / peak tensor throughput")
    roofline_sharpness: float = _f(3.0, "efficiency", 1.0, 20.0, "p of (t_mem^p + t_compute^p)^(1/p)")
    host_overhead_base_s: float = _f(0.0003, "efficiency", 0.0, 1.0, "host time per decode step, s")
    host_overhead_spec_s: float = _f(0.001, "efficiency", 0.0, 1.0, "extra host time per speculative step, s")
    host_overhead_draft_step_s: float = _f(0.0003, "efficiency", 0.0, 1.0, "host time per draft forward, s")
    host_overhead_verify_token_s: float = _f(
        5e-6, "efficiency", 0.0, 1.0, "host/tree time per verified token (bs x draft tokens), s"
    )
    spec_draft_step_overhead_s: float = _f(
        0.0,
        "efficiency",
        0.0,
        1.0,
        "per draft step of a speculative decode, beyond the draft forward (sampling, top-k), s",
    )
    tree_overhead_s: float = _f(
        0.0, "efficiency", 0.0, 1.0, "per speculative step of a tree (topk > 1): tree mask and build, s"
    )
    tree_node_overhead_s: float = _f(
        0.0, "efficiency", 0.0, 1.0, "per tree node expanded (bs x steps x topk**2, topk > 1): top-k expansion, s"
    )
    prompt_tokens: float = _f(128.0, "efficiency", 1.0, 1e6, "mean prompt length of the workload, tokens")
    moe_bandwidth_efficiency: float = _f(
        1.0,
        "efficiency",
        0.05,
        1.0,
        "routed experts' achieved bandwidth, fraction of bandwidth_efficiency's (fused MoE)",
    )
    # [interconnect]
    interconnect_bandwidth_gbs: float = _f(
        0.0, "interconnect", 0.0, 1e5, "GPU-to-GPU bandwidth per GPU, both directions together, GB/s; 0: none (one GPU)"
    )
    allreduce_latency_s: float = _f(
        0.0, "interconnect", 0.0, 0.01, "time of one all-reduce or all-gather beyond its bytes on the wire, s"
    )
    # [power]
    busy_power_frac: float = _f(0.6, "power", 0.0, 3.0, "power of a busy GPU at full clock, fraction of headroom")
    mem_power_frac: float = _f(0.3, "power", 0.0, 3.0, "power at peak memory bandwidth, fraction of headroom")
    compute_power_frac: float = _f(0.3, "power", 0.0, 10.0, "power at peak tensor throughput, fraction of headroom")
    activity_power_w: float = _f(
        0.0, "power", 0.0, 1e5, "W per unit of the activity fractions below; 0: power_limit_w - idle_power_w"
    )
    power_measured: bool = field(
        default=False, metadata={"section": "power", "doc": "the power fractions were fitted to this GPU's NVML power"}
    )
    power_source: str = field(
        default="",
        metadata={"section": "power", "doc": "what the [power] fractions were fitted to, when not NVML of this GPU"},
    )
    power_borrowed_from: str = field(
        default="",
        metadata={
            "section": "power",
            "doc": "the measured GPU class whose [power] fractions this unmeasured profile takes (on its headroom)",
        },
    )
    serving_busy_power_frac: float = _f(
        0.0,
        "power",
        0.0,
        3.0,
        "power of a GPU kept busy by a server at full clock, fraction of headroom (specband.sim.serving); 0: no fit",
    )
    serving_power_rel_sd: float = _f(
        0.0, "power", 0.0, 1.0, "relative sd of the serving power on held-out measurements (specband.sim.serving)"
    )
    serving_power_source: str = field(
        default="",
        metadata={"section": "power", "doc": "what serving_busy_power_frac was fitted to (specband.sim.serving)"},
    )
    cap_tracking: float = _f(0.1, "power", 0.0, 1.0, "share of the demand above the limit the cap lets through")
    clock_exponent: float = _f(2.0, "power", 1.0, 4.0, "core power ~ clock ** exponent (DVFS)")
    min_clock_fraction: float = _f(0.3, "power", 0.05, 1.0, "lowest clock the cap or throttle may set")
    # [acceptance]
    first_token_accept: float = _f(0.59, "acceptance", 1e-6, 0.999, "see specband.sim.draft_tree")
    depth_decay: float = _f(0.95, "acceptance", 1e-6, 1.5, "see specband.sim.draft_tree")
    rank2_ratio: float = _f(0.2, "acceptance", 0.0, 1.0, "see specband.sim.draft_tree")
    rank_decay: float = _f(0.8, "acceptance", 0.0, 1.0, "see specband.sim.draft_tree")
    alt_depth_decay: float = _f(0.55, "acceptance", 0.0, 1.5, "see specband.sim.draft_tree")
    off_track_factor: float = _f(0.55, "acceptance", 0.0, 1.0, "see specband.sim.draft_tree")
    chain_factor: float = _f(1.0, "acceptance", 0.0, 1.5, "see specband.sim.draft_tree")
    # [wallclock]
    ragged_overhead: float = _f(0.1, "wallclock", 0.0, 5.0, "wall-clock excess over step time at large bs")
    ragged_overhead_per_step: float = _f(0.01, "wallclock", 0.0, 5.0, "same, per draft step")
    fixed_overhead_s: float = _f(0.9, "wallclock", 0.0, 3600.0, "per-run wall-clock overhead, s")
    # [noise]
    speed_rel_sd: float = _f(0.005, "noise", 0.0, 1.0, "run-to-run relative sd of speed")
    accept_sd: float = _f(0.008, "noise", 0.0, 1.0, "run-to-run sd of accept length")
    power_rel_sd: float = _f(0.008, "noise", 0.0, 1.0, "run-to-run relative sd of average power")
    temp_sd_c: float = _f(0.5, "noise", 0.0, 50.0, "sd of temperature readings, C")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("str",) or f.name in _STR_FIELDS:
                if not isinstance(value, str):
                    raise ConfigError(f"profile '{self.name}': {f.metadata['section']}.{f.name} must be a string")
                if f.name in ("name", "hardware") and not value.isprintable():  # they label rows and lines
                    raise ConfigError(
                        f"profile {self.name!r}: {f.metadata['section']}.{f.name} {value!r} holds a control "
                        "character (a newline, tab or escape); a GPU's name is one printable line"
                    )
                continue
            if f.name in _BOOL_FIELDS:
                if not isinstance(value, bool):
                    raise ConfigError(f"profile '{self.name}': {f.metadata['section']}.{f.name} must be true or false")
                continue
            if not is_finite_number(value):
                raise ConfigError(
                    f"profile '{self.name}': {f.metadata['section']}.{f.name} must be a finite number, got {value!r}"
                )
            lo, hi = f.metadata["lo"], f.metadata["hi"]
            if not lo <= value <= hi:
                raise ConfigError(
                    f"profile '{self.name}': {f.metadata['section']}.{f.name} = {value!r} is outside [{lo:g}, {hi:g}]"
                )
        if self.idle_power_w >= self.power_limit_w:
            raise ConfigError(
                f"profile '{self.name}': hardware.idle_power_w ({self.idle_power_w}) must be below "
                f"power_limit_w ({self.power_limit_w})"
            )
        self.accept_params()  # validates the acceptance section

    @property
    def activity_scale_w(self) -> float:
        """Watts that an activity fraction of 1 adds above idle: ``activity_power_w``, or the
        headroom ``power_limit_w - idle_power_w`` when that is 0 (so a datasheet profile scales
        with its chip; a calibrated one keeps its demand when only the limit is lowered)."""
        return self.activity_power_w or (self.power_limit_w - self.idle_power_w)

    def accept_params(self) -> AcceptParams:
        """The ``[acceptance]`` section as :class:`~specband.sim.draft_tree.AcceptParams`."""
        return AcceptParams(
            self.first_token_accept,
            self.depth_decay,
            self.rank2_ratio,
            self.rank_decay,
            self.alt_depth_decay,
            self.off_track_factor,
            self.chain_factor,
        )

    def with_values(self, **values: Any) -> HardwareProfile:
        """A copy with some fields replaced (validated).

        Raises:
            ConfigError: an unknown field or a value out of range.
        """
        known = {f.name for f in fields(self)}
        for key in values:
            if key not in known:
                raise ConfigError(f"profile '{self.name}': unknown parameter '{key}'")
        return replace(self, **values)


#: Section name -> field names, in file order.
SECTIONS: dict[str, list[str]] = {}
for _f_ in fields(HardwareProfile):
    SECTIONS.setdefault(_f_.metadata["section"], []).append(_f_.name)


def _profiles_dir() -> Path:
    return Path(str(resources.files("specband").joinpath("data/profiles")))


def builtin_profiles() -> list[str]:
    """Names of the built-in profiles (files under ``specband/data/profiles``)."""
    return sorted(p.stem for p in _profiles_dir().glob("*.toml"))


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        raw = read_bytes_bounded(path, limit=MAX_CONFIG_FILE_BYTES, kind="profile file", error=ConfigError)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such profile file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read profile ({exc.strerror})") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, digit limit
            line = getattr(exc, "lineno", None)
            where = f"{path}:{line}" if line else str(path)
            raise ConfigError(f"{where}: not a valid JSON profile ({_one_line(exc)})") from None
    else:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10
            try:
                import tomli as tomllib
            except ModuleNotFoundError:
                raise ConfigError(f"{path}: TOML profiles need Python 3.11+ or the tomli package") from None
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # TOMLDecodeError, UnicodeDecodeError, digit limit
            raise ConfigError(f"{path}: not a valid TOML profile ({_one_line(exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a profile must be a table/object of sections")
    return data


def _flatten(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for section, values in data.items():
        if section not in SECTIONS:
            raise ConfigError(f"{path}: unknown section [{section}]; expected one of {', '.join(SECTIONS)}")
        if not isinstance(values, Mapping):
            raise ConfigError(f"{path}: [{section}] must be a table of values")
        for key, value in values.items():
            if key == "base" and section == "hardware":
                continue
            if key not in SECTIONS[section]:
                raise ConfigError(f"{path}: field '{section}.{key}': unknown parameter")
            if is_int(value) and key not in _BOOL_FIELDS:
                try:
                    value = float(value)
                except OverflowError:
                    raise ConfigError(f"{path}: field '{section}.{key}': number too large") from None
            flat[key] = value
    return flat


def _check_required(data: Mapping[str, Any], flat: Mapping[str, Any], path: Path) -> None:
    need = ", ".join(REQUIRED_HARDWARE_FIELDS)
    if "hardware" not in data:
        raise ConfigError(f"{path}: no [hardware] table; a profile file needs [hardware] with {need}")
    missing = [f"hardware.{key}" for key in REQUIRED_HARDWARE_FIELDS if key not in flat]
    if missing:
        raise ConfigError(
            f"{path}: missing {', '.join(missing)}; [hardware] needs {need} "
            "(hardware = the GPU's name, which labels every simulated row)"
        )
    label = flat["hardware"]
    if isinstance(label, str) and not label.strip():
        raise ConfigError(f"{path}: field 'hardware.hardware': give the GPU's name (it labels every simulated row)")


#: Deepest chain of ``hardware.base`` files loaded (a shipped profile has one level; the
#: bound keeps a crafted chain from exhausting Python's recursion limit).
MAX_PROFILE_DEPTH = 64


class _ProfileChainError(ConfigError):
    """A ``hardware.base`` loop or an over-long chain: raised once, naming the whole chain,
    and not wrapped again by every file on the way back."""


def _load_file(path: Path, stack: tuple[str, ...]) -> HardwareProfile:
    key = os.path.realpath(path)
    if key in stack:
        chain = " -> ".join([*stack[stack.index(key) :], key])
        raise _ProfileChainError(f"profiles inherit from each other in a loop (hardware.base): {chain}")
    if len(stack) >= MAX_PROFILE_DEPTH:
        raise _ProfileChainError(
            f"{path}: hardware.base chains more than {MAX_PROFILE_DEPTH} profiles (starting at {stack[0]})"
        )
    stack = (*stack, key)
    data = _read_mapping(path)
    flat = _flatten(data, path)
    _check_required(data, flat, path)
    base_name = data["hardware"].get("base", DEFAULT_PROFILE)
    flat.setdefault("name", path.stem)
    if path.stem == DEFAULT_PROFILE and path.parent == _profiles_dir():
        base = HardwareProfile()
    else:
        if not isinstance(base_name, str):
            raise ConfigError(f"{path}: field 'hardware.base': expected a profile name")
        try:
            base = _load(base_name, stack)
        except _ProfileChainError:
            raise
        except ConfigError as exc:
            raise ConfigError(f"{path}: field 'hardware.base': {exc}") from None
        # a derived profile is calibrated only if it says so
        for key in NOT_INHERITED:
            flat.setdefault(key, HardwareProfile.__dataclass_fields__[key].default)
    try:
        return base.with_values(**flat)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _load(profile: str | Path, stack: tuple[str, ...]) -> HardwareProfile:
    text = str(profile)
    candidate = Path(text)
    # os.path's exists/isfile say False for a name the OS refuses (over NAME_MAX bytes, e.g. a
    # profile file's hardware.base): an unknown profile, not an OSError
    if candidate.suffix.lower() in (".toml", ".json") or os.path.exists(text):
        return _load_file(candidate, stack)
    builtin = _profiles_dir() / f"{text}.toml"
    if not os.path.isfile(builtin):
        raise ConfigError(
            f"unknown profile '{text}': expected one of {', '.join(builtin_profiles())} or a .toml/.json file"
        )
    return _load_file(builtin, stack)


def load_profile(profile: str | Path | HardwareProfile = DEFAULT_PROFILE) -> HardwareProfile:
    """A profile by built-in name or from a TOML/JSON file.

    Args:
        profile: a built-in name (see :func:`builtin_profiles`), a ``.toml``/``.json`` path,
            or a :class:`HardwareProfile` (returned as is).

    Raises:
        ConfigError: unknown name, unreadable or malformed file (naming file and
            ``section.key``), no ``[hardware]`` table or a missing
            :data:`REQUIRED_HARDWARE_FIELDS` entry, unknown parameter, or a value out of range.
    """
    if isinstance(profile, HardwareProfile):
        return profile
    return _load(profile, ())


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(float(f"{float(value):.6g}"))


def profile_to_toml(profile: HardwareProfile, header: str = "") -> str:
    """The profile as TOML text, every section and value written out (numbers to 6
    significant digits).

    Args:
        header: comment lines (without ``#``) written first.
    """
    lines = [f"# {h}" if h else "#" for h in header.splitlines()] if header else []
    for section, names in SECTIONS.items():
        if lines:
            lines.append("")
        lines.append(f"[{section}]")
        for name in names:
            lines.append(f"{name} = {_toml_value(getattr(profile, name))}")
    return "\n".join(lines) + "\n"

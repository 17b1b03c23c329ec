"""The serving engine as one interface: :class:`Engine`, implemented by
:class:`~specband.engines.sglang.SglangEngine` and :class:`~specband.engines.vllm.VllmEngine`,
and :func:`get_engine`, which turns an ``--engine`` value into one of them.

Whatever differs between sglang and vLLM (the actions they run, their launch line and
environment, how their version is found, how a timed batch's accept length is read, their
schedule formats, their CPU preset) is a method of the engine; the layers above choose the
engine once from ``--engine`` and call it, never comparing engine names.

:data:`ENGINES` names each engine's module (imported the first time the engine is asked
for, as the policy registry does: ``vllm`` serves without sglang's flag tables and back).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from specband.core.errors import ConfigError

if TYPE_CHECKING:
    from specband.contract.actions import Action
    from specband.engines.client import BatchResult, ProbeHttp
    from specband.engines.cpu import CpuSweepSettings, ServingOptions
    from specband.engines.probing import LiveMetrics, ProbePlan, ServerFacts, ServerReading
    from specband.engines.schedule_files import Tier

__all__ = [
    "ENGINES",
    "ENGINE_NAMES",
    "AcceptProbe",
    "AutoSchedule",
    "Engine",
    "EngineVersion",
    "LaunchSchedule",
    "RowEngineColumns",
    "ScheduleFields",
    "ServerFields",
    "get_engine",
]

#: ``--engine`` value -> the module that defines the engine (its ``ENGINE``).
ENGINES: dict[str, str] = {
    "sglang": "specband.engines.sglang",
    "vllm": "specband.engines.vllm",
}
#: The ``--engine`` values, in :data:`ENGINES`' order (the commands' choices).
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)


class EngineVersion(NamedTuple):
    """The engine release the launch lines are written for.

    Attributes:
        version: the release (``"0.5.23"``, ``"0.32.0"``).
        source: where it came from, as printed after it (``"found in the --server-command
            interpreter"``, ``"assumed: sglang not found"``, ``"--sglang-version"``, ...).
        warning: the line to print when it had to be assumed, else ``None`` (printed once
            every input is checked, so that bad input stays one ``error:`` line).
    """

    version: str
    source: str
    warning: str | None


class RowEngineColumns(NamedTuple):
    """The engine's columns of a sweep row (:class:`specband.contract.record.SweepRecord`):
    the release of the engine that ran it (the other engine's column ``None``) and the
    attention backend (``None`` where the engine picks its own)."""

    sglang_version: str | None
    vllm_version: str | None
    attention_backend: str | None


class AcceptProbe(Protocol):
    """How a timed batch's accept length (and step times) is read from a running server:
    :meth:`before` right before the timed batch, :meth:`after` right after it."""

    def before(self) -> None:
        """Read the server's counters before the timed batch."""
        ...

    def after(self, batch: BatchResult) -> tuple[float | None, str | None, list[float]]:
        """``(accept_length, accept_length_source, the timed batch's step times in s)``;
        the accept length ``None`` (with its source) when it cannot be read."""
        ...


@dataclass(frozen=True)
class AutoSchedule:
    """A schedule the policy built (``launch --schedule auto``), for the engine to write in
    its format.

    Attributes:
        algo: the policy's name (named in the notes).
        tiers: the merged batch-size tiers (:func:`specband.deploy.tiers.merge_tiers`).
        off_reasons: one line per batch size where the schedule turns speculation off.
    """

    algo: str
    tiers: Sequence[Tier]
    off_reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaunchSchedule:
    """An engine's schedule for a server whose batch size moves (``launch --schedule``).

    Attributes:
        path: sglang: the ``--speculative-adaptive-config`` file; vLLM: ``--schedule`` as
            given (a file, or ``"auto"``: the object goes on the command line).
        action: the config the server starts from (sglang: the chain of its own initial
            ``--speculative-num-steps``; vLLM: the chain of the largest K).
        tiers: sglang: tier (batch size) -> its checked entry; empty for vLLM.
        ranges: vLLM: ``(start, end, K)`` batch-size ranges; empty for sglang.
        extra_args: sglang: ``--speculative-adaptive --speculative-adaptive-config FILE``;
            empty for vLLM.
        speculative_config: vLLM: the whole ``--speculative-config`` object; ``None`` for sglang.
    """

    path: Path | str
    action: Action
    tiers: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    ranges: tuple[tuple[int, int, int], ...] = ()
    extra_args: tuple[str, ...] = ()
    speculative_config: Mapping[str, Any] | None = None


class ScheduleFields(Protocol):
    """What an engine reads of a launch schedule (:class:`LaunchSchedule`, or the answer
    :class:`specband.deploy.answers.SchedulePick` that carries one)."""

    @property
    def path(self) -> Path | str: ...

    @property
    def tiers(self) -> Mapping[int, Mapping[str, Any]]: ...

    @property
    def ranges(self) -> tuple[tuple[int, int, int], ...]: ...

    @property
    def extra_args(self) -> tuple[str, ...]: ...

    @property
    def speculative_config(self) -> Mapping[str, Any] | None: ...


class ServerFields(Protocol):
    """What an engine reads of a server's settings
    (:class:`specband.engines.serverconfig.ServerConfig`, whose fields these are)."""

    @property
    def model_path(self) -> str: ...

    @property
    def draft_model_path(self) -> str | None: ...

    @property
    def server_command(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def dtype(self) -> str: ...

    @property
    def attention_backend(self) -> str: ...

    @property
    def extra_args(self) -> tuple[str, ...]: ...

    @property
    def sglang_version(self) -> str: ...

    @property
    def vllm_version(self) -> str | None: ...

    @property
    def speculative_config(self) -> Mapping[str, Any] | None: ...


class Engine(Protocol):
    """One serving engine: everything specband does differently for sglang and vLLM.

    Attributes:
        name: the ``--engine`` value and the rows' ``engine`` column (``"sglang"``, ``"vllm"``).
        display_name: how messages name it (``"sglang"``, ``"vLLM"``).
        actions: the contract actions it runs (``--actions all``).
        line_env: the environment a printed launch line sets (``launch --dry-run``,
            ``sweep --dry-run``).
        schedule_runs: what its schedule runs, for the note of a batch size where the
            schedule turns speculation off (``"sglang's adaptive tiers run"``).
    """

    name: str
    display_name: str
    actions: tuple[Action, ...]
    line_env: Mapping[str, str]
    schedule_runs: str

    # --- actions and server values
    def check_actions(self, actions: Sequence[Action], option: str = "--actions") -> None:
        """Refuse an action the engine cannot run (ConfigError naming ``option``)."""
        ...

    def check_server_values(self, dtype: str, attention_backend: str) -> None:
        """``--dtype`` and ``--attention-backend`` as the engine's parser takes them (ConfigError)."""
        ...

    def owned_flags(self, command: str) -> Mapping[str, str]:
        """Server flags specband sets itself in ``command`` (``sweep``, ``launch``) -> the
        specband option that sets them (``--server-arg`` refuses them)."""
        ...

    # --- the launch line, its environment and the engine's release
    def launch_command(
        self, config: ServerFields, action: Action, max_batch_size: int | None, mem_fraction_static: float
    ) -> list[str]:
        """The server command line for one action (ConfigError: a value it cannot take)."""
        ...

    def server_env(self, base: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
        """The server's environment from ``base`` (this process's) and ``own`` (``--env``)."""
        ...

    def resolve_server(
        self,
        server_command: str,
        version: str | None,
        attention_backend: str,
        server_env: dict[str, str],
        *,
        emulated: bool,
    ) -> tuple[str, EngineVersion]:
        """The server command to run (``--server-command``, or the engine's own default) and
        the release its flags are written for; ``version`` is ``--sglang-version``,
        ``emulated`` says that the command runs ``specband emulate`` (told to answer as
        this engine through ``server_env``).

        Raises:
            ConfigError: an option that does not apply to the engine, or a bad version.
        """
        ...

    def version_note(self, version: str) -> str | None:
        """The note to say about ``version`` (a release newer than specband knows), or ``None``."""
        ...

    def version_fields(self, version: str) -> dict[str, Any]:
        """The server fields ``sglang_version`` and ``vllm_version`` for a launch of ``version``."""
        ...

    def row_columns(self, config: ServerFields) -> RowEngineColumns:
        """The engine's columns of the rows a sweep with ``config`` writes."""
        ...

    def cpu_settings(self, server_command: str, given: ServingOptions, cache_dir: Path) -> CpuSweepSettings:
        """``--cpu`` applied to a sweep's options (ConfigError: a value the CPU backend
        cannot use)."""
        ...

    # --- measuring a timed batch
    def completion_model(self, config: ServerFields) -> str | None:
        """The ``model`` of an OpenAI completions request, or ``None`` for sglang's ``/generate``."""
        ...

    def accept_probe(self, url: str, action: Action, batch_size: int) -> AcceptProbe:
        """How the timed batch's accept length is read from the server at ``url``."""
        ...

    # --- reading a running server (``specband probe``)
    def recognises(self, http: ProbeHttp) -> bool:
        """Whether the server behind ``http`` answers as this engine (GET requests only)."""
        ...

    def probe_server(self, http: ProbeHttp, plan: ProbePlan) -> ServerReading:
        """Read the running server's config, acceptance and batch sizes, sending at most
        ``plan.max_requests`` short requests (EngineError: it stops answering)."""
        ...

    # --- watching a running server (``specband govern``)
    def server_facts(self, http: ProbeHttp) -> ServerFacts:
        """What the running server is: its action, batch bound, GPUs, models (GET only;
        EngineError: it does not answer)."""
        ...

    def live_metrics(self, page: str) -> LiveMetrics:
        """One ``/metrics`` page as the running batch, output tokens and acceptance counters."""
        ...

    # --- schedules
    def schedule_config(self, tiers: Sequence[Tier], draft_model: str | None) -> dict[str, Any]:
        """The schedule object in the engine's format (ConfigError: one it refuses)."""
        ...

    def check_schedule_file(self, path: Path) -> bool:
        """Load the written schedule with the engine's own loader when it is importable:
        True when it accepted it, False when there is none (ConfigError: it refused it)."""
        ...

    def schedule_margin_note(self, margin: float) -> str | None:
        """The note for ``schedule --margin`` where the engine's format has no use for it."""
        ...

    def schedule_written(
        self, path: Path, config: Mapping[str, Any], count: int, engine_checked: bool, draft_model: str | None
    ) -> tuple[list[str], list[str]]:
        """What ``specband schedule`` says once ``config`` (``count`` tiers or ranges) is
        written to ``path``: ``(lines for stdout, notes for stderr)``."""
        ...

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
        """``launch --schedule FILE|auto``: read ``schedule`` (a file), or write ``auto``
        in the engine's format; what it has to say is appended to ``notes``.

        Raises:
            ConfigError: an unreadable or invalid file, or a schedule that never speculates.
        """
        ...

    def schedule_server_fields(
        self, config: ServerFields, schedule: ScheduleFields, max_running_requests: int | None
    ) -> dict[str, Any]:
        """The server fields that run the schedule (its flags and ``--max-running-requests``'
        bound), to replace ``config``'s."""
        ...

    def schedule_note(self, schedule: ScheduleFields, action: Action) -> str:
        """The note ``launch --schedule`` prints about the schedule it starts."""
        ...

    def schedule_json(self, schedule: ScheduleFields) -> dict[str, Any]:
        """The engine's part of a schedule answer's ``--format json``."""
        ...


def get_engine(name: str) -> Engine:
    """The engine named ``name`` (an ``--engine`` value), imported on first use; the same
    object on every call.

    Raises:
        ConfigError: ``"--engine must be one of sglang, vllm, got 'x'"``.
    """
    if not isinstance(name, str) or name not in ENGINES:
        raise ConfigError(f"--engine must be one of {', '.join(ENGINE_NAMES)}, got {name!r}")
    return _load(name)


@cache
def _load(name: str) -> Engine:
    engine: Engine = importlib.import_module(ENGINES[name]).ENGINE
    return engine

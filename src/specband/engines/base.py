"""The serving engine as one interface: :class:`Engine`, implemented by
:class:`~specband.engines.sglang.SglangEngine` and :class:`~specband.engines.vllm.VllmEngine`
(and by any engine a plug-in registers), and :func:`get_engine`, which turns an ``--engine``
value into one of them once, where the value enters (an option, a file's ``engine`` column).

Whatever differs between engines (the actions they run, the speculative flags of a pick, their
launch line and environment, how their version is found, how a timed batch's accept length is
read, their schedule formats, their CPU preset) is a method of the engine; the layers above get
the resolved engine and call it, never comparing engine names.

The list of engines is data (:mod:`specband.core.engine_table`: ``data/engines.json``); each
engine's module is imported the first time the engine is asked for, as the policy registry
does (``vllm`` serves without sglang's flag tables and back). :func:`register_engine` adds an
engine at run time (a plug-in's, or a test's).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from specband.core.engine_table import (
    EngineEntry,
    default_engine_name,
    engine_names,
    find_engine_entry,
    register_engine_entry,
    unregister_engine_entry,
)
from specband.core.errors import ConfigError
from specband.core.optionspec import option

if TYPE_CHECKING:
    from specband.contract.actions import Action, ActionSet
    from specband.engines.client import BatchResult, ProbeHttp
    from specband.engines.cpu import CpuSweepSettings, ServingOptions
    from specband.engines.probing import LiveMetrics, ProbePlan, ServerFacts, ServerReading
    from specband.engines.schedule_files import Tier

__all__ = [
    "EMULATOR_ENGINE_ENV",
    "AcceptProbe",
    "AutoSchedule",
    "Engine",
    "EngineServing",
    "EngineVersion",
    "InstalledCheck",
    "LaunchSchedule",
    "RowEngineColumns",
    "ScheduleFields",
    "ServerFields",
    "default_engine",
    "engine_field",
    "engine_names",
    "get_engine",
    "register_engine",
    "runnable_indices",
    "unregister_engine",
]


#: The engine ``specband emulate`` answers as (its ``--engine``'s default); a sweep or launch
#: whose server command runs the emulator sets it to its engine where that is not the default.
EMULATOR_ENGINE_ENV = "SPECBAND_EMULATOR_ENGINE"


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
    the engine (its name), the release that ran it and the attention backend (``None`` where
    the engine picks its own)."""

    engine: str
    engine_version: str | None
    attention_backend: str | None


class InstalledCheck(NamedTuple):
    """What ``specband doctor`` says about the engine installed beside specband.

    Attributes:
        level: ``"ok"``, ``"warn"`` or ``"error"``.
        message: the installed release and the flag spellings specband emits for it, or why not.
        fix: what to do about a warn or error (``None`` for ok).
    """

    level: str
    message: str
    fix: str | None = None


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
    def engine(self) -> Engine: ...

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
    def engine_version(self) -> str: ...

    @property
    def speculative_config(self) -> Mapping[str, Any] | None: ...


class Engine(Protocol):
    """One serving engine as the layers above see it: what it is, which actions it runs and how
    it spells one (everything a pick needs: ``recommend`` imports nothing more), and its
    :attr:`serving` half (launch lines, versions, the HTTP client, probes, schedules), loaded
    the first time something serves or launches.

    Attributes:
        name: the ``--engine`` value and the rows' ``engine`` column (``"sglang"``, ``"vllm"``).
        display_name: how messages name it (``"sglang"``, ``"vLLM"``).
        actions: the contract actions it runs (``--actions all``; a pick for it is one of them).
        schedule_runs: what its schedule runs, for the note of a batch size where the
            schedule turns speculation off (``"sglang's adaptive tiers run"``).
        launcher: the command its launch line starts with by default (``--server-command``'s
            default; what a pick's flags are pasted after).
        draft_flag: where its flags name the EAGLE3 draft (``"--speculative-draft-model-path"``),
            for the note of flags printed without one.
    """

    name: str
    display_name: str
    actions: tuple[Action, ...]
    schedule_runs: str
    launcher: str
    draft_flag: str

    @property
    def serving(self) -> EngineServing:
        """The engine's serving half (imported on first use)."""
        ...

    def runs(self, action: Action) -> bool:
        """Whether the engine runs ``action`` (sglang: every action; vLLM: the chains)."""
        ...

    def check_actions(self, actions: Sequence[Action], option: str = "--actions") -> None:
        """Refuse an action the engine cannot run (ConfigError naming ``option``)."""
        ...

    def speculative_flags(self, action: Action, draft_model: str | None) -> list[str]:
        """The server flags that run ``action`` (none for the baseline), in the engine's spelling;
        ``draft_model`` ``None`` leaves the draft out (the caller says to add it).

        Raises:
            ConfigError: an action the engine cannot run.
        """
        ...

    def speculative_kwargs(self, action: Action, draft_model: str | None) -> dict[str, object]:
        """The same as the keyword arguments of the engine's own Python entry point."""
        ...


class EngineServing(Protocol):
    """How specband serves, launches and reads an engine (:attr:`Engine.serving`).

    Attributes:
        line_env: the environment a printed launch line sets (``launch --dry-run``,
            ``sweep --dry-run``).
        default_version: the release the flags are spelt for when none is given or found.
        schedule_version: ``(release, basis)``: the release its schedule format is written for
            and what says so (a schedule's provenance file).
    """

    line_env: Mapping[str, str]
    default_version: str
    schedule_version: tuple[str, str]

    # --- server values and the launch line
    def check_server_values(self, dtype: str, attention_backend: str) -> None:
        """``--dtype`` and ``--attention-backend`` as the engine's parser takes them (ConfigError)."""
        ...

    def check_server_env(self, env: Mapping[str, str]) -> None:
        """Refuse ``--env`` values that would change what the measurement relies on (ConfigError)."""
        ...

    def check_version(self, version: str) -> None:
        """Refuse a release the flags cannot be spelt for (ConfigError)."""
        ...

    def owned_flags(self, command: str) -> Mapping[str, str]:
        """Server flags specband sets itself in ``command`` (``sweep``, ``launch``) -> the
        specband option that sets them (``--server-arg`` refuses them)."""
        ...

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
        server_command: str | None,
        version: str | None,
        attention_backend: str,
        server_env: dict[str, str],
        *,
        emulated: bool,
    ) -> tuple[str, EngineVersion]:
        """The server command to run (``--server-command``, or ``None``: the engine's
        :attr:`Engine.launcher`) and the release its flags are written for; ``version`` is
        ``--sglang-version``, ``emulated`` says that the command runs ``specband emulate``
        (told to answer as this engine through ``server_env``).

        Raises:
            ConfigError: an option that does not apply to the engine, or a bad version.
        """
        ...

    def version_note(self, version: str) -> str | None:
        """The note to say about ``version`` (a release newer than specband knows), or ``None``."""
        ...

    def row_columns(self, config: ServerFields) -> RowEngineColumns:
        """The engine's columns of the rows a sweep with ``config`` writes."""
        ...

    def cpu_settings(self, server_command: str | None, given: ServingOptions, cache_dir: Path) -> CpuSweepSettings:
        """``--cpu`` applied to a sweep's options (ConfigError: a value the CPU backend
        cannot use)."""
        ...

    def installed_check(self) -> InstalledCheck:
        """The engine installed beside specband (``specband doctor``)."""
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

    def last_tier_steps(self, tier: Tier) -> list[int]:
        """What the schedule's last tier runs, as :meth:`beyond_last_tier` names it (sglang: its
        candidate steps; vLLM: ``[K]``)."""
        ...

    def beyond_last_tier(self, last_start: int, last_scheduled: int | None, steps: list[int]) -> str:
        """What the engine does at batch sizes above the schedule's last scheduled one (one line;
        ``last_scheduled`` ``None``: not known)."""
        ...


def runnable_indices(
    engine: Engine, actions: Sequence[Action] | ActionSet, allowed: Iterable[int] | None
) -> tuple[int, ...]:
    """The indices of ``allowed`` (``None``: every index of ``actions``) whose action ``engine``
    runs, in order: what a pick for the engine is chosen among."""
    indices = range(len(actions)) if allowed is None else allowed
    return tuple(int(i) for i in indices if engine.runs(actions[int(i)]))


def get_engine(name: str | Engine) -> Engine:
    """The engine named ``name`` (an ``--engine`` value, a file's ``engine`` column), imported on
    first use; the same object on every call. An :class:`Engine` is passed through, so that
    code given either resolves it once.

    Raises:
        ConfigError: ``"--engine must be one of sglang, vllm, got 'x'"``.
    """
    if not isinstance(name, str):
        if hasattr(name, "speculative_flags") and isinstance(getattr(name, "name", None), str):
            return name  # an engine already
        raise ConfigError(f"--engine must be one of {', '.join(engine_names())}, got {name!r}")
    entry = find_engine_entry(name)
    if entry is None:
        raise ConfigError(f"--engine must be one of {', '.join(engine_names())}, got {name!r}")
    loaded = _LOADED.get(name)
    if loaded is None:
        loaded = importlib.import_module(entry.module).ENGINE
        _LOADED[name] = loaded
    return loaded


#: Engines loaded (or registered as objects), by name.
_LOADED: dict[str, Engine] = {}


def default_engine() -> Engine:
    """The engine of ``--engine``'s default (:func:`specband.core.engine_table.default_engine_name`)."""
    return get_engine(default_engine_name())


def register_engine(engine: Engine, *, version_column: str | None = None) -> Engine:
    """Add ``engine`` (an object with every member of :class:`Engine`) at run time: from now on
    ``--engine NAME``, a row's ``engine`` column and :func:`get_engine` give it. Registering the
    same engine again does nothing.

    Raises:
        ConfigError: the name is taken by another engine, or it is no name.
    """
    entry = EngineEntry(engine.name, type(engine).__module__, engine.display_name, version_column)
    register_engine_entry(entry)
    _LOADED[engine.name] = engine
    return engine


def unregister_engine(name: str) -> None:
    """Remove an engine registered at run time with :func:`register_engine` (a test's; the
    bundled engines stay)."""
    unregister_engine_entry(name)
    if find_engine_entry(name) is None:
        _LOADED.pop(name, None)


def engine_field(
    help_text: str | None = None, panel: str = "server", *, short: bool = False, required: bool = False, **spec: Any
) -> Any:
    """``--engine NAME`` (``sweep``, ``launch``, ``recommend``, ``schedule``, ``emulate``...): the
    engine the command's flags and launch lines are for, a request field holding the resolved
    :class:`Engine` (the request's ``__post_init__`` calls :func:`get_engine`; the default is
    :func:`~specband.core.engine_table.default_engine_name`'s, unless ``required``). ``help_text``
    is the command's own help (default: the flags and launch lines it prints), ``short`` adds
    ``-e``; ``spec`` is passed on to :func:`~specband.core.optionspec.option` (``envvar``)."""
    names = " or ".join(engine_names())
    return option(
        ... if required else default_engine_name(),
        "--engine",
        *(("-e",) if short else ()),
        help=help_text or f"The engine the flags and launch lines are for: {names}.",
        panel=panel,
        metavar="NAME",
        parse=get_engine,
        **spec,
    )

"""How specband serves sglang (:attr:`specband.engines.sglang.SglangEngine.serving`):
:class:`SglangServing`, whose methods call sglang's pieces — the flags per release
(:mod:`specband.engines.sglang_flags`), the launch line
(:func:`specband.engines.serverconfig.sglang_launch_command`), the CPU preset
(:mod:`specband.engines.cpu`), ``/get_server_info`` (:mod:`specband.engines.client`) and the
adaptive-speculation config file (:mod:`specband.engines.schedule_files`).

sglang runs every contract and extended action (trees included), records per-step decode
times (``SGLANG_RECORD_STEP_TIME=1``) and reports the accept length in ``meta_info`` and
``/get_server_info``; its schedule is ``--speculative-adaptive --speculative-adaptive-config
FILE`` (batch-size tiers of candidate step counts).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.contract.actions import ACTIONS, REFERENCE_INDEX, Action, chain_action
from specband.core.errors import ConfigError
from specband.engines.base import (
    AcceptProbe,
    AutoSchedule,
    Engine,
    EngineVersion,
    InstalledCheck,
    LaunchSchedule,
    RowEngineColumns,
)
from specband.engines.client import fetch_server_info
from specband.engines.cpu import CpuSweepSettings, ServingOptions, apply_cpu_preset
from specband.engines.schedule_files import (
    SGLANG_SCHEDULE_VERSION,
    check_sglang_adaptive_config,
    read_sglang_adaptive_config,
    sglang_adaptive_config,
    sglang_beyond_last_tier_note,
    sglang_initial_steps,
    sglang_schedule_flags,
    validate_with_sglang,
)
from specband.engines.serverconfig import SGLANG_ENV, SGLANG_OWNED_FLAGS, check_sglang_env, sglang_launch_command
from specband.engines.sglang_flags import (
    ATTENTION_BACKEND_CHOICES,
    DTYPE_CHOICES,
    FLAG_SPELLINGS,
    NEWEST_VERSION,
    OLDEST_VERSION,
    flag_for,
    newer_version_note,
    parse_version,
    resolve_sglang_version,
)
from specband.files.fileio import write_text_atomic

if TYPE_CHECKING:
    from specband.engines.base import ScheduleFields, ServerFields
    from specband.engines.client import BatchResult, ProbeHttp
    from specband.engines.probing import LiveMetrics, ProbePlan, ServerFacts, ServerReading
    from specband.engines.schedule_files import Tier

__all__ = [
    "SglangAcceptProbe",
    "SglangServing",
    "sglang_installed_check",
    "sglang_version_check",
    "sglang_version_for",
    "timed_batch_step_times",
]


def sglang_version_for(
    given: str | None, server_command: str, server_env: Mapping[str, str], *, emulated: bool = False
) -> EngineVersion:
    """The sglang release the flags are spelt for (``--sglang-version``, else found in
    ``server_command``'s interpreter, else the newest supported), with where it came from;
    the warning when it had to be assumed and the command is not ``specband emulate``
    (``emulated``: the emulator answers as the newest release).

    Raises:
        ConfigError: ``given`` (or the version found) is not a supported release.
    """
    version, source = resolve_sglang_version(given, server_command, {**os.environ, **server_env})
    warning = None
    if source == "assumed" and not emulated:
        warning = (
            f"cannot find sglang in --server-command's interpreter; spelling flags for sglang {version} "
            f"(pass --sglang-version)"
        )
    labels = {"detected": "found in the --server-command interpreter", "assumed": "assumed: sglang not found"}
    return EngineVersion(version, labels.get(source, source), warning)


def timed_batch_step_times(prior: list[float], recorded: list[float]) -> list[float]:
    """The ``step_time_dict`` values (at the batch size) that the timed batch recorded.

    sglang appends one value per 40 decode iterations: the time since its previous value
    over 40 (``metrics_reporter.py``), so the first value recorded in the timed batch
    also spans the idle gap before it (the ``/server_info`` read, the barrier) and is
    dropped. A handful of values remain at bs 16 with 512 new tokens; none (a short
    batch) means the speed falls back to the wall clock.

    Args:
        prior: the values before the timed batch; recorded: after it.
    """
    new = recorded[len(prior) :] if recorded[: len(prior)] == prior else recorded
    return new[1:]


class SglangAcceptProbe:
    """sglang's accept length and step times: ``/server_info`` before and after the timed
    batch (:mod:`specband.harness.runner`). The accept length is the batch's own
    ``meta_info`` one when the responses carry ``spec_verify_ct`` (source ``meta_info``),
    else ``/server_info``'s ``avg_spec_accept_length`` (``server_info``); the baseline's is 1."""

    def __init__(self, url: str, action: Action, batch_size: int) -> None:
        self.url, self.action, self.batch_size = url, action, batch_size
        self.prior: list[float] = []

    def before(self) -> None:
        """Read the step times recorded before the timed batch."""
        self.prior = fetch_server_info(self.url).step_times.get(self.batch_size, [])

    def after(self, batch: BatchResult) -> tuple[float | None, str | None, list[float]]:
        """``(accept_length, accept_length_source, the timed batch's step times)``."""
        after = fetch_server_info(self.url)
        window_times = timed_batch_step_times(self.prior, after.step_times.get(self.batch_size, []))
        if batch.accept_length is not None and batch.accept_length >= 1.0:
            accept, source = batch.accept_length, "meta_info"
        elif after.accept_length is not None:
            accept, source = after.accept_length, "server_info"
        elif self.action.is_baseline:
            accept, source = 1.0, "baseline"
        else:
            accept, source = None, None
        if accept is not None and self.action.is_baseline:
            accept = 1.0
        return accept, source, window_times


def sglang_version_check(version: str, engine: Engine) -> InstalledCheck:
    """What ``specband doctor`` says about sglang ``version``: its flag spellings (the
    reference action's flags, :func:`specband.engines.sglang_flags.flag_for`); ``warn`` for a
    version outside ``OLDEST_VERSION``..``NEWEST_VERSION``."""

    supported = f"supported: {OLDEST_VERSION} .. {NEWEST_VERSION}"
    try:
        parsed = parse_version(version, option=engine.display_name)
    except ConfigError as exc:
        return InstalledCheck("warn", str(exc), f"install an sglang release in {OLDEST_VERSION} .. {NEWEST_VERSION}")
    flags = " ".join(engine.speculative_flags(ACTIONS[REFERENCE_INDEX], None))
    spelled = ", ".join(flag_for(field, parsed) for field in FLAG_SPELLINGS)
    message = f"sglang {version}; specband emits: {flags}; version-dependent spellings: {spelled}"
    if parsed > parse_version(NEWEST_VERSION):
        return InstalledCheck(
            "warn",
            f"{message}; newer than {NEWEST_VERSION} ({supported}): the {NEWEST_VERSION} spellings are assumed",
            f"check the launch lines, or install sglang {NEWEST_VERSION}",
        )
    return InstalledCheck("ok", message)


def sglang_installed_check(engine: Engine) -> InstalledCheck:
    """The installed sglang's version (:func:`sglang_version_check`); ``error`` when sglang is
    not installed beside specband."""
    from importlib import metadata

    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return InstalledCheck("error", "sglang is not installed", "pip install sglang (on the GPU machine)")
    return sglang_version_check(version, engine)


class SglangServing:
    """How specband serves sglang (:class:`specband.engines.base.EngineServing`; see the module
    docstring); ``engine`` is the engine it serves (its flags go on the launch line)."""

    line_env: Mapping[str, str] = SGLANG_ENV
    default_version = NEWEST_VERSION
    schedule_version: tuple[str, str] = SGLANG_SCHEDULE_VERSION

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def check_server_values(self, dtype: str, attention_backend: str) -> None:
        """``--dtype``: sglang's :data:`~specband.engines.sglang_flags.DTYPE_CHOICES`;
        ``--attention-backend``: its :data:`~specband.engines.sglang_flags.ATTENTION_BACKEND_CHOICES`
        or specband's ``auto`` (upstream's pick per action).

        Raises:
            ConfigError: the first value sglang would refuse, naming the option.
        """
        if dtype not in DTYPE_CHOICES:
            raise ConfigError(f"--dtype {dtype!r}: sglang {NEWEST_VERSION} takes one of {', '.join(DTYPE_CHOICES)}")
        if attention_backend != "auto" and attention_backend not in ATTENTION_BACKEND_CHOICES:
            raise ConfigError(
                f"--attention-backend {attention_backend!r}: sglang {NEWEST_VERSION} takes one of "
                f"{', '.join(ATTENTION_BACKEND_CHOICES)} (or auto: upstream's pick per action)"
            )

    def check_server_env(self, env: Mapping[str, str]) -> None:
        """:func:`~specband.engines.serverconfig.check_sglang_env`."""
        check_sglang_env(env)

    def check_version(self, version: str) -> None:
        """:func:`~specband.engines.sglang_flags.parse_version` (a supported release)."""
        parse_version(version)

    def owned_flags(self, command: str) -> Mapping[str, str]:
        """:data:`~specband.engines.serverconfig.SGLANG_OWNED_FLAGS` of ``command``."""
        return SGLANG_OWNED_FLAGS[command]

    def launch_command(
        self, config: ServerFields, action: Action, max_batch_size: int | None, mem_fraction_static: float
    ) -> list[str]:
        """:func:`~specband.engines.serverconfig.sglang_launch_command`."""
        return sglang_launch_command(config, action, max_batch_size, mem_fraction_static)

    def server_env(self, base: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
        """``base``, then :data:`~specband.engines.serverconfig.SGLANG_ENV` (docs/FACTS.md §1),
        then ``own``."""
        return {**base, **SGLANG_ENV, **dict(own)}

    def resolve_server(
        self,
        server_command: str | None,
        version: str | None,
        attention_backend: str,
        server_env: dict[str, str],
        *,
        emulated: bool,
    ) -> tuple[str, EngineVersion]:
        """``server_command`` as given (``None``: the engine's launcher) and :func:`sglang_version_for`."""
        command = server_command or self.engine.launcher
        return command, sglang_version_for(version, command, server_env, emulated=emulated)

    def version_note(self, version: str) -> str | None:
        """:func:`~specband.engines.sglang_flags.newer_version_note`."""
        return newer_version_note(version)

    def row_columns(self, config: ServerFields) -> RowEngineColumns:
        """The engine, the sglang release and the pinned attention backend."""
        return RowEngineColumns(config.engine.name, config.engine_version, config.attention_backend)

    def cpu_settings(self, server_command: str | None, given: ServingOptions, cache_dir: Path) -> CpuSweepSettings:
        """:func:`~specband.engines.cpu.apply_cpu_preset` (sglang's CPU engine)."""
        return apply_cpu_preset(server_command or self.engine.launcher, given, cache_dir)

    def installed_check(self) -> InstalledCheck:
        """:func:`sglang_installed_check`."""
        return sglang_installed_check(self.engine)

    def completion_model(self, config: ServerFields) -> str | None:
        """``None``: the workload goes to sglang's ``/generate``."""
        return None

    def accept_probe(self, url: str, action: Action, batch_size: int) -> AcceptProbe:
        """:class:`SglangAcceptProbe`."""
        return SglangAcceptProbe(url, action, batch_size)

    def recognises(self, http: ProbeHttp) -> bool:
        """``/server_info`` (or ``/get_server_info``) answers a JSON object with ``model_path``."""
        from specband.engines.sglang_probe import read_sglang_info  # lazy: only probe reads a server

        info = read_sglang_info(http)
        return info is not None and "model_path" in info

    def probe_server(self, http: ProbeHttp, plan: ProbePlan) -> ServerReading:
        """:func:`specband.engines.sglang_probe.probe_sglang`."""
        from specband.engines.sglang_probe import probe_sglang  # lazy: only probe reads a server

        return probe_sglang(http, plan, self.engine)

    def server_facts(self, http: ProbeHttp) -> ServerFacts:
        """:func:`specband.engines.sglang_probe.sglang_facts`."""
        from specband.engines.sglang_probe import sglang_facts  # lazy: only probe and govern read a server

        return sglang_facts(http)

    def live_metrics(self, page: str) -> LiveMetrics:
        """:func:`specband.engines.sglang_probe.sglang_live_metrics`."""
        from specband.engines.sglang_probe import sglang_live_metrics  # lazy: only govern reads /metrics live

        return sglang_live_metrics(page)

    def schedule_config(self, tiers: Sequence[Tier], draft_model: str | None) -> dict[str, Any]:
        """:func:`~specband.engines.schedule_files.sglang_adaptive_config` (the draft goes on
        the launch line, not in the file)."""
        return sglang_adaptive_config(tiers)

    def check_schedule_file(self, path: Path) -> bool:
        """:func:`~specband.engines.schedule_files.validate_with_sglang`."""
        return validate_with_sglang(path)

    def schedule_margin_note(self, margin: float) -> str | None:
        """``None``: ``--margin`` fills sglang's candidate sets."""
        return None

    def schedule_written(
        self, path: Path, config: Mapping[str, Any], count: int, engine_checked: bool, draft_model: str | None
    ) -> tuple[list[str], list[str]]:
        """The file and who checked it, then the launch flags that run it (a note instead
        when the schedule never speculates)."""
        checked = (
            "sglang's _load_adaptive_config accepts it"
            if engine_checked
            else ("sglang not importable: checked with its rules")
        )
        said, noted = [f"wrote {path} ({count} tier(s)); {checked}"], []
        try:
            entries = check_sglang_adaptive_config(config)
            said.append(
                f"{self.engine.display_name} flags: " + shlex.join(sglang_schedule_flags(path, entries, draft_model))
            )
        except ConfigError as exc:
            noted.append(str(exc))
        return said, noted

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
        """``FILE`` is read and checked with sglang's rules; ``auto`` is written to
        ``auto_file`` (with ``None``, a dry run, nothing is written: the note holds the
        schedule and the command line names ``<log>.schedule-XXXXXXXX.json``). The server
        starts at the chain of sglang's own initial ``--speculative-num-steps``.

        Raises:
            ConfigError: an unreadable or invalid file, or a schedule that never speculates.
        """

        if auto is not None:
            notes.extend(auto.off_reasons)
            obj = sglang_adaptive_config(auto.tiers)
            entries = check_sglang_adaptive_config(obj)
            path = auto_file or log.with_name(f"{log.name}.schedule-XXXXXXXX.json")
            sglang_schedule_flags(path, entries, None)  # refuses a schedule that never speculates, before writing
            tiers = ", ".join(map(str, sorted(entries)))
            if auto_file is None:
                notes.append(
                    f"--schedule auto (dry run, nothing written): {auto.algo}'s schedule {json.dumps(obj)} "
                    f"(tiers {tiers}); a launch writes it beside --log and removes it when it ends"
                )
            else:
                write_text_atomic(auto_file, json.dumps(obj, indent=2) + "\n", error=ConfigError)
                notes.append(
                    f"--schedule auto: wrote {auto.algo}'s schedule to {auto_file} (tiers {tiers}; removed at the end)"
                )
        else:
            path = Path(schedule)
            entries = read_sglang_adaptive_config(path)
        flags = sglang_schedule_flags(path, entries, None)
        return LaunchSchedule(
            path=path,
            action=chain_action(sglang_initial_steps(entries)),
            tiers=entries,
            extra_args=tuple(flags[flags.index("--speculative-adaptive") :]),
        )

    def schedule_server_fields(
        self, config: ServerFields, schedule: ScheduleFields, max_running_requests: int | None
    ) -> dict[str, Any]:
        """The adaptive flags before ``--max-running-requests N`` and the user's flags."""
        mrr = ["--max-running-requests", str(max_running_requests)] if max_running_requests else []
        return {"extra_args": (*schedule.extra_args, *mrr, *config.extra_args)}

    def schedule_note(self, schedule: ScheduleFields, action: Action) -> str:
        """The file, its tiers and the config the server starts from."""
        return f"adaptive speculation with {schedule.path}: tiers {sorted(schedule.tiers)}, starting at {action}"

    def schedule_json(self, schedule: ScheduleFields) -> dict[str, Any]:
        """``tiers`` (keys as strings) and ``extra_args``."""
        return {
            "tiers": {str(tier): dict(entry) for tier, entry in schedule.tiers.items()},
            "extra_args": list(schedule.extra_args),
        }

    def last_tier_steps(self, tier: Tier) -> list[int]:
        """The last tier's ``candidate_steps``."""
        return list(tier.steps)

    def beyond_last_tier(self, last_start: int, last_scheduled: int | None, steps: list[int]) -> str:
        """:func:`~specband.engines.schedule_files.sglang_beyond_last_tier_note`."""
        return sglang_beyond_last_tier_note(self.engine.display_name, last_start, last_scheduled, steps)

"""The schedule library's entry points for the commands: ``specband schedule``
(:class:`ScheduleRequest`, :func:`write_schedule`) and ``launch --schedule FILE|auto``
(:func:`launch_schedule`). The tier picks are :func:`specband.deploy.recommend.answer`'s
(a :class:`~specband.deploy.answers.ScheduleAnswer`); the schedules themselves are
:mod:`specband.deploy.tiers`'s."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.contract.actions import ACTION_SETS, ActionSet, action_set_field
from specband.contract.actions import action_set as named_action_set
from specband.core.batchlist import parse_batch_sizes
from specband.core.engine_table import display_name_of
from specband.core.errors import ConfigError
from specband.core.optionspec import option
from specband.deploy.answers import JsonObject, ScheduleAnswer, SchedulePick
from specband.deploy.options import (
    algo_field,
    allow_transfer_field,
    data_field,
    gpu_field,
    models_field,
    target_field,
    trust_pickle_field,
)
from specband.deploy.recommend import AnswerRequest, ScheduleSpec, answer
from specband.deploy.tiers import merge_tiers
from specband.engines.base import AutoSchedule, Engine, engine_field, engine_names, get_engine
from specband.engines.schedule_files import Tier, provenance_path, read_schedule_provenance
from specband.files.fileio import check_out_path, out_option_path, write_text_atomic

if TYPE_CHECKING:
    from specband.deploy.transfer import UserSetup

__all__ = [
    "SchedulePick",
    "ScheduleRequest",
    "WrittenSchedule",
    "auto_schedule",
    "launch_schedule",
    "new_auto_schedule_file",
    "write_schedule",
]


def new_auto_schedule_file(log: Path) -> Path:
    """A new, empty file for the schedule ``launch --schedule auto`` builds: beside the
    server log, named ``<log>.schedule-<random>.json`` and created with ``O_EXCL`` (so no
    file of the user's is ever overwritten). The launch owns it and removes it when it ends.

    Raises:
        ConfigError: the log's folder cannot be written.
    """
    import os
    import tempfile

    try:
        fd, name = tempfile.mkstemp(prefix=f"{log.name}.schedule-", suffix=".json", dir=log.parent)
    except OSError as exc:
        raise ConfigError(f"--log {log}: cannot write the schedule beside it ({exc.strerror or exc})") from None
    os.close(fd)
    return Path(name)


def auto_schedule(
    engine: Engine,
    algo: str,
    models: Path | None,
    data: Path | None,
    *,
    notes: list[str],
    trust_pickle: bool = False,
    setup: UserSetup | None = None,
    allow_transfer: bool = False,
) -> AutoSchedule:
    """``--schedule auto``: the schedule of ``specband schedule --engine E`` for
    ``--algo``/``--models`` (the best chain config per measured batch size, merged into
    tiers), the user's ``setup`` checked against the data's as ``recommend`` checks it; the
    loading notes and the transfer's warnings are appended to ``notes``.

    Raises:
        TransferError: the data is from another setup and ``allow_transfer`` is not set; the
            loading errors of :func:`specband.artifacts.load.load_models`.
    """
    tiered = _tier_picks(algo, models, data, engine, trust_pickle, setup, allow_transfer)
    notes += tiered.notes
    picks = tiered.picks
    return AutoSchedule(algo, merge_tiers(picks), tuple(p.off_reason for p in picks if p.off_reason))


def launch_schedule(
    engine: Engine,
    schedule: str,
    auto: AutoSchedule | None,
    draft: str | None = None,
    *,
    notes: list[str],
    auto_file: Path | None = None,
    log: Path = Path("specband-server.log"),
) -> SchedulePick:
    """The schedule part of ``specband launch [--engine E] --schedule FILE|auto``; what it has
    to say is appended to ``notes`` for the caller to print.

    With ``auto`` (:func:`auto_schedule`, for ``--schedule auto``) the engine writes it in its
    format (:meth:`specband.engines.base.EngineServing.launch_schedule`: sglang's file goes to
    ``auto_file``, :func:`new_auto_schedule_file`, owned by the launch, and a dry run's
    ``None`` writes nothing; vLLM's object goes on the command line); else ``schedule`` is a
    file read and checked with the engine's rules (sglang: an adaptive config; vLLM: a
    ``--speculative-config`` object, its ``model`` set to ``draft``).

    Returns:
        a :class:`~specband.deploy.answers.SchedulePick` of ``engine``: ``path``, ``action``
        (the config the server starts from) and the engine's part (sglang: ``tiers`` and
        ``extra_args``; vLLM: ``ranges`` and ``speculative_config``).

    Raises:
        ConfigError: an unreadable or invalid file, or a schedule that never speculates.
    """
    made = engine.serving.launch_schedule(schedule, auto, draft=draft, notes=notes, auto_file=auto_file, log=log)
    auto_tiers = None if auto is None else auto.tiers
    notes += schedule_provenance_notes(engine, schedule, auto_tiers, made.tiers, made.ranges)
    return SchedulePick(
        engine=engine,
        path=made.path,
        action=made.action,
        tiers=made.tiers,
        ranges=made.ranges,
        extra_args=made.extra_args,
        speculative_config=made.speculative_config,
    )


def _tier_picks(
    algo: str,
    models: Path | None,
    data: Path | None,
    engine: Engine,
    trust_pickle: bool,
    setup: UserSetup | None,
    allow_transfer: bool,
) -> ScheduleAnswer:
    """``--schedule auto``'s tier picks for ``engine``: :func:`specband.deploy.recommend.answer`
    of ``--algo``/``--models`` as ``specband schedule`` asks it."""
    request = AnswerRequest(
        algo=algo,
        models=models,
        data=data,
        schedule=ScheduleSpec(engine=engine),
        trust_pickle=trust_pickle,
        allow_transfer=allow_transfer,
    )
    tiered = answer(request, setup)
    assert isinstance(tiered, ScheduleAnswer)
    return tiered


def _schedule_option_fields() -> dict[str, Any]:
    return {
        "actions": action_set_field("the models (an extended folder is read with 'extended' only)", "model"),
        "engine": engine_field(f"Engine format: {' or '.join(engine_names())}.", "output", short=True, required=True),
        "models": models_field(),
        "algo": algo_field(),
        "data": data_field("schedule"),
        "trust_pickle": trust_pickle_field(),
        "batch_sizes": option(
            None,
            "--batch-sizes",
            help="Comma-separated batch sizes to schedule. Default: the measured ones.",
            panel="pick",
            metavar="N,N,...",
            show_default=False,
        ),
        "margin": option(
            0.0,
            "--margin",
            help="sglang: chain configs scoring within this many reward units of the best join a tier's "
            "candidate_steps, so sglang's acceptance controller can move inside the set.",
            panel="pick",
            metavar="R",
        ),
        "out": option("specband-schedule.json", "--out", "-o", help="File to write.", panel="output", metavar="FILE"),
        "force": option(False, "--force", help="Replace --out if it exists.", panel="output"),
        "draft_model": option(
            None,
            "--draft-model",
            help="EAGLE3 draft model path or id (vLLM's `model`; sglang's launch flag).",
            panel="setup",
            metavar="PATH",
            give="the EAGLE3 draft model's path or hub id",
            show_default=False,
        ),
        "include_unmeasured": option(
            False,
            "--include-unmeasured",
            help="Let a model-based policy score configs never measured at a batch size (default: only measured "
            "configs, as recommend).",
            panel="pick",
        ),
        "engine_check": option(
            True,
            "--engine-check/--no-engine-check",
            help="Load the sglang file with sglang's own _load_adaptive_config when sglang is importable.",
            panel="output",
        ),
        "target": target_field(),
        "gpu": gpu_field(),
        "allow_transfer": allow_transfer_field(),
        "output_format": option(
            "text",
            "--format",
            "-f",
            help="'text' (a table) or 'json' (tiers, origin, transfer, why speculation is off).",
            panel="output",
            metavar="KIND",
            choices=("text", "json"),
        ),
    }


_F = _schedule_option_fields()


@dataclass(frozen=True)
class ScheduleRequest:
    """Every option of ``specband schedule``, checked when the request is built.

    Raises:
        ConfigError: an unknown ``--engine``, an empty ``--out``, or an ``--out`` that
            exists without ``--force`` (one line each); InvalidActionError: an unknown
            ``--actions``.
    """

    engine: Engine = _F["engine"]
    models: Path | None = _F["models"]
    algo: str = _F["algo"]
    data: Path | None = _F["data"]
    trust_pickle: bool = _F["trust_pickle"]
    batch_sizes: str | None = _F["batch_sizes"]
    margin: float = _F["margin"]
    out: str = _F["out"]
    force: bool = _F["force"]
    draft_model: str | None = _F["draft_model"]
    include_unmeasured: bool = _F["include_unmeasured"]
    engine_check: bool = _F["engine_check"]
    actions: str = _F["actions"]
    target: str | None = _F["target"]
    gpu: str | None = _F["gpu"]
    allow_transfer: bool = _F["allow_transfer"]
    output_format: str = _F["output_format"]

    def __post_init__(self) -> None:

        object.__setattr__(self, "engine", get_engine(self.engine))  # resolved once (an unknown one: one line)
        check_out_path(self.out_path, overwrite=self.force)
        check_out_path(provenance_path(self.out_path), overwrite=self.force)
        named_action_set(self.actions)  # an unknown --actions, naming the option

    @property
    def action_set(self) -> ActionSet:
        """The set ``--actions`` names: the folder is read against it."""
        return ACTION_SETS[self.actions]

    @property
    def out_path(self) -> Path:
        """``--out`` as a path (an empty one is refused, naming ``--out``)."""

        return out_option_path(self.out)

    def answer_request(self, batch_sizes: tuple[int, ...] | None) -> AnswerRequest:
        """What :func:`specband.deploy.recommend.answer` answers for this request: the tier
        picks at ``batch_sizes`` (``--batch-sizes`` parsed; ``None``: the measured ones)."""
        return AnswerRequest(
            algo=self.algo,
            models=self.models,
            data=self.data,
            schedule=ScheduleSpec(batch_sizes, self.margin, self.engine, measured_only=not self.include_unmeasured),
            trust_pickle=self.trust_pickle,
            action_set=self.action_set,
            allow_transfer=self.allow_transfer,
        )


@dataclass(frozen=True)
class WrittenSchedule:
    """What :func:`write_schedule` wrote.

    Attributes:
        path: the file.
        config: its JSON object (sglang's adaptive config, or vLLM's speculative config).
        answer: the tier picks it was written from (:class:`~specband.deploy.answers.ScheduleAnswer`:
            the chain pick per batch size, the data's origin, the transfer check, the notes).
        tiers: the merged tiers.
        engine_checked: sglang's own loader accepted the file.
        provenance: what was written beside it (:func:`schedule_provenance`:
            the engine release it targets, the data's provenance, its notes, what the engine does
            above the last tier), in ``provenance_file``.
    """

    path: Path
    config: JsonObject
    answer: ScheduleAnswer
    tiers: list[Tier]
    engine_checked: bool
    provenance: JsonObject
    provenance_file: Path

    def to_json(self, engine: Engine) -> dict[str, Any]:
        """What ``schedule --format json`` prints: ``engine``, the file (``path``), its
        ``config``, then the answer's :meth:`~specband.deploy.answers.ScheduleAnswer.to_json`
        (per batch size the chain pick and why speculation is off, the origin, the transfer)."""
        return {
            "engine": engine.name,
            "engine_version": self.provenance["engine_version"],
            "path": str(self.path),
            "provenance_file": str(self.provenance_file),
            "beyond_last_tier": self.provenance["beyond_last_tier"],
            "config": dict(self.config),
            **self.answer.to_json(),
        }


def write_schedule(r: ScheduleRequest, setup: UserSetup | None = None) -> WrittenSchedule:
    """Build the energy-band speculation schedule of ``r`` (one chain config, topk 1, per
    batch-size tier: :func:`specband.deploy.recommend.answer`, the user's ``setup`` checked
    before anything is written) and write it atomically in the engine's format (the sglang
    file is checked with sglang's own loader when sglang is importable, before it replaces --out).

    Raises:
        ConfigError / DataError: a bad batch-size list; TransferError: as
        :func:`specband.deploy.recommend.answer`; the loading errors of
        :func:`specband.artifacts.load.load_models`.
    """

    sizes = None if r.batch_sizes is None else tuple(parse_batch_sizes(r.batch_sizes))
    tiered = answer(r.answer_request(sizes), setup)  # a refused transfer leaves --out alone
    assert isinstance(tiered, ScheduleAnswer)
    tiers = merge_tiers(tiered.picks)
    engine = r.engine
    obj = engine.serving.schedule_config(tiers, r.draft_model)
    checked: list[bool] = []

    def check_with_engine(tmp: Path) -> None:
        if r.engine_check and engine.serving.check_schedule_file(tmp):
            checked.append(True)

    provenance = schedule_provenance(engine, tiered.origin.data.provenance, tiered.notes, tiers)
    write_text_atomic(r.out_path, json.dumps(obj, indent=2) + "\n", error=ConfigError, check=check_with_engine)
    side = provenance_path(r.out_path)
    write_text_atomic(side, json.dumps(provenance, indent=2) + "\n", error=ConfigError)
    return WrittenSchedule(r.out_path, obj, tiered, tiers, bool(checked), provenance, side)


def schedule_provenance(engine: Engine, provenance: str, notes: Sequence[str], tiers: Sequence[Tier]) -> dict[str, Any]:
    """The provenance object written beside a schedule: the engine (its name) and the release
    its format targets with the basis (:attr:`~specband.engines.base.EngineServing.schedule_version`),
    the data's provenance (``measured``, ``simulated``, ...), the notes the schedule was written
    with (a simulation's label among them), the largest batch size scheduled, and what the engine
    does above it (:meth:`~specband.engines.base.EngineServing.beyond_last_tier`)."""
    serving = engine.serving
    version, basis = serving.schedule_version
    last = tiers[-1]
    top = max([*last.batch_sizes, last.start, *([] if last.end is None else [last.end])])
    return {
        "engine": engine.name,
        "engine_version": version,
        "engine_version_basis": basis,
        "provenance": provenance,
        "notes": [str(n) for n in notes],
        "last_batch_size": top,
        "beyond_last_tier": serving.beyond_last_tier(last.start, top, serving.last_tier_steps(last)),
    }


def schedule_provenance_notes(
    engine: Engine,
    schedule: str,
    auto_tiers: Sequence[Tier] | None,
    tiers: Mapping[int, Mapping[str, Any]],
    ranges: Sequence[tuple[int, int, int]],
) -> list[str]:
    """What ``launch --schedule`` says of the schedule's provenance: for a file, the provenance
    file ``specband schedule`` wrote beside it (the engine release it targets, the data's
    provenance and the notes it was written with, e.g. SIMULATED), or that there is none; for
    ``auto`` (``auto_tiers``: the tiers the policy built), the release it is written for (its
    notes come with the picks); then what the engine does above the last tier.

    Args:
        engine: the engine launched.
        schedule: ``--schedule`` (a file, or ``"auto"``).
        auto_tiers: the tiers of ``--schedule auto``, ``None`` for a file.
        tiers, ranges: the launched schedule's sglang tiers or vLLM ranges.

    Raises:
        ConfigError: a provenance file that cannot be read (:func:`read_schedule_provenance`).
    """
    serving = engine.serving
    version, _ = serving.schedule_version
    label = engine.display_name
    if auto_tiers is not None:
        last = auto_tiers[-1]
        top = max([*last.batch_sizes, last.start])
        return [
            f"the auto schedule is written for {label} {version}",
            serving.beyond_last_tier(last.start, top, serving.last_tier_steps(last)),
        ]
    found = read_schedule_provenance(schedule)
    side = provenance_path(schedule)
    if found is None:
        out = [
            f"{schedule}: no {side.name} beside it, so what its tiers rest on (measured or simulated data, which "
            "engine release) is not known; `specband schedule` writes one"
        ]
    else:
        written_for = display_name_of(str(found["engine"]))
        out = [
            f"{schedule}: written by `specband schedule` for {written_for} {found['engine_version']} from "
            f"{found['provenance']} data ({side.name})",
            *(f"{schedule}: {n}" for n in found["notes"]),
        ]
        if found["engine"] != engine.name:
            out.append(f"{schedule} was written for {written_for}, launched with --engine {engine.name}")
        return [*out, str(found["beyond_last_tier"])]
    if tiers:
        last_key = max(tiers)
        steps = [int(s) for s in tiers[last_key]["candidate_steps"]]
        out.append(serving.beyond_last_tier(last_key, None, steps))
    elif ranges:
        start, end, k = max(ranges)
        out.append(serving.beyond_last_tier(start, end, [k]))
    return out

"""The schedule library's entry points for the commands: ``specband schedule``
(:class:`ScheduleRequest`, :func:`write_schedule`), ``launch --schedule FILE|auto``
(:func:`launch_schedule`) and ``recommend --batch-mix`` (:func:`recommend_mix`). The
schedules themselves are :mod:`specband.deploy.tiers`'s."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.contract.actions import EXTENDED_ACTIONS, Action
from specband.deploy.answers import SchedulePick

if TYPE_CHECKING:
    from specband.deploy.transfer import TransferCheck, UserSetup
from specband.deploy.tiers import PolicyScorer, check_scorer_transfer, load_scorer, merge_tiers, pick_chain_tiers
from specband.engines.base import ENGINE_NAMES, AutoSchedule, get_engine

__all__ = [
    "MixRecommendation",
    "SchedulePick",
    "ScheduleRequest",
    "WrittenSchedule",
    "auto_schedule",
    "launch_schedule",
    "new_auto_schedule_file",
    "recommend_mix",
    "schedule_for_launch",
    "vllm_schedule_for_launch",
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

    from specband.core.errors import ConfigError

    try:
        fd, name = tempfile.mkstemp(prefix=f"{log.name}.schedule-", suffix=".json", dir=log.parent)
    except OSError as exc:
        raise ConfigError(f"--log {log}: cannot write the schedule beside it ({exc.strerror or exc})") from None
    os.close(fd)
    return Path(name)


def auto_schedule(
    engine: str,
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
            loading errors of :func:`specband.deploy.recommend.load_models`.
    """
    scorer = load_scorer(algo, models, data, trust_pickle=trust_pickle)
    notes += scorer.notes
    if setup is not None:
        notes.extend(check_scorer_transfer(scorer, setup, allow=allow_transfer).warnings)
    picks = pick_chain_tiers(scorer, engine=get_engine(engine).name)
    return AutoSchedule(algo, merge_tiers(picks), tuple(p.off_reason for p in picks if p.off_reason))


def launch_schedule(
    engine: str,
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
    format (:meth:`specband.engines.base.Engine.launch_schedule`: sglang's file goes to
    ``auto_file``, :func:`new_auto_schedule_file`, owned by the launch, and a dry run's
    ``None`` writes nothing; vLLM's object goes on the command line); else ``schedule`` is a
    file read and checked with the engine's rules (sglang: an adaptive config; vLLM: a
    ``--speculative-config`` object, its ``model`` set to ``draft``).

    Returns:
        a :class:`~specband.deploy.answers.SchedulePick` of ``engine``: ``path``, ``action``
        (the config the server starts from) and the engine's part (sglang: ``tiers`` and
        ``extra_args``; vLLM: ``ranges`` and ``speculative_config``).

    Raises:
        ConfigError: an unknown engine, an unreadable or invalid file, or a schedule that
            never speculates.
    """
    runs = get_engine(engine)
    made = runs.launch_schedule(schedule, auto, draft=draft, notes=notes, auto_file=auto_file, log=log)
    return SchedulePick(
        engine=runs.name,
        path=made.path,
        action=made.action,
        tiers=made.tiers,
        ranges=made.ranges,
        extra_args=made.extra_args,
        speculative_config=made.speculative_config,
    )


def schedule_for_launch(
    schedule: str,
    algo: str,
    models: Path | None,
    data: Path | None,
    *,
    notes: list[str],
    auto_file: Path | None = None,
    log: Path = Path("specband-server.log"),
    trust_pickle: bool = False,
    setup: UserSetup | None = None,
    allow_transfer: bool = False,
) -> SchedulePick:
    """:func:`launch_schedule` for sglang (``--speculative-adaptive-config``; the draft goes on
    the launch line), with :func:`auto_schedule` for ``auto``."""
    auto = None
    if schedule == "auto":
        auto = auto_schedule(
            "sglang", algo, models, data, notes=notes, trust_pickle=trust_pickle, setup=setup,
            allow_transfer=allow_transfer,
        )  # fmt: skip
    return launch_schedule("sglang", schedule, auto, None, notes=notes, auto_file=auto_file, log=log)


def vllm_schedule_for_launch(
    schedule: str,
    algo: str,
    models: Path | None,
    data: Path | None,
    draft: str | None,
    *,
    notes: list[str],
    trust_pickle: bool = False,
    setup: UserSetup | None = None,
    allow_transfer: bool = False,
) -> SchedulePick:
    """:func:`launch_schedule` for vLLM (a ``--speculative-config`` object whose ``model`` is
    ``draft``; nothing is written), with :func:`auto_schedule` for ``auto``."""
    auto = None
    if schedule == "auto":
        auto = auto_schedule(
            "vllm", algo, models, data, notes=notes, trust_pickle=trust_pickle, setup=setup,
            allow_transfer=allow_transfer,
        )  # fmt: skip
    return launch_schedule("vllm", schedule, auto, draft, notes=notes)


@dataclass(frozen=True)
class MixRecommendation:
    """``specband recommend --batch-mix``'s answer: one config for a batch-size mix.

    Attributes:
        algorithm: model card algorithm name.
        source: where the policy came from.
        mix: batch size -> weight (normalised).
        pick: the :class:`~specband.deploy.mix.MixPick` (expected reward and regret, per-batch-size rows).
        draft_model: ``--draft-model`` (or ``None``).
        notes: the loading notes and the transfer check's warnings, in order.
        transfer: the transfer check (:class:`~specband.deploy.transfer.TransferCheck`: the
            differences taken with ``--allow-transfer``), or ``None`` when not checked.
        origin: what the rewards rest on (:func:`specband.deploy.recommend.pick_origin` of the
            data, no batch size: ``rows``/``repeats`` are per batch size in ``counts``).
        counts: measured batch size -> ``{"rows": int | None, "repeats": int | None}``
            behind it, as :func:`specband.deploy.recommend.pick_origin` counts them.
    """

    algorithm: str
    source: str
    mix: Mapping[int, float]
    pick: Any
    draft_model: str | None = None
    notes: tuple[str, ...] = ()
    transfer: TransferCheck | None = None
    origin: Mapping[str, Any] | None = None
    counts: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def action(self) -> Action:
        """The one config for the mix."""
        return EXTENDED_ACTIONS[self.pick.index]

    def flags(self) -> list[str]:
        """The sglang flags of :attr:`action`."""
        from specband.contract.actions import sglang_cli_args

        return sglang_cli_args(self.action, self.draft_model)

    def as_json(self) -> dict[str, Any]:
        """What ``recommend --batch-mix --format json`` prints: ``algorithm``, ``source``,
        ``batch_mix``, ``action_index``, ``action``, ``flags``, ``kwargs``,
        ``expected_reward``, ``expected_regret``, ``per_batch_size`` (each row's fields, its
        ``own_action``, ``regret``, and the ``rows``/``repeats`` measured there), ``left_out``
        (own picks not scored at every batch size: ``action_index``, ``action``,
        ``own_pick_at``, ``not_scored_at``), ``origin`` (as a one-batch-size pick's, or
        ``null``) and ``transfer``."""
        import dataclasses

        from specband.contract.actions import server_args_kwargs
        from specband.deploy.transfer import TransferCheck

        counts = self.counts

        return {
            "algorithm": self.algorithm,
            "source": self.source,
            "batch_mix": {str(bs): w for bs, w in self.mix.items()},
            "action_index": self.pick.index,
            "action": list(self.action),
            "flags": self.flags(),
            "kwargs": server_args_kwargs(self.action, self.draft_model),
            "expected_reward": self.pick.expected_reward,
            "expected_regret": self.pick.expected_regret,
            "per_batch_size": [
                {
                    **dataclasses.asdict(r),
                    "own_action": list(EXTENDED_ACTIONS[r.own_index]),
                    "regret": r.regret,
                    **counts.get(r.measured_batch_size, {"rows": None, "repeats": None}),  # as pick_origin
                }
                for r in self.pick.rows
            ],
            "left_out": [
                {
                    "action_index": left.index,
                    "action": list(EXTENDED_ACTIONS[left.index]),
                    "own_pick_at": list(left.own_pick_at),
                    "not_scored_at": list(left.not_scored_at),
                }
                for left in self.pick.left_out
            ],
            "origin": None if self.origin is None else dict(self.origin),
            "transfer": (self.transfer or TransferCheck()).to_json(),  # as one batch size's pick has it
        }


def recommend_mix(request: Any, setup: UserSetup | None = None) -> MixRecommendation:
    """The single config with the best expected reward over the batch-size mix of a
    :class:`~specband.deploy.recommend.RecommendRequest` (``--batch-mix`` or ``--batch-mix-from``),
    the policy loaded as ``recommend`` loads it (``--trust-pickle`` and the notes included)
    and the user's ``setup`` (:func:`specband.deploy.usersetup.user_setup`) checked against the
    data's as ``recommend`` checks it (:func:`specband.deploy.tiers.check_scorer_transfer`:
    ``request.allow_transfer`` takes another setup's pick, its differences as notes);
    ``None``: not checked.

    Raises:
        ConfigError / DataError: a bad mix or metrics file; TransferError: the data is from
        another setup and ``--allow-transfer`` was not given; the loading errors of
        :func:`specband.deploy.recommend.load_models`.
    """
    import dataclasses

    from specband.core.batchlist import parse_batch_mix
    from specband.deploy.mix import pick_for_mix, read_running_requests

    mix = (
        parse_batch_mix(request.batch_mix)
        if request.batch_mix is not None
        else read_running_requests(request.batch_mix_from)
    )
    from specband.contract.actions import use_action_set

    with use_action_set(request.actions):
        scorer = load_scorer(request.algo, request.models, request.data, trust_pickle=request.trust_pickle)
        transfer = None
        if setup is not None:  # before picking, as for one batch size: a refused transfer picks nothing
            from specband.deploy.tiers import check_scorer_transfer

            transfer = check_scorer_transfer(scorer, setup, allow=request.allow_transfer)
        scorer = dataclasses.replace(scorer, telemetry=request.state)
        pick = pick_for_mix(scorer, mix)
    from specband.deploy.explain import origin_line
    from specband.deploy.recommend import data_notes, pick_origin, unmeasured_notes

    manifest = scorer.manifest
    mix_origin = pick_origin(manifest, None)
    origin = origin_line(mix_origin)  # a one-batch-size pick's origin line, for the mix
    notes = (
        *scorer.notes,
        *(() if transfer is None else transfer.warnings),
        *data_notes(manifest, scorer.source, request.state),
        *unmeasured_notes(manifest, sorted(mix)),
        *(() if origin is None else (origin,)),
        *(left.note() for left in pick.left_out),
    )
    counts = {}
    for row in pick.rows:
        at = pick_origin(manifest, row.measured_batch_size)
        counts[row.measured_batch_size] = {"rows": at["rows"], "repeats": at["repeats"]}
    return MixRecommendation(
        request.algo,
        scorer.source,
        mix,
        pick,
        request.draft_model,
        notes,
        transfer,
        mix_origin,
        counts,
    )


def _schedule_option_fields() -> dict[str, Any]:
    from specband.contract.actions import action_set_field
    from specband.core.optionspec import option
    from specband.deploy.recommend import (
        algo_field,
        allow_transfer_field,
        data_field,
        gpu_field,
        models_field,
        target_field,
        trust_pickle_field,
    )

    return {
        "actions": action_set_field("the models (an extended folder is read with 'extended' only)", "model"),
        "engine": option(
            ..., "--engine", "-e", help=f"Engine format: {' or '.join(ENGINE_NAMES)}.", panel="output", metavar="NAME"
        ),
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
            exists without ``--force`` (one line each).
    """

    engine: str = _F["engine"]
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
        from specband.files.fileio import check_out_path

        get_engine(self.engine)  # an unknown engine is one error line
        check_out_path(self.out_path, overwrite=self.force)

    @property
    def out_path(self) -> Path:
        """``--out`` as a path (an empty one is refused, naming ``--out``)."""
        from specband.files.fileio import out_option_path

        return out_option_path(self.out)


@dataclass(frozen=True)
class WrittenSchedule:
    """What :func:`write_schedule` wrote.

    Attributes:
        path: the file.
        config: its JSON object (sglang's adaptive config, or vLLM's speculative config).
        picks: the chain pick per batch size (:class:`TierPick`).
        tiers: the merged tiers.
        scorer: the policy that scored them (its ``notes``: the loading notes).
        engine_checked: sglang's own loader accepted the file.
        transfer: the transfer check (:class:`specband.deploy.transfer.TransferCheck`: the
            differences taken with ``--allow-transfer``, the warnings to print).
    """

    path: Path
    config: dict[str, Any]
    picks: list[Any]
    tiers: list[Any]
    scorer: PolicyScorer
    engine_checked: bool
    transfer: Any = None

    def summary(self, engine: str) -> dict[str, Any]:
        """What ``schedule --format json`` prints: the file, its config, per batch size the
        chain pick and why speculation is off (``None`` where it is on), the data's origin
        (:func:`specband.deploy.recommend.pick_origin`) and the transfer."""
        from specband.deploy.recommend import pick_origin

        origin = pick_origin(self.scorer.manifest, None)
        return {
            "engine": engine,
            "path": str(self.path),
            "config": self.config,
            "batch_sizes": [
                {
                    "batch_size": p.batch_size,
                    "measured_batch_size": p.measured_batch_size,
                    "chain_pick": list(EXTENDED_ACTIONS[p.chain[0]]),
                    "candidate_steps": list(p.steps),
                    "speculation_off": p.off_reason,
                }
                for p in self.picks
            ],
            "origin": {k: v for k, v in origin.items() if k not in ("rows", "repeats")},
            "transfer": None if self.transfer is None else self.transfer.to_json(),
        }


def write_schedule(r: ScheduleRequest, setup: UserSetup | None = None) -> WrittenSchedule:
    """Build the energy-band speculation schedule of ``r`` (one chain config, topk 1, per
    batch-size tier) and write it atomically in the engine's format
    (:meth:`specband.engines.base.Engine.schedule_config`; with ``--engine-check`` the file is
    loaded with the engine's own loader where it is importable, sglang's, before it replaces
    --out).

    Raises:
        ConfigError / DataError: a bad batch-size list; the loading errors of
        :func:`specband.deploy.recommend.load_models`.
    """
    from specband.contract.actions import use_action_set
    from specband.core.batchlist import parse_batch_sizes
    from specband.core.errors import ConfigError
    from specband.files.fileio import write_text_atomic

    sizes = None if r.batch_sizes is None else parse_batch_sizes(r.batch_sizes)
    with use_action_set(r.actions):
        scorer = load_scorer(
            r.algo, r.models, r.data, measured_only=not r.include_unmeasured, trust_pickle=r.trust_pickle
        )
        transfer = None
        if setup is not None:  # before anything is written: a refused transfer leaves --out alone
            from specband.deploy.tiers import check_scorer_transfer

            transfer = check_scorer_transfer(scorer, setup, allow=r.allow_transfer)
        picks = pick_chain_tiers(scorer, sizes, r.margin, engine=r.engine)
    tiers = merge_tiers(picks)
    engine = get_engine(r.engine)
    obj = engine.schedule_config(tiers, r.draft_model)
    checked: list[bool] = []

    def check_with_engine(tmp: Path) -> None:
        if r.engine_check and engine.check_schedule_file(tmp):
            checked.append(True)

    write_text_atomic(r.out_path, json.dumps(obj, indent=2) + "\n", error=ConfigError, check=check_with_engine)
    return WrittenSchedule(r.out_path, obj, picks, tiers, scorer, bool(checked), transfer)

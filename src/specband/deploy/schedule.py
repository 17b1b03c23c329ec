"""The schedule library's entry points for the commands: ``specband schedule``
(:class:`ScheduleRequest`, :func:`write_schedule`) and ``launch --schedule FILE|auto``
(:func:`schedule_for_launch`). The tier picks are :func:`specband.deploy.recommend.answer`'s
(a :class:`~specband.deploy.answers.ScheduleAnswer`); the schedules themselves are
:mod:`specband.deploy.tiers`'s."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.contract.actions import chain_action
from specband.core.errors import ConfigError
from specband.deploy.answers import JsonObject, ScheduleAnswer, SchedulePick
from specband.deploy.recommend import AnswerRequest, ScheduleSpec, answer
from specband.deploy.tiers import merge_tiers

if TYPE_CHECKING:
    from specband.deploy.transfer import UserSetup
    from specband.engines.schedule_files import Tier
from specband.engines.schedule_files import (
    check_sglang_adaptive_config,
    check_vllm_schedule,
    read_sglang_adaptive_config,
    sglang_adaptive_config,
    sglang_initial_steps,
    sglang_schedule_flags,
    validate_with_sglang,
    vllm_speculative_config,
)

__all__ = [
    "ENGINES",
    "SchedulePick",
    "ScheduleRequest",
    "WrittenSchedule",
    "new_auto_schedule_file",
    "schedule_for_launch",
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
    """The adaptive-speculation part of ``specband launch --schedule FILE|auto``; what it
    has to say (the file ``auto`` wrote) is appended to ``notes`` for the caller to print.

    ``FILE`` is read and checked with sglang's rules; ``auto`` builds the schedule of
    ``specband schedule --engine sglang`` for ``--algo``/``--models`` and writes it to
    ``auto_file`` (:func:`new_auto_schedule_file`, owned by the launch); with ``auto_file``
    ``None`` (a dry run) nothing is written: the note holds the schedule and the command
    line names ``<log>.schedule-XXXXXXXX.json``.

    Returns:
        a :class:`~specband.deploy.answers.SchedulePick` (engine ``sglang``): ``path`` (the config
        file), ``tiers`` (tier -> entry), ``action`` (the chain config sglang starts from:
        ``--speculative-num-steps`` = sglang's own default) and ``extra_args``
        (``--speculative-adaptive --speculative-adaptive-config FILE``).

    Raises:
        ConfigError: an unreadable or invalid file, or a schedule that never speculates.
    """
    from specband.files.fileio import write_text_atomic

    if schedule == "auto":
        tiered = _tier_picks(algo, models, data, "sglang", trust_pickle, setup, allow_transfer)
        notes += tiered.notes
        picks = tiered.picks
        notes.extend(p.off_reason for p in picks if p.off_reason)
        obj = sglang_adaptive_config(merge_tiers(picks))
        entries = check_sglang_adaptive_config(obj)
        path = auto_file or log.with_name(f"{log.name}.schedule-XXXXXXXX.json")
        sglang_schedule_flags(path, entries, None)  # refuses a schedule that never speculates, before writing
        tiers = ", ".join(map(str, sorted(entries)))
        if auto_file is None:
            notes.append(
                f"--schedule auto (dry run, nothing written): {algo}'s schedule {json.dumps(obj)} (tiers {tiers}); "
                f"a launch writes it beside --log and removes it when it ends"
            )
        else:
            write_text_atomic(auto_file, json.dumps(obj, indent=2) + "\n", error=ConfigError)
            notes.append(f"--schedule auto: wrote {algo}'s schedule to {auto_file} (tiers {tiers}; removed at the end)")
    else:
        path = Path(schedule)
        entries = read_sglang_adaptive_config(path)
    flags = sglang_schedule_flags(path, entries, None)
    return SchedulePick(
        engine="sglang",
        path=path,
        action=chain_action(sglang_initial_steps(entries)),
        tiers=entries,
        extra_args=tuple(flags[flags.index("--speculative-adaptive") :]),
    )


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
    """The per-batch-size part of ``specband launch --engine vllm --schedule FILE|auto``:
    ``FILE`` is a ``--speculative-config`` object (``specband schedule --engine vllm``'s
    output), checked with vLLM's rules (:func:`specband.deploy.tiers.check_vllm_schedule`) and
    its ``model`` set to ``--draft``; ``auto`` builds it from ``--algo``/``--models`` as
    ``specband schedule --engine vllm`` does (nothing is written: vLLM takes it on the command
    line).

    Returns:
        a :class:`~specband.deploy.answers.SchedulePick` (engine ``vllm``): ``path`` (the file, or
        ``auto``), ``ranges`` (``(start, end, K)``), ``action`` (the chain of the largest K,
        ``num_speculative_tokens``) and ``speculative_config``.

    Raises:
        ConfigError: an unreadable or invalid file, or a schedule that never speculates.
    """
    from specband.core.errors import ConfigError
    from specband.core.limits import MAX_CONFIG_FILE_BYTES
    from specband.files.fileio import read_text_bounded

    if schedule == "auto":  # the user's setup checked against the data's, as for sglang's schedule
        tiered = _tier_picks(algo, models, data, "vllm", trust_pickle, setup, allow_transfer)
        notes += tiered.notes
        obj = vllm_speculative_config(merge_tiers(tiered.picks), draft)
        notes.append(f"--schedule auto: {algo}'s vLLM schedule {json.dumps(obj)}")
    else:
        try:
            text = read_text_bounded(Path(schedule), limit=MAX_CONFIG_FILE_BYTES, kind="vLLM speculative config")
            obj = json.loads(text)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--schedule {schedule}: cannot read a vLLM --speculative-config ({exc})") from None
        if not isinstance(obj, dict) or "num_speculative_tokens_per_batch_size" not in obj:
            raise ConfigError(
                f"--schedule {schedule}: not a vLLM --speculative-config with num_speculative_tokens_per_batch_size "
                f"(write one with `specband schedule --engine vllm`)"
            )
        if draft is not None:
            obj = {**obj, "model": draft}
    try:
        ranges = check_vllm_schedule(obj["num_speculative_tokens_per_batch_size"], obj.get("num_speculative_tokens"))
    except ConfigError as exc:
        raise ConfigError(f"--schedule {schedule}: {exc}") from None
    k = int(obj["num_speculative_tokens"])
    return SchedulePick(
        engine="vllm",
        path=schedule,
        action=chain_action(k),
        tiers={},
        ranges=tuple(ranges),
        speculative_config=obj,
    )


def _tier_picks(
    algo: str,
    models: Path | None,
    data: Path | None,
    engine: str,
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


#: ``specband schedule --engine`` values.
ENGINES = ("sglang", "vllm")


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
        "engine": option(..., "--engine", "-e", help="Engine format: sglang or vllm.", panel="output", metavar="NAME"),
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
        from specband.core.errors import ConfigError
        from specband.files.fileio import check_out_path

        if self.engine not in ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        check_out_path(self.out_path, overwrite=self.force)

    @property
    def out_path(self) -> Path:
        """``--out`` as a path (an empty one is refused, naming ``--out``)."""
        from specband.files.fileio import out_option_path

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
            actions=self.actions,
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
    """

    path: Path
    config: JsonObject
    answer: ScheduleAnswer
    tiers: list[Tier]
    engine_checked: bool

    def to_json(self, engine: str) -> dict[str, Any]:
        """What ``schedule --format json`` prints: ``engine``, the file (``path``), its
        ``config``, then the answer's :meth:`~specband.deploy.answers.ScheduleAnswer.to_json`
        (per batch size the chain pick and why speculation is off, the origin, the transfer)."""
        return {"engine": engine, "path": str(self.path), "config": dict(self.config), **self.answer.to_json()}


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
    from collections.abc import Callable

    from specband.core.batchlist import parse_batch_sizes
    from specband.core.errors import ConfigError
    from specband.files.fileio import write_text_atomic

    sizes = None if r.batch_sizes is None else tuple(parse_batch_sizes(r.batch_sizes))
    tiered = answer(r.answer_request(sizes), setup)  # a refused transfer leaves --out alone
    assert isinstance(tiered, ScheduleAnswer)
    tiers = merge_tiers(tiered.picks)
    checked: list[bool] = []
    check: Callable[[Path], None] | None = None
    if r.engine == "sglang":
        obj: dict[str, Any] = sglang_adaptive_config(tiers)

        def check_with_sglang(tmp: Path) -> None:
            if r.engine_check and validate_with_sglang(tmp):
                checked.append(True)

        check = check_with_sglang
    else:
        obj = vllm_speculative_config(tiers, r.draft_model)
    write_text_atomic(r.out_path, json.dumps(obj, indent=2) + "\n", error=ConfigError, check=check)
    return WrittenSchedule(r.out_path, obj, tiered, tiers, bool(checked))

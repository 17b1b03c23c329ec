"""One answer an operator can act on: the asked batch sizes as one table (:class:`AnswerTable`),
each row (:class:`TableRow`) the config, the power limit, the expected tok/s with its 95 %
interval, the utilisation of that limit and J/token, every figure with where it comes from,
then the commands to run (:meth:`AnswerTable.commands`). What ``recommend``, ``launch
--dry-run`` and ``probe`` print by default; the notes behind each row stay on the answers
(``--explain`` prints them) and ``--format json`` carries everything.

A row is made from the answer :func:`specband.deploy.recommend.answer` gives for its batch
size: a :class:`FirstGuess` (the performance model's figures, the joint pick of config and
limit), a :class:`~specband.deploy.answers.PowerLimitAnswer` (data over several limits: the same
joint pick over the data's limits) or a :class:`~specband.deploy.answers.Pick` (data at one
limit: the policy's pick there, whose limit cannot move by that data). Each carries its
:class:`~specband.deploy.jointpick.JointPick` (:func:`specband.deploy.jointpick.joint_pick`).

Only the standard library, the contract and the light answer modules are imported (a cold
``recommend`` stays fast).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from specband.contract.actions import EXTENDED_ACTIONS, Action
from specband.core.optionspec import option
from specband.deploy.answer_parts import CalibrationError, PickOrigin, SimulatedSpeed, TransferCheck
from specband.deploy.answers import Pick, PowerLimitAnswer
from specband.deploy.explain import answer_lines, profile_limit_range
from specband.deploy.jointpick import Candidate, Figure, FixedSource, JointPick, TableSource, joint_pick
from specband.sweeps.limit_table import LimitTable

if TYPE_CHECKING:
    from specband.engines.base import Engine

__all__ = [
    "FIRST_GUESS_JSON_KEYS",
    "AnswerTable",
    "FirstGuess",
    "TableRow",
    "answer_table",
    "current_row",
    "explain_field",
    "table_row",
]


def explain_field() -> Any:
    """``--explain``: print every note behind the table (what each row rests on, the runner-up,
    the band trade, the calibration) instead of the table's few lines."""
    return option(
        False,
        "--explain",
        help="Also print every note behind the answer: what each row rests on, the runner-up, why the band is "
        "or is not reached, the calibration and the intervals' basis.",
        panel="output",
    )


#: The keys of :meth:`FirstGuess.to_json`, in order.
FIRST_GUESS_JSON_KEYS = (
    "kind", "batch_size", "source", "engine", "action_index", "action", "flags", "kwargs", "power_limit_w",
    "nvidia_smi", "joint_pick", "origin", "acceptance", "calibration", "speed_interval", "transfer", "notes",
)  # fmt: skip


@dataclass(frozen=True)
class FirstGuess:
    """A simulated first guess for one batch size (:func:`specband.deploy.firstguess.first_guess`):
    the performance model's expected figures of every config the engine runs, picked with the
    power limit by :func:`~specband.deploy.jointpick.joint_pick`. Never a measurement.

    Attributes:
        batch_size: concurrent requests.
        joint: the config and the limit with their figures (:class:`~specband.deploy.jointpick.JointPick`).
        profile, hardware: the simulator profile and its GPU.
        target, draft: the simulated pair's names.
        engine: the engine whose configs were scored and whose flags it prints
            (:class:`~specband.engines.base.Engine`).
        acceptance: where the acceptance comes from (``"profile NAME"``, ``"fitted to N configs
            of FILE"``, ``"borrowed NAME"``).
        calibration: per metric the :class:`~specband.deploy.answer_parts.CalibrationError` of
            this profile *and* pair against measured rows (empty when no measured row holds them).
        speed_interval: the pick's simulated speed and its 95 % interval.
        origin: what it rests on (a simulated :class:`~specband.sweeps.origin.DataOrigin`, no rows).
        draft_model: the ``--speculative-draft-model-path`` its flags carry (``None``: none).
        notes: what it rests on, in order (the acceptance first, then the calibration, the power,
            what a sweep would settle).
        transfer: nothing transferred (a first guess is for the setup named).
        warnings: what must be said beside the figures by default (a RoPE mismatch, a measured file
            of another pair, why a first guess answers instead of data); also among ``notes``.
    """

    batch_size: int
    joint: JointPick
    profile: str
    hardware: str
    target: str
    draft: str
    engine: Engine
    acceptance: str
    calibration: Mapping[str, CalibrationError]
    speed_interval: SimulatedSpeed
    origin: PickOrigin
    draft_model: str | None = None
    notes: tuple[str, ...] = ()
    transfer: TransferCheck = field(default_factory=TransferCheck)
    warnings: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        """``"simulated first guess (h100-sxm)"``."""
        return f"simulated first guess ({self.profile})"

    @property
    def action(self) -> Action:
        """The picked config."""
        return self.joint.action

    @property
    def action_index(self) -> int:
        """Its index (the contract's 19 first)."""
        return EXTENDED_ACTIONS.index(self.action)

    @property
    def flags(self) -> tuple[str, ...]:
        """The engine's launch flags of the pick (none for the baseline)."""
        return tuple(self.engine.speculative_flags(self.action, self.draft_model))

    @property
    def kwargs(self) -> dict[str, object]:
        """The same as the engine's Python keyword arguments (sglang's ``ServerArgs``)."""
        return self.engine.speculative_kwargs(self.action, self.draft_model)

    @property
    def power_limit_w(self) -> float:
        """The picked limit, W."""
        return self.joint.power_limit_w

    def to_json(self) -> dict[str, Any]:
        """What ``--format json`` prints for a first guess (the keys of :data:`FIRST_GUESS_JSON_KEYS`,
        in order; ``kind`` is ``"first_guess"``)."""
        return {
            "kind": "first_guess",
            "batch_size": self.batch_size,
            "source": self.source,
            "engine": self.engine.name,
            "action_index": self.action_index,
            "action": list(self.action),
            "flags": list(self.flags),
            "kwargs": self.kwargs,
            "power_limit_w": self.power_limit_w,
            "nvidia_smi": self.joint.nvidia_smi,
            "joint_pick": self.joint.to_json(),
            "origin": self.origin.to_json(),
            "acceptance": self.acceptance,
            "calibration": {metric: error.to_json() for metric, error in self.calibration.items()},
            "speed_interval": self.speed_interval.to_json(),
            "transfer": self.transfer.to_json(),
            "notes": list(self.notes),
        }


#: An answer a row is made of.
RowAnswer = Union[FirstGuess, PowerLimitAnswer, Pick]  # noqa: UP007


@dataclass(frozen=True)
class TableRow:
    """One batch size of the table.

    Attributes:
        batch_size: the batch size asked for; ``measured_batch_size`` the one its figures are of.
        action, flags: the config and its launch flags.
        power_limit_w: the limit the figures are at (``None``: the data does not say).
        speed_tok_s, utilization, joules_per_token: the figures (:class:`~specband.deploy.jointpick.Figure`;
            ``None``: not known).
        power_basis: what the utilisation is of (``"serving"`` or ``"decode window"``).
        runs: rows behind measured means (``None``: a model's figures).
        in_band: the utilisation is inside the band (``None``: not known).
        shortfall: why it is outside the band, or that the band cannot be reached (``None``: inside).
        joint: the joint pick behind the row (``None``: an answer without figures).
        answer: the answer the row was made from.
        role: ``"pick"`` (what to run) or ``"current"`` (what a probed server runs now, for
            comparison: no command is made of it).
    """

    batch_size: int
    measured_batch_size: int | None
    action: Action
    flags: tuple[str, ...]
    power_limit_w: float | None
    speed_tok_s: Figure | None
    utilization: Figure | None
    joules_per_token: Figure | None
    power_basis: str
    runs: int | None
    in_band: bool | None
    shortfall: str | None
    joint: JointPick | None
    answer: RowAnswer
    role: str = "pick"

    @property
    def nvidia_smi(self) -> str | None:
        """The command that sets the row's limit, when the limit was picked (``None``: the
        data's one limit, nothing to set)."""
        return None if self.joint is None else self.joint.nvidia_smi

    def to_json(self) -> dict[str, Any]:
        """``batch_size``, ``measured_batch_size``, ``action``, ``flags``, ``power_limit_w``,
        ``nvidia_smi``, the figures (``value``/``lo95``/``hi95``/``source`` or ``None``),
        ``power_basis``, ``runs``, ``in_band``, ``shortfall`` and ``joint_pick``."""

        def fig(f: Figure | None) -> dict[str, Any] | None:
            return None if f is None else f.to_json()

        return {
            "batch_size": self.batch_size,
            "measured_batch_size": self.measured_batch_size,
            "action": list(self.action),
            "flags": list(self.flags),
            "power_limit_w": self.power_limit_w,
            "nvidia_smi": self.nvidia_smi,
            "speed_tok_s": fig(self.speed_tok_s),
            "utilization": fig(self.utilization),
            "joules_per_token": fig(self.joules_per_token),
            "power_basis": self.power_basis,
            "runs": self.runs,
            "in_band": self.in_band,
            "shortfall": self.shortfall,
            "joint_pick": None if self.joint is None else self.joint.to_json(),
            "role": self.role,
        }


def _row_from_joint(answer: RowAnswer, joint: JointPick, flags: tuple[str, ...], role: str = "pick") -> TableRow:
    c: Candidate = joint.chosen
    return TableRow(
        batch_size=answer.batch_size,
        measured_batch_size=joint.measured_batch_size,
        action=c.action,
        flags=flags,
        power_limit_w=c.power_limit_w,
        speed_tok_s=c.speed_tok_s,
        utilization=c.utilization,
        joules_per_token=c.joules_per_token,
        power_basis=joint.power_basis,
        runs=c.runs,
        in_band=c.in_band,
        shortfall=joint.shortfall,
        joint=joint,
        answer=answer,
        role=role,
    )


def _borrowed(transfer: TransferCheck | None) -> bool:
    return transfer is not None and bool(transfer.differences)


def _figure_source(provenance: str, borrowed: bool) -> str:
    """The :data:`~specband.deploy.jointpick.FIGURE_SOURCES` word of data of ``provenance``."""
    if borrowed:
        return "borrowed"
    kinds = [k.strip() for k in provenance.split("+")]
    return next((w for w in ("simulated", "emulated", "published") if w in kinds), "measured")


def _pick_row(pick: Pick) -> TableRow:
    """A policy's pick at the data's one limit: its figures (the manifest's means) as a
    :class:`~specband.deploy.jointpick.FixedSource`; the limit does not move."""
    data = pick.origin.data
    figures = None if pick.explanation is None else pick.explanation.pick
    limit = data.power_limit_w if data.power_limit_range_w is None else None
    if figures is None or limit is None:
        return TableRow(
            pick.batch_size, pick.measured_batch_size, pick.action, pick.flags, limit, None, None, None,
            "decode window", None, None, None, None, pick,
        )  # fmt: skip
    source = _figure_source(data.provenance, _borrowed(pick.transfer))
    util = figures.energy_utilization

    def fig(value: float | None) -> Figure | None:
        return None if value is None else Figure(value, source=source)

    candidate = Candidate(
        action=pick.action,
        power_limit_w=limit,
        speed_tok_s=Figure(figures.speed_tok_s, source=source),
        utilization=fig(util),
        joules_per_token=fig(figures.joules_per_token),
        power_w=None if util is None else Figure(util * limit, source=source),
        reward=pick.mean_reward or 0.0,
        in_band=figures.band.status == "in",
        runs=figures.rows,
    )
    floor = profile_limit_range(data.hardware) if candidate.utilization is not None and not candidate.in_band else None
    joint = joint_pick(FixedSource(candidate, pick.measured_batch_size, data.provenance, floor), pick.batch_size)
    return _row_from_joint(pick, joint, pick.flags)


def _limit_row(limited: PowerLimitAnswer) -> TableRow:
    """Data over several limits: the joint pick over the data's limits (the same choice as the
    answer's: :func:`specband.deploy.recommend.power_limit_answer` makes it with the same function)."""
    picks = limited.picks
    table = LimitTable(
        limits_w=tuple(p.power_limit_w for p in picks),
        band=limited.band,
        provenance=limited.provenance,
        picks={limited.measured_batch_size: picks},
    )
    source = TableSource(table, borrowed=_borrowed(limited.transfer))
    joint = joint_pick(source, limited.batch_size, max_speed_loss=limited.max_speed_loss)
    return _row_from_joint(limited, joint, limited.flags)


def current_row(guess: FirstGuess, current: Candidate) -> TableRow:
    """The row of what a probed server runs now (``current``, at the GPU's limit now) beside the
    pick of the same batch size (``guess``): for comparison, no command is made of it."""
    return TableRow(
        guess.batch_size, guess.batch_size, current.action,
        tuple(guess.engine.speculative_flags(current.action, guess.draft_model)),
        current.power_limit_w, current.speed_tok_s, current.utilization, current.joules_per_token,
        guess.joint.power_basis, None, current.in_band, None, None, guess, role="current",
    )  # fmt: skip


def table_row(answer: RowAnswer) -> TableRow:
    """The row of one batch size's answer (see the module docstring)."""
    if isinstance(answer, FirstGuess):
        return _row_from_joint(answer, answer.joint, answer.flags)
    if isinstance(answer, PowerLimitAnswer):
        return _limit_row(answer)
    return _pick_row(answer)


@dataclass(frozen=True)
class AnswerTable:
    """The asked batch sizes as one table, and the commands to run.

    Attributes:
        rows: one :class:`TableRow` per batch size, in the order asked.
        header: one line: what the figures rest on (data or simulation, GPU, models, engine).
        warnings: lines the answer must say beside the table (a transfer taken, a GPU not
            checked, where the power comes from), in order, without repeats.
        notes: every note of every row's answer and its explanation, in order (``--explain``).
        draft_model: the ``--speculative-draft-model-path`` the flags carry (``None``: none).
        data_draft: the draft the data was measured with (named when the flags lack one).
        engine: the engine the flags are for (``None``: the default engine).
    """

    rows: tuple[TableRow, ...]
    header: str
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    draft_model: str | None = None
    data_draft: str | None = None
    engine: Engine | None = None

    def groups(self) -> list[tuple[tuple[int, ...], str | None, tuple[str, ...]]]:
        """The rows grouped by what to run: ``(batch sizes, nvidia-smi command or None,
        flags)``, in the order of their first row."""
        out: dict[tuple[str | None, tuple[str, ...]], list[int]] = {}
        for row in self.picks:
            out.setdefault((row.nvidia_smi, row.flags), []).append(row.batch_size)
        return [(tuple(sizes), smi, flags) for (smi, flags), sizes in out.items()]

    def commands(self) -> list[str]:
        """What to type, one line each (stdout): for one batch size the ``sudo nvidia-smi -pl W``
        line when the limit was picked, then the flags (empty for the baseline), as
        ``recommend`` always printed them; for several, the same per group of batch sizes
        with one config and limit, after a ``# bs ...`` comment line."""
        groups = self.groups()
        lines: list[str] = []
        for sizes, smi, flags in groups:
            if len(groups) > 1:
                what = "" if flags else ": the baseline, no speculative flags"
                lines.append(f"# bs {', '.join(map(str, sizes))}{what}")
            if smi is not None:
                lines.append(smi)
            if flags or len(groups) == 1:
                lines.append(shlex.join(flags))
        return lines

    @property
    def picks(self) -> tuple[TableRow, ...]:
        """The rows to run (not a probed server's current config)."""
        return tuple(row for row in self.rows if row.role == "pick")

    @property
    def mix_answers(self) -> bool:
        """``recommend --batch-mix`` answers for the same source (data, not a first guess)."""
        return not any(isinstance(row.answer, FirstGuess) for row in self.rows)

    @property
    def limits_differ(self) -> bool:
        """The rows ask for more than one power limit (one GPU holds one at a time)."""
        return len({row.power_limit_w for row in self.picks if row.nvidia_smi is not None}) > 1

    def to_json(self) -> dict[str, Any]:
        """``header``, ``batch_sizes`` (per row :meth:`TableRow.to_json` with its answer's own
        ``to_json()`` under ``answer``), ``commands``, ``warnings`` and ``notes``."""
        return {
            "header": self.header,
            "batch_sizes": [{**row.to_json(), "answer": row.answer.to_json()} for row in self.rows],
            "commands": self.commands(),
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }


def _header(answer: RowAnswer) -> str:
    """One line: what the figures rest on."""
    if isinstance(answer, FirstGuess):
        return (
            f"SIMULATED first guess, not measured: {answer.hardware} ({answer.profile}), {answer.target} + "
            f"{answer.draft}, {answer.engine.display_name}'s configs; acceptance {answer.acceptance}"
        )
    origin = answer.origin
    data = None if origin is None else origin.data
    if data is None:
        return "data of unknown origin"
    what = "the best config at each limit"
    if isinstance(answer, Pick):
        what = f"{answer.algorithm}'s pick ({answer.source.removesuffix(' (bundled published measurements)')})"
    power = "power measured" if data.power_measured else f"power NOT measured ({data.power_source or 'none'})"
    return (
        f"{data.provenance} data: {data.hardware or '? GPU'} {data.limit_phrase}, {data.target_model or '?'} + "
        f"{data.draft_model or '?'}, {data.engine_text()}; {power}; {what}"
    )


def _answer_notes(answer: RowAnswer) -> list[str]:
    if isinstance(answer, Pick):
        return [*answer.notes, *answer_lines(answer)]
    if isinstance(answer, PowerLimitAnswer):
        return [*answer.notes, answer.summary()]
    return list(answer.notes)


def _warnings(answer: RowAnswer, engine: Engine, shortfall: str | None) -> list[str]:
    """What must be said beside the table by default (what changes whether to trust a row): a
    pick's loading, transfer and data notes (its origin and explanation wait for ``--explain``);
    a limit answer's notes but the shortfall (said under its row) and the summary; a first
    guess's warnings and what its power rests on; and data measured on another engine than
    ``engine``."""
    if isinstance(answer, FirstGuess):
        return [*answer.warnings, *(n for n in answer.notes if n.startswith("power: "))]
    out = [n for n in answer.notes if n != shortfall]
    if answer.origin is not None:
        other = answer.origin.data.engine_note(engine.name, "this pick")
        out += [] if other is None or other in out else [other]
    return out


def answer_table(
    answers: Sequence[RowAnswer], draft_model: str | None = None, engine: Engine | None = None
) -> AnswerTable:
    """The table of ``answers`` (one per batch size, in the order asked), whose flags are for
    ``engine`` (``None``: the first answer's; data measured on another engine is said among the
    warnings).

    Raises:
        ValueError: no answer.
    """
    if not answers:
        raise ValueError("a table needs at least one answer")
    engine = engine or answers[0].engine
    rows = tuple(table_row(a) for a in answers)
    notes: list[str] = []
    warnings: list[str] = []
    for answer, row in zip(answers, rows, strict=True):
        for line in _answer_notes(answer):
            if line not in notes:
                notes.append(line)
        for line in _warnings(answer, engine, row.shortfall):
            if line not in warnings:
                warnings.append(line)
    first = answers[0]
    data_draft = None
    if not isinstance(first, FirstGuess) and first.origin is not None:
        data_draft = first.origin.data.draft_model
    elif isinstance(first, FirstGuess):
        data_draft = first.draft
    return AnswerTable(rows, _header(first), tuple(warnings), tuple(notes), draft_model, data_draft, engine)

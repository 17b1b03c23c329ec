"""``specband evaluate`` as data: :class:`EvaluateRequest` (every option, declared once and
checked when the request is built) and :func:`evaluate_request`, which loads the sweep and
evaluates it held out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import ACTION_SETS, ActionSet, action_set_field
from specband.contract.actions import action_set as named_action_set
from specband.core.batchlist import parse_batch_mix
from specband.core.errors import ConfigError
from specband.core.limits import MAX_BOOTSTRAP_RESAMPLES, MAX_SEED
from specband.core.optionspec import option
from specband.devices.base import check_power_limit_w
from specband.evaluation.holdout import evaluate
from specband.files.hub import resolve_data_file
from specband.policies import EXTENDED_ALGORITHMS
from specband.sweeps.dataset import FEATURE_KINDS, load_sweep

__all__ = ["EvaluateRequest", "evaluate_request", "load_request_sweep"]


@dataclass(frozen=True)
class EvaluateRequest:
    """Every option of ``specband evaluate``.

    Raises:
        ConfigError: a bad ``--power-limit`` or ``--seed``, ``--batch-mix`` without
            ``--schedules`` or a bad mix (one line each); InvalidActionError: an unknown
            ``--actions``.
    """

    data: Path | None = option(
        None,
        "DATA",
        help="Sweep JSONL file (default: the bundled 29 published measurements).",
        panel="input",
        show_default=False,
        argument=True,
    )
    holdout: str = option(
        "auto",
        "--holdout",
        help="repeat: train on all but one repeat, score on it, for every repeat; trial: same by trial; "
        "none: in-sample (labelled so); auto: repeat if the data has repeats, else trial, else none.",
        panel="grid",
        metavar="KIND",
    )
    algo: list[str] | None = option(
        None,
        "--algo",
        help="Algorithm to evaluate (repeatable; default: all eight).",
        panel="model",
        metavar="NAME",
        show_default=False,
    )
    features: list[str] | None = option(
        None,
        "--features",
        help="State features: contract and/or pre (repeatable; default: both).",
        panel="model",
        metavar="KIND",
        show_default=False,
    )
    out: str | None = option(
        None,
        "--out",
        help="Write report.md, evaluation.json and PNG figures into this folder (new, empty, or a previous "
        "report folder, whose report files are replaced).",
        panel="output",
        metavar="DIR",
        show_default=False,
    )
    as_json: bool = option(False, "--json", help="Print one JSON document instead of tables.", panel="output")
    seed: int = option(0, "--seed", help="Training and bootstrap seed (>= 0).", panel="grid", metavar="N", max=MAX_SEED)
    n_bootstrap: int = option(
        1000,
        "--bootstrap",
        help="Bootstrap resamples per interval.",
        panel="grid",
        metavar="N",
        min=1,
        max=MAX_BOOTSTRAP_RESAMPLES,
    )
    power_limit: float | None = option(
        None,
        "--power-limit",
        help="GPU power limit in W, overriding the rows' own (power_limit_watts).",
        panel="grid",
        metavar="W",
        finite=False,  # its own check says what a power limit must be, nan and inf included
        show_default=False,
    )
    schedules: bool = option(
        False,
        "--schedules",
        help="Also score, per split, serving a batch-size mix with a per-batch-size schedule (chain configs, "
        "as `specband schedule`), the batch-mix pick and the per-batch-size picks against the best fixed "
        "config (schedules.json and schedules.png with --out).",
        panel="grid",
    )
    batch_mix: str | None = option(
        None,
        "--batch-mix",
        help="With --schedules: the mix BS:WEIGHT,... (default: uniform over the held-out batch sizes).",
        panel="grid",
        metavar="MIX",
        show_default=False,
    )

    actions: str = action_set_field("the sweep's rows")

    def __post_init__(self) -> None:

        named_action_set(self.actions)  # an unknown --actions, naming the option
        check_power_limit_w(self.power_limit)
        if self.actions == "extended" and self.algo and set(self.algo) - set(EXTENDED_ALGORITHMS):
            raise ConfigError(
                f"--actions extended evaluates {', '.join(EXTENDED_ALGORITHMS)} only (the others' model formats "
                f"hold 19 actions), got --algo {', '.join(a for a in self.algo if a not in EXTENDED_ALGORITHMS)}"
            )
        if self.seed < 0:
            raise ConfigError(f"--seed must be a whole number >= 0, got {self.seed}")
        if self.batch_mix is not None and not self.schedules:
            raise ConfigError("--batch-mix goes with --schedules")
        if self.batch_mix is not None:
            parse_batch_mix(self.batch_mix)  # checked before anything is computed

    @property
    def action_set(self) -> ActionSet:
        """The set ``--actions`` names: the rows are read and the policies trained against it."""
        return ACTION_SETS[self.actions]

    @property
    def algorithms(self) -> list[str] | None:
        """``--algo`` (``None``: all eight; with ``--actions extended``, those it trains)."""

        if self.algo:
            return list(self.algo)
        return list(EXTENDED_ALGORITHMS) if self.actions == "extended" else None


def load_request_sweep(r: EvaluateRequest) -> Any:
    """The request's sweep (``DATA``, a hub id, or the bundled measurements), at ``--power-limit``."""

    return load_sweep(
        None if r.data is None else resolve_data_file(r.data), power_limit_w=r.power_limit, action_set=r.action_set
    )


def evaluate_request(r: EvaluateRequest, sweep: Any, progress: Callable[[str], None] | None = None) -> Any:
    """Evaluate ``sweep`` held out as the request says (:func:`specband.evaluation.holdout.evaluate`)."""

    return evaluate(
        sweep,
        holdout=r.holdout,
        algorithms=r.algorithms,
        features=tuple(r.features) if r.features else FEATURE_KINDS,
        seed=r.seed,
        n_bootstrap=r.n_bootstrap,
        progress=progress,
    )

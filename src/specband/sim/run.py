"""``specband simulate`` as library calls: :func:`plan_simulation` checks a
:class:`~specband.sim.request.SimulateRequest`'s output and grid and builds its model,
:func:`run_simulation` simulates the sweep (at each ``--power-limits`` limit) and writes it,
and :class:`SimulatedSweep` says what was written and how it is labelled. The command
only prints (``specband.cli.sim``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import ActionSet
from specband.core.batchlist import parse_batch_sizes
from specband.sim import build_model, check_out_path, simulate_power_limits, simulate_sweep, write_sweep
from specband.sim.model import SpeculativeDecodingModel
from specband.sim.power_capped import resolve_model_power_limits
from specband.sim.profile import DEFAULT_PROFILE
from specband.sim.request import SimulateRequest
from specband.sim.simulated import RETRY_MEM_FRACTION
from specband.sim.speed_interval import acceptance_notes

__all__ = ["SimulatedSweep", "SimulationPlan", "calibration_model", "plan_simulation", "run_simulation"]


def request_model(r: SimulateRequest) -> SpeculativeDecodingModel:
    """The performance model of ``r``: ``--profile`` (default :data:`DEFAULT_PROFILE`) and
    the pair of ``--target-config``/``--draft-config``/``--workload`` (its ``warnings``:
    what the pair borrows), its acceptance fitted to ``--acceptance-from`` when given, split over
    ``--tp`` GPUs.

    Raises:
        ConfigError: an unknown profile, an unreadable profile or model config, one config
            without the other outside a bundled pair, a ``--tp`` the models or the profile do not
            allow; DataError: a bad ``--acceptance-from``.
    """

    return build_model(
        r.profile or DEFAULT_PROFILE,
        target_config=r.target_config,
        draft_config=r.draft_config,
        workload=r.workload,
        acceptance_from=r.acceptance_from,
        tp=r.tp,
    )


def calibration_model(r: SimulateRequest) -> SpeculativeDecodingModel:
    """The model whose ``--calibration-report`` (against the published rows) ``r`` asks for,
    after ``--write-profile`` is checked (an existing file needs ``--force``).

    Raises:
        ConfigError: an existing ``--write-profile`` without ``--force``; the errors of
            :func:`request_model`.
    """

    if r.write_profile is not None:
        check_out_path(r.write_profile, overwrite=r.force, option="--write-profile")
    return request_model(r)


@dataclass(frozen=True)
class SimulationPlan:
    """A checked simulated sweep (:func:`plan_simulation`).

    Attributes:
        request: the request.
        out_path: the JSONL file to write (checked: absent, or ``--force``).
        batch_sizes: the grid's batch sizes.
        actions: the grid's action set (``--actions``; the request's).
        model: the performance model (its ``warnings`` to print).
    """

    request: SimulateRequest
    out_path: Path
    batch_sizes: list[int]
    actions: ActionSet
    model: SpeculativeDecodingModel


def plan_simulation(r: SimulateRequest) -> SimulationPlan:
    """Check ``r``'s ``--out`` (before any model is loaded), read its grid and build its model.

    Raises:
        ConfigError: an existing ``--out`` without ``--force``, a bad batch-size list, a model
            whose smallest launch fits on none of its ``--tp`` GPUs (naming the degree it needs),
            the errors of :func:`request_model`.
    """

    assert r.out is not None  # checked when the request was built
    out_path = check_out_path(r.out, overwrite=r.force)
    sizes = parse_batch_sizes(r.batch_sizes)
    model = request_model(r)
    model.require_fit(RETRY_MEM_FRACTION)  # a model that fits nowhere is one line, not a file of error rows
    return SimulationPlan(r, out_path, sizes, r.action_set, model)


@dataclass(frozen=True)
class SimulatedSweep:
    """What :func:`run_simulation` wrote.

    Attributes:
        plan: the plan simulated.
        rows: the rows written (``"provenance": "simulated"``).
        notes: what to say on stderr (clamped power limits, how a limit is applied).
    """

    plan: SimulationPlan
    rows: list[dict[str, Any]]
    notes: tuple[str, ...]

    @property
    def error_rows(self) -> int:
        """Rows whose run failed (``error`` set), e.g. out of memory."""
        return sum(1 for row in self.rows if row["error"])

    def labels(self) -> str:
        """The labels the summary line carries: an uncalibrated profile, power from a
        published fit or unmeasured, an action set other than the contract's."""
        profile = self.plan.model.profile
        mark = "" if profile.calibrated else " [UNCALIBRATED profile]"
        if profile.power_source and not profile.power_measured:
            mark += " [power: published fit, rows carry power_source]"
        elif not profile.power_measured:
            borrowed = f"; fractions borrowed from {profile.power_borrowed_from}" if profile.power_borrowed_from else ""
            mark += f" [power UNMEASURED: rows carry power_w_range{borrowed}]"
        if self.plan.request.actions != "contract":
            mark += f" [{self.plan.request.actions} action set: {len(self.plan.actions)} actions]"
        correction = getattr(self.plan.model, "cost_correction", None)
        if correction is not None:
            mark += f" [step time: fitted to {correction.label}]"
        return mark + f" [acceptance: {self.plan.model.acceptance.source}; rows carry speed_tok_s_interval]"

    def summary(self) -> str:
        """The one line that says what was written, labelled SIMULATED."""
        tp = self.plan.model.tp
        gpus = f" on {tp} GPUs (--tp {tp}: power per GPU, J/token over all)" if tp > 1 else ""
        return (
            f"SIMULATED sweep: {len(self.rows)} rows ({self.error_rows} error rows) from profile "
            f"{self.plan.model.profile.name}{gpus}{self.labels()}, seed {self.plan.request.seed} "
            f"-> {self.plan.out_path}"
        )


def run_simulation(plan: SimulationPlan) -> SimulatedSweep:
    """Simulate ``plan``'s sweep (each ``--power-limits`` limit applied on top of the model's
    power, :mod:`specband.sim.power_capped`) and write it atomically to ``plan.out_path``.

    Raises:
        ConfigError: a bad ``--power-limits`` list.
    """

    r, model = plan.request, plan.model
    grid: dict[str, Any] = {
        "batch_sizes": plan.batch_sizes,
        "repeats": r.repeats,
        "seed": r.seed,
        "actions": plan.actions,
    }
    notes: list[str] = acceptance_notes(model)
    if r.power_limits is not None:
        limits_w, clamped = resolve_model_power_limits(model, r.power_limits)
        notes += clamped
        rows = simulate_power_limits(model, limits_w, **grid)
        notes.append(
            f"{len(limits_w)} power limit(s) {limits_w[0]:g}-{limits_w[-1]:g} W applied on top of the "
            "model's power (DVFS: power above idle ~ clock^clock_exponent, compute-bound kernel time ~ 1/clock; "
            "specband.sim.power_capped)"
        )
    else:
        rows = simulate_sweep(model, **grid)
    write_sweep(rows, plan.out_path, overwrite=r.force)
    return SimulatedSweep(plan, rows, tuple(notes))

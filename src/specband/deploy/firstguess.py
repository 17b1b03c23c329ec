"""A first guess for a named GPU and model pair without a sweep: the performance model's
expected figures of every config the engine runs (speed with its 95 % interval, power,
utilisation of a limit, J/token: :class:`specband.deploy.modelsource.ModelSource`), the config
and the power limit picked together with the contract's reward
(:func:`specband.deploy.jointpick.joint_pick`), labelled as a simulation that says what it
rests on:

1. the first note names the acceptance used: fitted to the user's measurements
   (``--acceptance-from FILE``, with every fitted config's residual), the bundled profile of
   the pair, or a profile *borrowed* from another pair or workload, and why;
2. the calibration error quoted is that of the profile *and* the pair simulated: the
   published errors (:func:`specband.sim.published.calibration_errors`) only when the pair is
   the one those rows measured and its own acceptance is used, the profile's step-time error
   (:func:`specband.sim.cost_error.cost_error`) only when the pair is the one its rows measured;
3. the pick's speed carries its 95 % interval (:func:`specband.sim.speed_interval.speed_interval`),
   which a borrowed acceptance widens; the power is a server's (prefill mixed in) where the
   profile has a serving fit, else the decode window's, said so;
4. what a sweep would settle.

What ``specband recommend --gpu PROFILE --target-config CONFIG -b N [--acceptance-from FILE]``
answers, and ``recommend --gpu PROFILE --target NAME`` for a bundled model's name when no data
answers for it.
"""

from __future__ import annotations

from typing import Any

from specband.core.limits import DEFAULT_MAX_SPEED_LOSS
from specband.deploy.answer_parts import CalibrationError, PickOrigin, RowCounts, SimulatedSpeed
from specband.deploy.jointpick import ServingWorkload, joint_pick
from specband.deploy.modelsource import ModelSource
from specband.deploy.table import FirstGuess
from specband.doctor.pairs import refuse_named_pair
from specband.engines.base import Engine, default_engine
from specband.sim.acceptance import BORROWED_ACCEPT_FACTOR, acceptance_profiles, pair_profile
from specband.sim.cost_error import cost_error
from specband.sim.model import SpeculativeDecodingModel, build_model, model_pair
from specband.sim.profile import builtin_profiles
from specband.sim.published import DRAFT_CONFIG, TARGET_CONFIG, calibration_errors
from specband.sweeps.origin import DataOrigin

__all__ = ["acceptance_note", "first_guess", "guess_from"]


def _same_pair(model: Any, target: str | None, draft: str | None) -> bool:
    """Whether ``model`` simulates the pair ``target``/``draft`` (names; one acceptance profile
    covers both, or the same names)."""
    if target is None or draft is None:
        return False
    if (model.target.name, model.draft.name) == (target, draft):
        return True
    mine = pair_profile(model.target.name, model.draft.name)
    return mine is not None and mine == pair_profile(target, draft)


def acceptance_note(model: Any) -> str:
    """The first note of a first guess: the acceptance it rests on, and why.

    ``"acceptance: fitted to N configs of FILE (...)"``, ``"acceptance: bundled profile X
    (workload W; SOURCE)"`` or ``"acceptance: BORROWED from profile X: WHY; ..."``.
    """
    choice = model.acceptance
    if choice.fit is not None:
        residuals = "; ".join(choice.fit.residual_lines())
        return f"{choice.note}; residuals {residuals}"
    if not choice.borrowed:
        return f"acceptance: bundled profile {choice.profile} (workload {choice.workload})"
    why = choice.note.split("; borrows ", 1)[0].removeprefix("acceptance: ")
    lender = next(p for p in acceptance_profiles() if p.name == choice.profile)
    return (
        f"acceptance: BORROWED from pair {lender.targets[0]} + {lender.drafts[0]} (profile {choice.profile}, "
        f"workload {choice.workload}), because {why}; "
        f"its accept lengths may be off by up to x{BORROWED_ACCEPT_FACTOR:g} either way, which widens the speed "
        "interval; --acceptance-from FILE (a sweep, a bench_speculative file or a `specband probe` file) fits "
        "your pair's"
    )


def _calibration(model: Any, profile: str) -> dict[str, CalibrationError]:
    """The calibration errors of this profile *and* pair (see the module docstring)."""
    out: dict[str, CalibrationError] = {}
    cost = cost_error(model.profile)
    if cost.rows and cost.median_abs_error is not None and _same_pair(model, cost.target, cost.draft):
        out["step_time"] = CalibrationError(
            round(cost.median_abs_error, 4), round(cost.worst_abs_error or 0.0, 4), cost.rows
        )
    choice = model.acceptance
    published = model_pair(TARGET_CONFIG, DRAFT_CONFIG)  # the pair the published rows measured
    own = str(profile) in builtin_profiles() and choice.fit is None and not choice.borrowed
    if own and _same_pair(model, published[0].name, published[1].name):
        for metric, err in calibration_errors(str(profile)).items():
            out[metric] = CalibrationError(round(err.median_abs_error, 4), round(err.worst_abs_error, 4), err.rows)
    return out


def _origin(model: SpeculativeDecodingModel, engine: str, limit_w: float) -> PickOrigin:
    """What a first guess rests on, as a data origin (simulated, no rows)."""
    p = model.profile
    return PickOrigin(
        DataOrigin(
            hardware=p.hardware,
            power_limit_w=limit_w,
            target_model=model.target.name,
            draft_model=model.draft.name,
            workload=model.acceptance.workload,
            provenance="simulated",
            power_measured=False,
            power_source=p.power_source or ("the profile's fit to measured rows" if p.power_measured else "unmeasured"),
            profile=p.name,
            target_architecture=model.target.architecture or None,
            target_config_sha256=model.target.config_sha256,
            draft_architecture=model.draft.architecture or None,
            draft_config_sha256=model.draft.config_sha256,
            engine=engine,
        ),
        RowCounts(),  # the model's expected figures: no rows behind them
    )


def first_guess(
    batch_size: int,
    profile: str,
    target_config: str | None = None,
    draft_config: str | None = None,
    *,
    draft_model: str | None = None,
    acceptance_from: str | None = None,
    engine: Engine | None = None,
    workload: ServingWorkload | None = None,
    max_speed_loss: float = DEFAULT_MAX_SPEED_LOSS,
) -> FirstGuess:
    """The config and the power limit for ``batch_size`` on ``profile``, from the model's figures.

    Args:
        batch_size: concurrent requests.
        profile: a built-in profile name or a profile file (see ``specband simulate --list-profiles``).
        target_config, draft_config: the models' config.json (file, folder, bundled name or
            hub id); ``None`` for both: the bundled Llama-3.2-1B pair; one alone must be part
            of a bundled pair (:func:`specband.sim.model.model_pair`).
        draft_model: emitted as ``--speculative-draft-model-path`` (default: none).
        acceptance_from: measured accept lengths to fit the pair's acceptance to
            (:mod:`specband.sim.acceptance_fit`), or ``None``.
        engine: the engine whose configs are scored and whose flags print (``--engine``;
            ``None``: the default engine).
        workload: the prompt and output lengths the serving power is for (``None``: the fit's).
        max_speed_loss: the speed a lower limit may cost against the fastest, fraction.

    Returns:
        a :class:`~specband.deploy.table.FirstGuess`: the joint pick (config, limit, figures with
        their sources and intervals), ``calibration`` (per metric a
        :class:`~specband.deploy.answers.CalibrationError` of this profile and pair; empty when
        no measured row holds them), ``speed_interval`` (the pick's) and ``notes`` (the
        acceptance first, see the module docstring).

    Raises:
        ConfigError: a bad profile, config or batch size, one config without its pair, a pair
            ``doctor`` calls an error (:func:`specband.doctor.pairs.refuse_named_pair`: another vocabulary
            or width), no config that fits in memory; DataError: a bad ``acceptance_from`` file.
    """
    refuse_named_pair(target_config, draft_config)  # as doctor calls the pair an error
    model = build_model(
        profile, target_config=target_config, draft_config=draft_config, acceptance_from=acceptance_from
    )
    engine = engine or default_engine()
    source = ModelSource(model, engine.actions, workload=workload)
    return guess_from(
        source, batch_size, calibration_profile=profile, draft_model=draft_model, engine=engine,
        max_speed_loss=max_speed_loss,
    )  # fmt: skip


def guess_from(
    source: ModelSource,
    batch_size: int,
    *,
    calibration_profile: str,
    draft_model: str | None = None,
    engine: Engine | None = None,
    max_speed_loss: float = DEFAULT_MAX_SPEED_LOSS,
) -> FirstGuess:
    """The :class:`~specband.deploy.table.FirstGuess` for ``batch_size`` from the model's figures
    (``source``): the joint pick, labelled with the acceptance, the calibration of
    ``calibration_profile`` with the pair, the power and the speed interval (:func:`first_guess`;
    ``probe`` gives its own source, with NVML's limits).

    Raises:
        ConfigError: no config fits in memory at ``batch_size``.
    """
    engine = engine or default_engine()
    model = source.model
    prof = model.profile
    joint = joint_pick(source, batch_size, max_speed_loss=max_speed_loss)
    chosen = joint.chosen
    calibration = _calibration(model, calibration_profile)
    errs = ", ".join(
        f"{m} median {c.median_abs_error:.1%} (worst {c.worst_abs_error:.1%}, {c.rows} rows)"
        for m, c in calibration.items()
    )
    pair = f"{model.target.name} + {model.draft.name}"
    if calibration:
        label = f"SIMULATED on {prof.name}, not measured; calibration error of {prof.name} with {pair}: {errs}"
    else:
        label = (
            f"SIMULATED on {prof.name}, not measured; no measured row holds {prof.name} with {pair} to a "
            "calibration error"
        )
    speed = chosen.speed_tok_s
    lo, hi = speed.lo95 or speed.value, speed.hi95 or speed.value
    cost = cost_error(prof)
    held = f"{cost.target} + {cost.draft}" if cost.target else "no pair"
    return FirstGuess(
        batch_size=batch_size,
        joint=joint,
        profile=prof.name,
        hardware=prof.hardware,
        target=model.target.name,
        draft=model.draft.name,
        engine=engine,
        acceptance=model.acceptance.source,
        calibration=calibration,
        speed_interval=SimulatedSpeed(
            round(speed.value, 2), round(lo, 2), round(hi, 2), model.acceptance.source, round(cost.sd, 4)
        ),
        origin=_origin(model, engine.name, joint.power_limit_w),
        draft_model=draft_model,
        warnings=tuple(w for w in model.warnings if w != model.acceptance.note),
        notes=(
            acceptance_note(model),
            *(w for w in model.warnings if w != model.acceptance.note),  # a RoPE mismatch, a file of another pair
            label,
            *source.notes,
            f"SIMULATED speed of the pick at batch size {batch_size}: {speed.value:.1f} tok/s per request "
            f"(95 % interval {lo:.1f}-{hi:.1f}: acceptance {model.acceptance.source}, step time sd {cost.sd:.1%} as "
            f"held to {held} rows)",
            "a sweep settles what this cannot: your GPU's real power and utilisation against its limit (the band), "
            "the draft's acceptance on your workload, and whether the pick holds; run `specband sweep` on this GPU, "
            "then `specband train` and `specband recommend`",
        ),
    )

"""A first guess for a named GPU and model pair without a sweep: simulate the contract
grid on a built-in profile (:func:`specband.sim.simulated.simulate_sweep`), pick with the
lookup table on the simulated rows, and label the answer as a simulation that says what it
rests on:

1. the first note names the acceptance used: fitted to the user's measurements
   (``--acceptance-from FILE``, with every fitted config's residual), the bundled profile of
   the pair, or a profile *borrowed* from another pair or workload, and why;
2. the calibration error quoted is that of the profile *and* the pair simulated: the
   published errors (:func:`specband.sim.published.calibration_errors`) only when the pair is
   the one those rows measured and its own acceptance is used, the profile's step-time error
   (:func:`specband.sim.cost_error.cost_error`) only when the pair is the one its rows measured;
3. the pick's simulated speed carries its 95 % interval
   (:func:`specband.sim.speed_interval.speed_interval`), which a borrowed acceptance widens;
4. what a sweep would settle.

What ``specband recommend --gpu PROFILE --target-config CONFIG --draft-config CONFIG -b N
[--acceptance-from FILE]`` answers.
"""

from __future__ import annotations

from typing import Any

from specband.artifacts.fit import build_manifest
from specband.contract.actions import ACTIONS
from specband.deploy.answers import CalibrationError, Pick, PickOrigin, RowCounts, SimulatedSpeed, TransferCheck
from specband.deploy.explain import explain_pick, profile_limit_range
from specband.engines.base import Engine, default_engine, runnable_indices
from specband.policies.lookup_core import lookup_pick
from specband.sim.acceptance import BORROWED_ACCEPT_FACTOR, acceptance_profiles, pair_profile
from specband.sim.cost_error import cost_error
from specband.sim.model import build_model, model_pair
from specband.sim.profile import builtin_profiles
from specband.sim.published import DRAFT_CONFIG, TARGET_CONFIG, calibration_errors
from specband.sim.simulated import simulate_sweep
from specband.sim.speed_interval import speed_interval
from specband.sweeps.dataset import Sweep

__all__ = ["FIRST_GUESS_REPEATS", "FIRST_GUESS_SEED", "first_guess"]

#: Passes of the simulated grid (noise averaged over 3, as a measuring sweep's default).
FIRST_GUESS_REPEATS = 3
#: Noise seed of the simulated grid (the same answer every time).
FIRST_GUESS_SEED = 0
#: Batch sizes always simulated beside the asked one (the sweep's default grid).
_GRID = (1, 4, 8, 16)


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


def first_guess(
    batch_size: int,
    profile: str,
    target_config: str | None = None,
    draft_config: str | None = None,
    *,
    draft_model: str | None = None,
    acceptance_from: str | None = None,
    engine: Engine | None = None,
) -> Pick:
    """Simulate and pick for ``batch_size`` on ``profile``, among the configs ``engine`` runs.

    Args:
        batch_size: concurrent requests.
        profile: a built-in profile name or a profile file (see ``specband simulate --list-profiles``).
        target_config, draft_config: the models' config.json (file, folder, bundled name or
            hub id); ``None`` for both: the bundled Llama-3.2-1B pair; one alone must be part
            of a bundled pair (:func:`specband.sim.model.model_pair`).
        draft_model: emitted as ``--speculative-draft-model-path`` (default: none).
        acceptance_from: measured accept lengths to fit the pair's acceptance to
            (:mod:`specband.sim.acceptance_fit`), or ``None``.
        engine: the engine the pick is for (``None``: the default engine): its configs, its flags.

    Returns:
        a :class:`~specband.deploy.answers.Pick` with the fields of
        :func:`specband.deploy.recommend.recommend` (``source`` says "simulated first guess"), with
        ``origin.data.provenance`` ``"simulated"``, ``explanation`` (simulated figures),
        ``calibration`` (per metric a :class:`~specband.deploy.answers.CalibrationError` of
        this profile and pair; empty when no measured row holds them), ``speed_interval`` (the
        pick's simulated speed and 95 % interval) and ``notes`` (the acceptance first, see the
        module docstring).

    Raises:
        ConfigError: a bad profile, config or batch size, one config without its pair;
            DataError: a bad ``acceptance_from`` file.
    """

    model = build_model(
        profile, target_config=target_config, draft_config=draft_config, acceptance_from=acceptance_from
    )
    prof = model.profile
    sizes = sorted({*_GRID, batch_size})
    rows = simulate_sweep(model, batch_sizes=sizes, repeats=FIRST_GUESS_REPEATS, seed=FIRST_GUESS_SEED)
    sweep = Sweep.from_records(rows, path=f"<simulated on {prof.name}>")
    data = sweep.training_data("pre")
    manifest = build_manifest(data, ["lookup_table"], seed=FIRST_GUESS_SEED, sweep=sweep)
    measured = manifest.measured_batch_size(batch_size)
    engine = engine or default_engine()
    runnable = runnable_indices(engine, ACTIONS, manifest.allowed_indices(batch_size))
    index = lookup_pick(manifest.mean_rewards, batch_size, runnable)
    action = ACTIONS[index]
    calibration = _calibration(model, profile)
    assert manifest.origin is not None
    counts = manifest.row_counts.get(measured or batch_size, {})
    origin = PickOrigin(manifest.origin, RowCounts(rows=sum(counts.values()), repeats=FIRST_GUESS_REPEATS))
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
    interval = speed_interval(model, batch_size, action)
    cost = cost_error(prof)
    held = f"{cost.target} + {cost.draft}" if cost.target else "no pair"
    return Pick(
        algorithm="lookup_table",
        batch_size=batch_size,
        measured_batch_size=measured,
        features=manifest.features,
        state=tuple(float(f"{float(v):.7g}") for v in manifest.state_for(batch_size)),
        source=f"simulated first guess ({prof.name}, seed {FIRST_GUESS_SEED}, {FIRST_GUESS_REPEATS} repeats)",
        action_index=index,
        action=action,
        engine=engine,
        draft_model=draft_model,
        mean_reward=None if measured is None else manifest.mean_reward(measured, index),
        origin=origin,
        explanation=explain_pick(
            manifest, measured, index, "simulated", profile_limit_range(str(profile)), runnable=runnable
        ),
        transfer=TransferCheck(),  # a first guess for the setup named: nothing transferred
        calibration=calibration,
        speed_interval=SimulatedSpeed(
            round(interval.expected_tok_s, 2),
            round(interval.lo_tok_s, 2),
            round(interval.hi_tok_s, 2),
            interval.acceptance_source,
            round(interval.cost_sd, 4),
        ),
        notes=(
            acceptance_note(model),
            *(w for w in model.warnings if w != model.acceptance.note),  # a RoPE mismatch, a file of another pair
            label,
            f"SIMULATED speed of the pick at batch size {batch_size}: {interval.expected_tok_s:.1f} tok/s per "
            f"request (95 % interval {interval.lo_tok_s:.1f}-{interval.hi_tok_s:.1f}: acceptance "
            f"{interval.acceptance_source}, step time sd {interval.cost_sd:.1%} as held to {held} rows)",
            "a sweep settles what this cannot: your GPU's real power and utilisation against its limit (the band), "
            "the draft's acceptance on your workload, and whether the pick holds; run `specband sweep` on this GPU, "
            "then `specband train` and `specband recommend`",
        ),
    )

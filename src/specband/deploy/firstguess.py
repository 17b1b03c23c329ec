"""A first guess for a named GPU and model pair without a sweep: simulate the contract
grid on a built-in profile (:func:`specband.sim.simulated.simulate_sweep`), pick with the
lookup table on the simulated rows, and label the answer as a simulation with the
profile's calibration error against published measurements
(:func:`specband.sim.published.calibration_errors`) and what a sweep would settle.

What ``specband recommend --gpu PROFILE --target-config CONFIG --draft-config CONFIG -b N``
answers.
"""

from __future__ import annotations

from specband.artifacts.fit import build_manifest
from specband.contract.actions import ACTIONS
from specband.deploy.answers import CalibrationError, Pick, PickOrigin, RowCounts, TransferCheck
from specband.deploy.explain import explain_pick, profile_limit_range
from specband.policies.lookup_core import lookup_pick
from specband.sim.profile import builtin_profiles, load_profile
from specband.sim.published import calibration_errors
from specband.sim.simulated import simulate_sweep
from specband.sweeps.dataset import Sweep

__all__ = ["FIRST_GUESS_REPEATS", "FIRST_GUESS_SEED", "first_guess"]

#: Passes of the simulated grid (noise averaged over 3, as a measuring sweep's default).
FIRST_GUESS_REPEATS = 3
#: Noise seed of the simulated grid (the same answer every time).
FIRST_GUESS_SEED = 0
#: Batch sizes always simulated beside the asked one (the sweep's default grid).
_GRID = (1, 4, 8, 16)


def first_guess(
    batch_size: int,
    profile: str,
    target_config: str | None = None,
    draft_config: str | None = None,
    *,
    draft_model: str | None = None,
) -> Pick:
    """Simulate and pick for ``batch_size`` on ``profile``.

    Args:
        batch_size: concurrent requests.
        profile: a built-in profile name or a profile file (see ``specband simulate --list-profiles``).
        target_config, draft_config: the models' config.json (file, folder, bundled name or
            hub id); ``None``: the profile's default pair.
        draft_model: emitted as ``--speculative-draft-model-path`` (default: none).

    Returns:
        a :class:`~specband.deploy.answers.Pick` with the fields of
        :func:`specband.deploy.recommend.recommend` (``source`` says "simulated first guess"), with
        ``origin.data.provenance`` ``"simulated"``, ``explanation`` (simulated figures),
        ``calibration`` (per metric a :class:`~specband.deploy.answers.CalibrationError` against
        published measurements on this GPU; empty when none exist) and ``notes`` (the label of
        a simulation and what a sweep would settle).

    Raises:
        ConfigError: a bad profile, config or batch size.
    """

    prof = load_profile(profile)
    sizes = sorted({*_GRID, batch_size})
    rows = simulate_sweep(
        profile=profile,
        target_config=target_config,
        draft_config=draft_config,
        batch_sizes=sizes,
        repeats=FIRST_GUESS_REPEATS,
        seed=FIRST_GUESS_SEED,
    )
    sweep = Sweep.from_records(rows, path=f"<simulated on {prof.name}>")
    data = sweep.training_data("pre")
    manifest = build_manifest(data, ["lookup_table"], seed=FIRST_GUESS_SEED, sweep=sweep)
    measured = manifest.measured_batch_size(batch_size)
    index = lookup_pick(manifest.mean_rewards, batch_size, manifest.allowed_indices(batch_size))
    action = ACTIONS[index]
    calibration: dict[str, CalibrationError] = {}
    if str(profile) in builtin_profiles():
        calibration = {
            metric: CalibrationError(round(err.median_abs_error, 4), round(err.worst_abs_error, 4), err.rows)
            for metric, err in calibration_errors(str(profile)).items()
        }
    assert manifest.origin is not None
    counts = manifest.row_counts.get(measured or batch_size, {})
    origin = PickOrigin(manifest.origin, RowCounts(rows=sum(counts.values()), repeats=FIRST_GUESS_REPEATS))
    errs = ", ".join(
        f"{m} median {c.median_abs_error:.1%} (worst {c.worst_abs_error:.1%}, {c.rows} rows)"
        for m, c in calibration.items()
    )
    if calibration:
        label = f"SIMULATED on {prof.name}, not measured; calibration error against published measurements: {errs}"
    else:
        label = (
            f"SIMULATED on {prof.name}, not measured; no published measurement holds this profile to a "
            "calibration error"
        )
    return Pick(
        algorithm="lookup_table",
        batch_size=batch_size,
        measured_batch_size=measured,
        features=manifest.features,
        state=tuple(float(f"{float(v):.7g}") for v in manifest.state_for(batch_size)),
        source=f"simulated first guess ({prof.name}, seed {FIRST_GUESS_SEED}, {FIRST_GUESS_REPEATS} repeats)",
        action_index=index,
        action=action,
        draft_model=draft_model,
        mean_reward=None if measured is None else manifest.mean_reward(measured, index),
        origin=origin,
        explanation=explain_pick(manifest, measured, index, "simulated", profile_limit_range(str(profile))),
        transfer=TransferCheck(),  # a first guess for the setup named: nothing transferred
        calibration=calibration,
        notes=(
            label,
            "a sweep settles what this cannot: your GPU's real power and utilisation against its limit (the band), "
            "the draft's acceptance on your workload, and whether the pick holds; run `specband sweep` on this GPU, "
            "then `specband train` and `specband recommend`",
        ),
    )

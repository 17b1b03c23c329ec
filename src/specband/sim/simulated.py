"""A simulated sweep in the published schema: every (repeat, batch size, action) run of
``specband sweep``, drawn from the performance model with measurement noise and thermal
drift.

A pass runs the batch sizes in order and, for each, the 19 actions in contract order; each
run launches the server (``launch_s`` at launch power: the GPU warms towards its launch
steady state), measures ``max(16, bs) x 512`` tokens at the run's power (the GPU heats),
then tears the server down and sleeps ``cooldown_s`` (5 s, docs/FACTS.md §4) at idle power. A launch
that does not fit in VRAM x 0.65 is retried at 0.55 (``retry_mem_fraction``); one that fits
at neither is an error row with null measurements. Repeats are full passes, so the thermal
state carries across runs.

Every row says which workload its acceptance belongs to (``workload``: the acceptance profile's,
e.g. ``mt-bench``, or "fitted to N configs of FILE"), and every successful row where its
acceptance came from (``acceptance_source``: a profile, a borrowed profile, or "fitted to N
configs of FILE") and carries the model's speed
without noise (``speed_tok_s_expected``) and a 95 % interval on it (``speed_tok_s_interval``,
tok/s): the acceptance's accept-length interval
(:meth:`~specband.sim.acceptance.AcceptanceChoice.accept_length_interval`) divided by the step
time, widened by the profile's step-time calibration error either way
(:func:`specband.sim.speed_interval.speed_interval`: ``speed = accept_length / step_time``).

Noise per run (independent normal draws, from ``numpy.random.default_rng(seed)`` in a fixed
order): accept length (``accept_sd``), step time (``speed_rel_sd``), average power
(``power_rel_sd``), temperature readings (``temp_sd_c``). The calibrated values are the
run-to-run spread of the five published bs 16 trials. Same seed, same rows.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specband.contract.actions import ACTIONS, Action, action_set_of, as_action
from specband.contract.record import SWEEP_COLUMNS, SweepRecord
from specband.core.errors import ConfigError
from specband.core.limits import MAX_BATCH_SIZE, is_int
from specband.files.fileio import check_out_path, write_jsonl_atomic
from specband.sim.model import SpeculativeDecodingModel, build_model
from specband.sim.power import power_range_w
from specband.sim.power_capped import with_power_limit
from specband.sim.speed_interval import speed_interval

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "MEM_FRACTION_STATIC",
    "RETRY_MEM_FRACTION",
    "acceptance_workload",
    "check_out_path",
    "simulate_power_limits",
    "simulate_sweep",
    "write_sweep",
]

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 4, 8, 16)
#: sglang --mem-fraction-static of a launch, and of its retry after a failed launch (docs/FACTS.md §1).
MEM_FRACTION_STATIC = 0.65
RETRY_MEM_FRACTION = 0.55


#: Columns of a simulated row, in order; ``power_w_range`` (successful rows) and
#: ``power_measured`` (false) only where the profile's power is neither measured nor fitted to
#: published figures; ``power_source`` ("published fit (...)") only where it is fitted so. A model on
#: ``tp > 1`` GPUs adds ``tp_size`` (its ``avg_power_watts``/``gpu_power_w`` are one GPU's, its
#: ``energy_joules``/``joules_per_token`` all GPUs').
SIMULATED_COLUMNS: tuple[str, ...] = (
    *SWEEP_COLUMNS,
    "power_w_range",
    "power_measured",
    "power_source",
    "power_limit_watts",
    "provenance",
    "profile",
    "seed",
    "action_set",
    "gpu_mem_used_mb_before",
    "gpu_util_pct_before",
    "target_model",
    "draft_model",
    "target_architecture",
    "target_config_sha256",
    "draft_architecture",
    "draft_config_sha256",
)
#: Columns after SIMULATED_COLUMNS on a model with an acceptance (every built model): where the
#: acceptance comes from, the noise-free speed and its 95 % interval (null on an error row).
INTERVAL_COLUMNS: tuple[str, ...] = ("acceptance_source", "speed_tok_s_expected", "speed_tok_s_interval")


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(float(value), digits)


def acceptance_workload(choice: Any) -> str:
    """The workload a simulated row's acceptance belongs to, as its ``workload`` column says it:
    the acceptance profile's (``mt-bench``; a borrowed profile's own), or ``"fitted to N configs
    of FILE"`` for acceptance fitted to the user's measurements (their prompts)."""
    return str(choice.fit.label) if choice.fit is not None else str(choice.workload)


def _with_interval(out: dict[str, Any], model: Any, bs: int, action: Action, pred: Any) -> dict[str, Any]:
    """``out`` with its acceptance's ``workload`` (:func:`acceptance_workload`) and
    :data:`INTERVAL_COLUMNS` (``pred``: its noise-free prediction, ``None`` on an error row);
    unchanged for a duck-typed model without an ``acceptance``."""
    if getattr(model, "acceptance", None) is None:
        return out
    out["workload"] = acceptance_workload(model.acceptance)
    interval = None if pred is None else speed_interval(model, bs, action, prediction=pred)
    out["acceptance_source"] = model.acceptance.source
    out["speed_tok_s_expected"] = None if interval is None else round(interval.expected_tok_s, 3)
    out["speed_tok_s_interval"] = None if interval is None else interval.as_list()
    return out


def _with_tp(out: dict[str, Any], model: Any) -> dict[str, Any]:
    """``out`` with ``tp_size`` (sglang's ``/server_info`` name) for a model on more than one GPU:
    the row's power is one GPU's, its energy all ``tp`` GPUs'."""
    tp = getattr(model, "tp", 1)
    if tp > 1:
        out["tp_size"] = tp
    return out


def _held(power_w: float, limit_w: float, profile: Any) -> float:
    """A noisy power reading under a limit set by the lever (``--power-limits``): never above
    it (the profile's own limit keeps its calibrated overshoot)."""
    return min(power_w, limit_w) if limit_w != profile.power_limit_w else power_w


def simulate_sweep(  # noqa: C901
    model: SpeculativeDecodingModel | Any | None = None,
    *,
    profile: str | Path | None = None,
    target_config: Any = None,
    draft_config: Any = None,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    repeats: int = 3,
    seed: int = 0,
    actions: Iterable[Action | tuple[int, int, int]] = ACTIONS,
    start_temp_c: float | None = None,
) -> list[dict[str, Any]]:
    """Simulated sweep rows (the published sweep columns plus ``power_limit_watts``,
    ``provenance``, ``profile``, ``seed``, ``gpu_mem_used_mb_before``,
    ``gpu_util_pct_before``, ``target_model``, ``draft_model``, and, for a model with an
    ``acceptance``, :data:`INTERVAL_COLUMNS`), one dict per run, in run order; ``index``
    counts runs from 0 across passes. A profile with a ``power_source`` (power fitted to
    published figures) adds ``power_source: "published fit (...)"`` to every row; one
    with neither that nor ``power_measured = true`` adds ``power_measured: false`` to every row
    and ``power_w_range: [low, high]`` (W, :func:`specband.sim.power.power_range_w`) to every
    successful one.

    Args:
        model: the performance model; ``None`` builds one from ``profile`` and the configs
            (see :func:`specband.sim.build_model`).
        profile, target_config, draft_config: used only when ``model`` is ``None``.
        batch_sizes: batch sizes of a pass, in run order (each an integer >= 1, none twice).
        repeats: number of full passes (>= 1).
        seed: noise seed; the same seed gives the same rows.
        actions: actions of a pass, in run order (default: the 19 contract actions); with one
            outside the contract every row says ``action_set: "extended"``.
        start_temp_c: GPU temperature when the sweep starts (default: ambient).

    Returns:
        ``repeats x len(batch_sizes) x len(actions)`` rows.

    Raises:
        ConfigError: bad batch sizes (empty, < 1, not an integer, repeated), repeats, seed
            or profile.
        InvalidActionError: a plain triple (not an :class:`~specband.contract.actions.Action`)
            breaks an sglang rule.
    """
    if model is None:
        model = build_model(
            profile if profile is not None else "rtx4060-laptop", target_config=target_config, draft_config=draft_config
        )
    if not is_int(repeats) or repeats < 1:
        raise ConfigError(f"repeats must be an integer >= 1, got {repeats!r}")
    if not is_int(seed) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    sizes = list(batch_sizes)
    if not sizes:
        raise ConfigError("at least one batch size is needed")
    for bs in sizes:
        if not is_int(bs) or not 1 <= bs <= MAX_BATCH_SIZE:
            raise ConfigError(f"batch sizes must be integers in [1, {MAX_BATCH_SIZE}], got {bs!r}")
    if len(set(sizes)) != len(sizes):
        twice = sorted({bs for bs in sizes if sizes.count(bs) > 1})
        raise ConfigError(f"batch sizes must not repeat (each runs once per pass), got {twice} more than once")
    acts = [as_action(a) for a in actions]  # a plain triple is checked here; an Action is trusted
    if not acts:
        raise ConfigError("at least one action is needed")
    p = model.profile
    rng = np.random.default_rng(seed)
    temp = p.ambient_temp_c if start_temp_c is None else float(start_temp_c)
    if not math.isfinite(temp):
        raise ConfigError(f"start temperature must be finite, got {start_temp_c!r}")
    limit_w = float(model.power_limit_w)  # a PowerLimitedModel's limit, else the profile's
    launch_power = min(limit_w, p.idle_power_w + p.launch_power_frac * p.activity_scale_w)
    rows: list[dict[str, Any]] = []
    index = 0
    for repeat in range(repeats):
        for bs in sizes:
            for action in acts:
                steps, topk, draft_tokens = action
                mem_before = p.idle_mem_used_mb * (1.0 + 0.02 * rng.standard_normal())
                util_before = max(0.0, p.idle_util_pct + 0.5 * rng.standard_normal())
                fraction = MEM_FRACTION_STATIC
                retry: float | None = None
                error: str | None = None
                if not model.fits(bs, action, MEM_FRACTION_STATIC):
                    # the failed launch loads weights, then dies while allocating
                    temp = model.advance_temperature(temp, launch_power, 0.5 * p.launch_s)
                    if model.fits(bs, action, RETRY_MEM_FRACTION):
                        fraction = retry = RETRY_MEM_FRACTION
                    else:
                        need = model.memory_needed_mb(bs, action)
                        error = (
                            f"out of memory: launch needs {need:.0f} MiB > VRAM x mem_fraction_static "
                            f"({p.vram_mb:.0f} x {MEM_FRACTION_STATIC} = {p.vram_mb * MEM_FRACTION_STATIC:.0f}, "
                            f"x {RETRY_MEM_FRACTION} = {p.vram_mb * RETRY_MEM_FRACTION:.0f} MiB)"
                        )
                row = SweepRecord(
                    hardware=p.hardware,
                    index=index,
                    repeat=repeat,
                    batch_size=bs,
                    steps=steps,
                    topk=topk,
                    num_draft_tokens=draft_tokens,
                    is_baseline=action.is_baseline,
                    error=error,
                    action_set=_row_action_set(tuple(acts)),
                    retry_mem_fraction=retry,
                    power_limit_watts=limit_w,
                    provenance="simulated",
                    profile=p.name,
                    seed=seed,
                    gpu_mem_used_mb_before=_round(max(0.0, mem_before), 0),
                    gpu_util_pct_before=_round(util_before, 1),
                    target_model=model.target.name,
                    draft_model=model.draft.name,
                    target_architecture=model.target.architecture or None,
                    target_config_sha256=model.target.config_sha256,
                    draft_architecture=model.draft.architecture or None,
                    draft_config_sha256=model.draft.config_sha256,
                    power_measured=None if p.power_measured or p.power_source else False,
                    power_source=p.power_source if p.power_source and not p.power_measured else None,
                )
                if error is None:
                    temp = model.advance_temperature(temp, launch_power, p.launch_s)
                    temp_before = temp
                    first = model.predict(bs, action, temp_before, fraction)
                    first_cost = model.run_cost(bs, action, first)
                    temp_end = model.advance_temperature(temp_before, first.avg_power_w, first_cost.wall_clock_s)
                    pred = model.predict(bs, action, 0.5 * (temp_before + temp_end), fraction)
                    if action.is_baseline:
                        accept = 1.0
                    else:
                        accept = pred.accept_length + p.accept_sd * rng.standard_normal()
                        accept = min(max(accept, 1.0), steps + 1.0)
                    step = pred.step_time_s * (1.0 + p.speed_rel_sd * rng.standard_normal())
                    speed = accept / step
                    power = _held(pred.avg_power_w * (1.0 + p.power_rel_sd * rng.standard_normal()), limit_w, p)
                    noisy = type(pred)(
                        **{
                            **pred.__dict__,
                            "accept_length": accept,
                            "step_time_s": step,
                            "speed_tok_s": speed,
                            "avg_power_w": power,
                        }
                    )
                    cost = model.run_cost(bs, action, noisy)
                    temp_after = model.advance_temperature(temp_before, power, cost.wall_clock_s)
                    throttled = pred.thermal_throttled or temp_after > p.throttle_temp_c
                    util = min(100.0, max(0.0, pred.gpu_util_pct + 0.5 * rng.standard_normal()))
                    row = dataclasses.replace(
                        row,
                        accept_length=_round(accept, 3),
                        speed_tok_s=_round(speed, 3),
                        speed_source="step_time",
                        step_time_s=_round(step, 6),
                        wall_clock_s=_round(cost.wall_clock_s, 3),
                        wall_clock_tok_s=_round(cost.wall_clock_tok_s, 3),
                        total_output_tokens=cost.total_output_tokens,
                        energy_joules=_round(cost.energy_j, 2),
                        avg_power_watts=_round(power, 2),
                        joules_per_token=_round(cost.joules_per_token, 5),
                        gpu_temp_c_before=_round(temp_before + p.temp_sd_c * rng.standard_normal(), 1),
                        gpu_temp_c=_round(temp_after + p.temp_sd_c * rng.standard_normal(), 1),
                        gpu_power_w=_round(power * (1.0 + 2.0 * p.power_rel_sd * rng.standard_normal()), 2),
                        gpu_util_pct=_round(util, 1),
                        gpu_mem_used_mb=_round(pred.mem_used_mb, 0),
                        gpu_throttling=bool(throttled),
                    )
                    temp = temp_after
                    if not p.power_measured and not p.power_source:
                        low, high = power_range_w(p, pred)
                        row.power_w_range = [round(min(low, limit_w), 1), round(min(high, limit_w), 1)]
                out = row.as_row(SIMULATED_COLUMNS, omit_null=("power_w_range", "power_measured", "power_source"))
                rows.append(_with_interval(_with_tp(out, model), model, bs, action, None if error else pred))
                # teardown and the 5 s sleep between launches
                temp = model.advance_temperature(temp, p.idle_power_w, p.cooldown_s)
                index += 1
    return rows


@functools.cache
def _row_action_set(actions: tuple[Action, ...]) -> str | None:
    """The rows' ``action_set``: ``"extended"`` when an action is outside the contract, else
    ``None`` (contract rows keep the published columns)."""

    found = action_set_of(actions)
    return None if found.is_contract else found.name


def simulate_power_limits(model: Any, power_limits_w: Sequence[float], **kwargs: Any) -> list[dict[str, Any]]:
    """A simulated sweep at each power limit in turn (``nvidia-smi -pl W`` before each), the
    rows of every limit in one list: ``index`` keeps counting across limits, every row
    carries its ``power_limit_watts``. The limit is applied on top of the model's power
    (:func:`specband.sim.power_capped.with_power_limit`).

    Args:
        model: the performance model (its own limit is the GPU's default).
        power_limits_w: limits in W, in run order, each above the model's idle power.
        kwargs: as :func:`simulate_sweep` (batch sizes, repeats, seed, ...); the same seed
            at every limit.

    Raises:
        ConfigError: an empty list, a repeated limit or one at or below idle power; as
            :func:`simulate_sweep`.
    """

    limits = [float(w) for w in power_limits_w]
    if not limits:
        raise ConfigError("at least one power limit is needed")
    if len(set(limits)) != len(limits):
        raise ConfigError(f"power limits must not repeat, got {limits}")
    rows: list[dict[str, Any]] = []
    for limit in limits:
        part = simulate_sweep(with_power_limit(model, limit), **kwargs)
        offset = len(rows)
        for row in part:
            row["index"] += offset
        rows += part
    return rows


def write_sweep(rows: Iterable[dict[str, Any]], path: str | Path, *, overwrite: bool = False) -> Path:
    """Write rows as JSONL (one JSON object per line) through a temporary file in the same
    folder, an fsync and an atomic rename (:func:`specband.files.fileio.write_jsonl_atomic`): the
    file is either complete or absent, and an existing file is left as it was on any error.

    Args:
        rows: the rows (e.g. from :func:`simulate_sweep`).
        path: the JSONL file.
        overwrite: replace an existing file; by default one is refused (a measured sweep
            can hold hours of GPU time).

    Raises:
        ConfigError: see :func:`check_out_path`; the file cannot be written; or a row holds
            NaN, Infinity or a value JSON cannot hold.
    """
    out = check_out_path(path, overwrite=overwrite)
    return write_jsonl_atomic(out, rows, error=ConfigError)

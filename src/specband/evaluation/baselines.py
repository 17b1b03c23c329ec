"""The engines' own defaults as baselines: per batch size, specband's pick against what sglang
and vLLM run when the user gives them no speculation flags beyond turning it on.

* **sglang** ``--speculative-adaptive`` with its default tiers: ``DEFAULT_ADAPTIVE_CONFIG`` in
  ``python/sglang/srt/speculative/adaptive_spec_params.py`` (sglang 0.5.23, copied in
  :data:`specband.engines.schedule_files.SGLANG_DEFAULT_ADAPTIVE_CONFIG`): batch sizes from 1
  use ``candidate_steps`` [1, 3, 5, 7] (``down_hysteresis`` -0.25), from 8 [0, 1, 3], from 32
  [0, 1], from 64 [0]; topk 1, draft tokens = steps + 1. Without ``--speculative-num-steps``
  every tier starts at the middle of the union of the candidates, 3
  (``_init_adaptive_speculative_params`` in ``srt/arg_groups/speculative_hook.py``), or at
  its own middle candidate when 3 is not one of its (``AdaptiveStepSlot.__init__``). The
  controller then moves on an EMA of accepted draft tokens per request (accept length - 1).
  Here it is run to its **steady state** with the EMA equal to the mean accepted drafts of
  the config it is on (:func:`settle_adaptive`): a tier that keeps dropping to 0 and probing
  back up alternates between the two, and its figures are those of the alternation
  (equal numbers of batches on each config).
* **vLLM** with a fixed ``num_speculative_tokens`` K (:data:`VLLM_K` = 3): vLLM has no default
  for an EAGLE3 head (``vllm/config/speculative.py``, vLLM 0.32.0: "A speculative model was
  provided, but `num_speculative_tokens` was not provided"), so the user picks one; 3 is the
  step count sglang's adaptive default starts at. K draft tokens is the chain (K, 1, K + 1);
  read from sglang rows it is sglang's chain, not vLLM's own speed (the table says so).

Every figure is the mean over the data's rows of that config at that batch size when the data
ran it (labelled with the rows' provenance), else simulated by :mod:`specband.sim` on the
profile and model pair the rows name (labelled ``simulated``), else not given (with why).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specband.contract.actions import BASELINE_ACTION, Action, chain_action
from specband.contract.record import row_engine
from specband.contract.reward import RewardConfig, band_score, throughput_score
from specband.core.errors import ConfigError
from specband.engines.base import Engine, default_engine, engine_names, get_engine
from specband.engines.schedule_files import SGLANG_DEFAULT_ADAPTIVE_CONFIG, SLOT_DEFAULTS
from specband.engines.vllm import ENGINE as VLLM_ENGINE
from specband.sweeps.dataset import Sweep, SweepRow

__all__ = [
    "SGLANG_DEFAULTS_SOURCE",
    "VLLM_K",
    "BaselineComparison",
    "BaselineRow",
    "ConfigFigures",
    "compare_from_stats",
    "compare_with_engine_defaults",
    "comparison_table",
    "picks_of",
    "settle_adaptive",
]

#: Where sglang's default tiers and starting step count are read from.
SGLANG_DEFAULTS_SOURCE = (
    "sglang 0.5.23 python/sglang/srt/speculative/adaptive_spec_params.py (DEFAULT_ADAPTIVE_CONFIG, "
    "AdaptiveStepSlot) and srt/arg_groups/speculative_hook.py (_init_adaptive_speculative_params)"
)
#: vLLM's fixed ``num_speculative_tokens`` compared (vLLM has no default for an EAGLE3 head).
VLLM_K = 3
#: The three rows of each batch size, in table order.
SPECBAND, SGLANG, VLLM = "specband", "sglang adaptive (default tiers)", f"vLLM num_speculative_tokens={VLLM_K}"


@dataclass(frozen=True)
class ConfigFigures:
    """What one config (or an alternation of configs) gives at one batch size.

    Attributes:
        speed_tok_s: decode speed, tokens/s per request.
        joules_per_token: energy per output token, J (``None`` without power).
        energy_utilization: average power / power limit, fraction (``None`` without power).
        band: ``"in"``, ``"below"``, ``"above"`` the band, or ``"unknown"`` (no power).
        reward: the contract's reward without the thermal multiplier
            (``band^w x speed^(1-w)``, :mod:`specband.contract.reward`), ``None`` without power
            (0 for the baseline (0,0,0), whose speed term is 0 whatever its power).
        source: where the figures come from: the rows' provenance and count
            (``"published, 5 rows"``), or ``"simulated (profile ...)"``.
        from_data: every config behind them is in the data (``False``: some simulated here).
        speed_interval: for simulated figures, ``(low, high)`` tok/s: the speed widened by the
            simulator's worst relative speed error on the data's own configs (``None`` for
            figures from the data, or when the data has no config to check the simulator on).
    """

    speed_tok_s: float
    joules_per_token: float | None
    energy_utilization: float | None
    band: str
    reward: float | None
    source: str
    from_data: bool = True
    speed_interval: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        """Every field, floats rounded to 4-6 significant digits."""
        r = lambda v, d: None if v is None else round(float(v), d)  # noqa: E731
        return {
            "speed_tok_s": r(self.speed_tok_s, 3),
            "joules_per_token": r(self.joules_per_token, 6),
            "energy_utilization": r(self.energy_utilization, 5),
            "band": self.band,
            "reward": r(self.reward, 4),
            "source": self.source,
            "from_data": self.from_data,
            "speed_interval": None if self.speed_interval is None else [round(v, 3) for v in self.speed_interval],
        }


@dataclass(frozen=True)
class BaselineRow:
    """One contender at one batch size.

    Attributes:
        batch_size: the batch size.
        who: :data:`SPECBAND` (with the algorithm), :data:`SGLANG` or :data:`VLLM`.
        configs: the config(s) it runs there (two when the adaptive controller alternates).
        figures: what they give (``None``: neither measured nor simulated, see ``note``).
        note: how the config was reached (the tier and the controller's moves) or why
            there are no figures.
    """

    batch_size: int
    who: str
    configs: tuple[Action, ...]
    figures: ConfigFigures | None
    note: str

    @property
    def config_text(self) -> str:
        """``"(3,1,4)"`` or ``"(0,0,0)/(1,1,2)"`` for an alternation."""
        return "/".join(f"({a[0]},{a[1]},{a[2]})" for a in self.configs)

    def to_json(self) -> dict[str, Any]:
        """Every field; configs as ``[steps, topk, draft]`` lists."""
        return {
            "batch_size": self.batch_size,
            "who": self.who,
            "configs": [list(a) for a in self.configs],
            "figures": None if self.figures is None else self.figures.to_json(),
            "note": self.note,
        }


@dataclass(frozen=True)
class BaselineComparison:
    """specband's pick against the engines' defaults at every batch size.

    Attributes:
        rows: three :class:`BaselineRow` per batch size (specband, sglang, vLLM), in order.
        data: the data's provenance (``"published"``, ``"simulated"``, ...).
        simulator: the profile and pair that filled unmeasured configs, or ``None``.
        notes: what the reader must know (sources, the simulator's error on this data).
    """

    rows: tuple[BaselineRow, ...]
    data: str
    simulator: str | None
    notes: tuple[str, ...] = field(default=())

    def batch_sizes(self) -> list[int]:
        """The batch sizes compared, ascending."""
        return sorted({r.batch_size for r in self.rows})

    def at(self, batch_size: int, who: str) -> BaselineRow:
        """The row of ``who`` (:data:`SPECBAND` matches any specband algorithm) at ``batch_size``.

        Raises:
            KeyError: no such row.
        """
        for r in self.rows:
            if r.batch_size == batch_size and (r.who == who or (who == SPECBAND and r.who.startswith(SPECBAND))):
                return r
        raise KeyError((batch_size, who))

    def to_json(self) -> dict[str, Any]:
        """``data``, ``simulator``, ``sglang_source``, ``vllm_k``, ``notes`` and the rows."""
        return {
            "data": self.data,
            "simulator": self.simulator,
            "sglang_source": SGLANG_DEFAULTS_SOURCE,
            "vllm_k": VLLM_K,
            "notes": list(self.notes),
            "rows": [r.to_json() for r in self.rows],
        }


# ----------------------------------------------------------------------------- the controller
def _tier(batch_size: int, keys: Sequence[int]) -> int:
    """sglang's routing: the tier with the largest key <= the batch size (the smallest below all)."""
    return keys[max(0, bisect.bisect_right(keys, batch_size) - 1)]


def settle_adaptive(
    entry: Mapping[str, Any], initial_steps: int, accepted_drafts: Callable[[int], float | None]
) -> tuple[tuple[int, ...], list[str]]:
    """The steady state of sglang's ``AdaptiveStepSlot`` for one tier.

    The EMA of accepted drafts is taken equal to the mean accepted drafts of the step count the
    slot is on (what it converges to between updates); from there the slot moves as sglang's
    ``_recompute_params`` does: down while the EMA is at or below ``prev - 0.5 +
    down_hysteresis`` (``0.5 + down_hysteresis`` when the lower candidate is 0), else up while
    it is above ``current - 0.5 + up_hysteresis``; from 0 it probes the next candidate up.

    Args:
        entry: the tier's entry (``candidate_steps`` and optional knobs).
        initial_steps: ``--speculative-num-steps`` (a count not in the candidates starts at
            the middle candidate).
        accepted_drafts: step count -> mean accepted draft tokens per verify (accept length
            - 1) of the chain with that many steps, or ``None`` when unknown.

    Returns:
        the step counts it settles on (one; or the cycle it alternates over) and the moves,
        as text. An unknown acceptance stops the walk where it is (the text says so).
    """
    steps = sorted({int(s) for s in entry["candidate_steps"]})
    knobs = {k: entry.get(k, v) for k, v in SLOT_DEFAULTS.items()}
    down, up, ceiling_coeff = (
        float(knobs["down_hysteresis"]),
        float(knobs["up_hysteresis"]),
        float(knobs["ceiling_coeff"]),
    )
    current = initial_steps if initial_steps in steps else steps[len(steps) // 2]
    trace = [f"starts at {current}"]
    seen: list[int] = []
    while current not in seen:
        seen.append(current)
        i = steps.index(current)
        if current == 0:
            target = steps[min(i + 1, len(steps) - 1)]
            if target != current:
                trace.append(f"probes {target}")
        else:
            ema = accepted_drafts(current)
            if ema is None:
                trace.append(f"accept length at {current} steps unknown: stays")
                return (current,), trace
            j = i
            while j > 0 and ema <= (0.5 if steps[j - 1] == 0 else steps[j - 1] - 0.5) + down:
                j -= 1
            if j == i:
                while j < len(steps) - 1 and ema > steps[j] - 0.5 + up:
                    j += 1
            if ceiling_coeff > 0 and steps[j] <= current:
                ceiling = max(1, math.ceil(ema * ceiling_coeff))
                while j > 0 and steps[j] > ceiling:
                    j -= 1
            target = steps[j]
            if target != current:
                trace.append(f"accepted drafts {ema:.2f} at {current}: moves to {target}")
            else:
                lower = f"down at <= {(0.5 if steps[i - 1] == 0 else steps[i - 1] - 0.5) + down:.2f}" if i > 0 else ""
                upper = f"up above {steps[i] - 0.5 + up:.2f}" if i < len(steps) - 1 else ""
                bounds = ", ".join(b for b in (lower, upper) if b)
                trace.append(
                    f"accepted drafts {ema:.2f} at {current}: stays" + (f" (it moves {bounds})" if bounds else "")
                )
        if target == current:
            return (current,), trace
        current = target
    cycle = tuple(seen[seen.index(current) :])
    trace.append("alternates " + "/".join(map(str, cycle)))
    return cycle, trace


# ----------------------------------------------------------------------------- figures
_PROFILE_BY_HARDWARE = (
    ("rtx4060laptop", "rtx4060-laptop"),
    ("h100", "h100-sxm"),
    ("h200", "h200"),
    ("a100", "a100-sxm4-80gb"),
)


def _norm(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())


def _one(values: Sequence[Any]) -> Any:
    distinct = {v for v in values if v is not None}
    return next(iter(distinct)) if len(distinct) == 1 else None


def _bundled_pair(target: str | None, draft: str | None) -> tuple[str, str] | None:
    """Bundled config names whose ``_name_or_path`` are the rows' target and draft."""
    from specband.sim.hfconfig import bundled_model_configs, read_model_config

    names: dict[str, str] = {}
    for name in bundled_model_configs():
        data, _ = read_model_config(name)
        if isinstance(data.get("_name_or_path"), str):
            names[_norm(data["_name_or_path"])] = name
    if target is None or draft is None:
        return None
    t, d = names.get(_norm(target)), names.get(_norm(draft))
    return (t, d) if t and d else None


@dataclass
class _Simulator:
    model: Any
    label: str
    limit_w: float
    profile: str


def _simulator(
    profile: str | None,
    hardware: str | None,
    pair_names: tuple[str | None, str | None],
    workload: str | None,
    limit_w: float | None,
    emulated: bool = False,
) -> tuple[_Simulator | None, str | None]:
    """The performance model of the data's GPU and pair, or ``None`` and why not.

    Args:
        profile: the simulated rows' profile (``None``: found from ``hardware``).
        hardware: the rows' GPU name.
        pair_names: the rows' target and draft model names (matched to the bundled configs'
            ``_name_or_path``).
        workload: the rows' workload (``None``: the pair's default).
        limit_w: the rows' power limit, W (``None``: the profile's).
        emulated: the rows came from ``specband emulate``, whose pair is the bundled 1B one
            unless given configs (used when the rows' names match no bundled config).
    """
    from specband.sim.hfconfig import BUNDLED_DRAFT_CONFIG, BUNDLED_TARGET_CONFIG
    from specband.sim.model import build_model
    from specband.sim.power_capped import with_power_limit

    if profile is None:
        norm = _norm(hardware or "")
        profile = next((p for key, p in _PROFILE_BY_HARDWARE if key in norm), None)
    if profile is None:
        return None, "the rows' GPU has no simulator profile"
    pair = _bundled_pair(*pair_names)
    if pair is None and emulated:  # the emulator's own pair unless it was given configs
        pair = (BUNDLED_TARGET_CONFIG, BUNDLED_DRAFT_CONFIG)
    if pair is None:
        return None, "the rows' target/draft pair is not a bundled one"
    try:
        try:
            model = build_model(profile, target_config=pair[0], draft_config=pair[1], workload=workload)
        except ConfigError:  # a workload no acceptance profile names (the emulator's "builtin"): the pair's own
            model = build_model(profile, target_config=pair[0], draft_config=pair[1])
        limit = float(limit_w) if limit_w else float(model.power_limit_w)
        model = with_power_limit(model, limit)
    except ConfigError as exc:
        return None, f"the simulator could not be built ({exc})"
    return _Simulator(model, f"profile {profile}, {pair[0]} + {pair[1]}", limit, profile), None


@dataclass(frozen=True)
class _Point:
    """One config at one batch size: accept length (NaN: unknown), speed, power (W) and J/token."""

    accept: float
    speed: float
    power: float | None
    jpt: float | None
    source: str


class _Figures:
    """Figures per (batch size, config): the data's means (``measured``), else the simulator's."""

    def __init__(
        self,
        measured: Mapping[tuple[int, Action], _Point],
        *,
        kind: str,
        limit_w: float,
        temps: Mapping[int, float],
        sim: tuple[_Simulator | None, str | None],
        config: RewardConfig,
    ) -> None:
        self.measured, self.kind, self.limit_w, self.temps, self.config = measured, kind, limit_w, temps, config
        self.sim, self.no_sim = sim
        self.simulated_used = False

    def point(self, bs: int, action: Action) -> _Point | None:
        known = self.measured.get((bs, action))
        if known is not None:
            return known
        if self.sim is None:
            return None
        model = self.sim.model
        temp = self.temps.get(bs)
        if temp is None:
            temp = model.ambient_temp_c
            for _ in range(3):
                temp = model.steady_temp_c(model.predict(bs, action, temp).avg_power_w)
        pred = model.predict(bs, action, temp)
        if not pred.fits_in_memory:
            return None
        self.simulated_used = True
        cost = model.run_cost(bs, action, pred)
        return _Point(pred.accept_length, pred.speed_tok_s, pred.avg_power_w, cost.joules_per_token, "simulated")

    def accepted(self, bs: int) -> Callable[[int], float | None]:
        def at(steps: int) -> float | None:
            action = chain_action(steps)
            p = self.point(bs, action)
            if p is not None and not math.isnan(p.accept):
                return p.accept - 1.0
            if self.sim is not None:  # the data keeps no accept length (a policy folder's means)
                self.simulated_used = True
                return float(self.sim.model.accept_length(action)) - 1.0
            return None

        return at

    def figures(self, bs: int, actions: Sequence[Action]) -> ConfigFigures | None:
        """The figures of ``actions`` run in turn (equal numbers of batches on each)."""
        points = [self.point(bs, a) for a in actions]
        base = self.point(bs, BASELINE_ACTION)
        if any(p is None for p in points) or base is None:
            return None
        pts = [p for p in points if p is not None]
        accept = [p.accept if not math.isnan(p.accept) else 1.0 for p in pts]
        times = [a / p.speed for a, p in zip(accept, pts, strict=True)]
        speed = sum(accept) / sum(times)
        power = (
            None
            if any(p.power is None for p in pts)
            else sum(p.power * t for p, t in zip(pts, times, strict=True) if p.power is not None) / sum(times)
        )
        jpt = (
            None
            if any(p.jpt is None for p in pts)
            else sum(p.jpt * a for p, a in zip(pts, accept, strict=True) if p.jpt is not None) / sum(accept)
        )
        util = None if power is None else power / self.limit_w
        band, reward = "unknown", None
        if util is not None:
            band = "below" if util < self.config.band_low else ("above" if util > self.config.band_high else "in")
            w = self.config.energy_weight
            reward = band_score(util, self.config) ** w * throughput_score(speed, base.speed, self.config) ** (1 - w)
        elif all(a == BASELINE_ACTION for a in actions):
            reward = 0.0  # the baseline's speed term is 0 against itself, whatever its band
        sources = sorted({p.source for p in pts})
        source = " + ".join(
            s if s != "simulated" else f"simulated ({self.sim.profile if self.sim else '?'})" for s in sources
        )
        return ConfigFigures(speed, jpt, util, band, reward, source, "simulated" not in sources)


def _figures_of_sweep(sweep: Sweep, config: RewardConfig) -> _Figures:
    """:class:`_Figures` over a sweep's successful rows."""
    rows = [r for r in sweep.rows if r.trainable and r.speed_tok_s is not None]
    limits = [r.power_limit_watts for r in rows if r.power_limit_watts]
    limit = float(statistics.median(limits or [config.power_limit_w]))
    kind = "published" if sweep.format == "published_live" else (_one([r.provenance for r in rows]) or "mixed")
    groups: dict[tuple[int, Action], list[SweepRow]] = defaultdict(list)
    temps: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        groups[(r.batch_size, r.action)].append(r)
        if r.gpu_temp_c is not None:
            temps[r.batch_size].append(r.gpu_temp_c)
    measured = {}
    for (bs, action), group in groups.items():
        utils = [u for u in (r.utilization() for r in group) if u is not None]
        jpts = [float(r.raw["joules_per_token"]) for r in group if _positive(r.raw.get("joules_per_token"))]
        accepts = [r.accept_length for r in group if r.accept_length is not None]
        measured[(bs, action)] = _Point(
            statistics.fmean(accepts) if accepts else (1.0 if action == BASELINE_ACTION else math.nan),
            statistics.fmean(float(r.speed_tok_s or 0.0) for r in group),
            statistics.fmean(utils) * limit if utils else None,
            statistics.fmean(jpts) if jpts else None,
            f"{kind}, {len(group)} row(s)",
        )
    sim = _simulator(
        _one([r.raw.get("profile") for r in rows if r.provenance == "simulated"]),
        _one([r.raw.get("hardware") for r in rows]),
        (_one([r.raw.get("target_model") for r in rows]), _one([r.raw.get("draft_model") for r in rows])),
        _one([r.raw.get("workload") for r in rows]),
        limit,
        emulated=kind == "emulated",
    )
    return _Figures(
        measured,
        kind=kind,
        limit_w=limit,
        temps={b: statistics.fmean(t) for b, t in temps.items()},
        sim=sim,
        config=config,
    )


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


# ----------------------------------------------------------------------------- comparison
def compare_with_engine_defaults(
    sweep: Sweep,
    picks: Mapping[int, Action],
    *,
    algorithm: str = "lookup_table",
    config: RewardConfig = RewardConfig(),
    initial_steps: int | None = None,
) -> BaselineComparison:
    """specband's pick, sglang's default adaptive tiers and vLLM at :data:`VLLM_K`, per batch size.

    Args:
        sweep: the data (the figures are means over its successful rows).
        picks: batch size -> specband's pick there (e.g. from :func:`picks_of`).
        algorithm: the algorithm that made the picks (named in the table).
        config: the reward's constants (band, weights).
        initial_steps: sglang's ``--speculative-num-steps`` (default: the middle of the
            union of the default tiers' candidate steps, 3, as sglang resolves it).

    Returns:
        a :class:`BaselineComparison` (three rows per batch size of ``picks``).
    """
    return _compare(_figures_of_sweep(sweep, config), picks, algorithm, initial_steps, sweep_engine(sweep))


def _origin_engine(name: str | None) -> Engine:
    """The engine an origin names (``None``, or rows of several engines joined: the default engine's)."""
    return get_engine(name) if name in engine_names() else default_engine()


def sweep_engine(sweep: Sweep) -> Engine:
    """The engine the rows were measured with (:func:`specband.contract.record.row_engine`: the
    default engine's when they do not say)."""
    return _origin_engine(_one([row_engine(r.raw)[0] for r in sweep.rows]))


def compare_from_stats(
    stats: Mapping[int, Mapping[int, Any]],
    origin: Any,
    picks: Mapping[int, Action],
    *,
    algorithm: str = "lookup_table",
    config: RewardConfig = RewardConfig(),
    initial_steps: int | None = None,
) -> BaselineComparison:
    """:func:`compare_with_engine_defaults` from a policy folder's per-config means (its
    manifest's :class:`~specband.sweeps.origin.ActionStats`) instead of the rows: a folder keeps
    no accept lengths, so sglang's controller moves on the simulator's (the notes say so).

    Args:
        stats: batch size -> action index -> :class:`~specband.sweeps.origin.ActionStats`.
        origin: the folder's :class:`~specband.sweeps.origin.DataOrigin`.
        picks, algorithm, config, initial_steps: as :func:`compare_with_engine_defaults`.
    """
    from specband.contract.actions import EXTENDED_ACTIONS

    limit = float(origin.power_limit_w or config.power_limit_w)
    kind = origin.provenance
    measured = {}
    for bs, per in stats.items():
        for a, st in per.items():
            power = None if st.energy_utilization is None else st.energy_utilization * limit
            accept = 1.0 if a == 0 else math.nan
            measured[(bs, EXTENDED_ACTIONS[a])] = _Point(
                accept, st.speed_tok_s, power, st.joules_per_token, f"{kind}, {st.rows} row(s)"
            )
    sim = _simulator(origin.profile, origin.hardware, (origin.target_model, origin.draft_model), origin.workload, limit)
    figs = _Figures(measured, kind=kind, limit_w=limit, temps={}, sim=sim, config=config)
    comparison = _compare(figs, picks, algorithm, initial_steps, _origin_engine(origin.engine))
    note = "the folder keeps no accept lengths: sglang's controller moves on the simulator's"
    return BaselineComparison(comparison.rows, comparison.data, comparison.simulator, (*comparison.notes, note))


def _compare(
    figs: _Figures, picks: Mapping[int, Action], algorithm: str, initial_steps: int | None, engine: Engine
) -> BaselineComparison:
    """The comparison over ``figs`` (see :func:`compare_with_engine_defaults`)."""
    entries = {int(k): v for k, v in SGLANG_DEFAULT_ADAPTIVE_CONFIG.items()}
    keys = sorted(entries)
    union = sorted({int(s) for e in entries.values() for s in e["candidate_steps"]})
    start = union[len(union) // 2] if initial_steps is None else initial_steps
    rows: list[BaselineRow] = []
    for bs in sorted(picks):
        pick = picks[bs]
        rows.append(BaselineRow(bs, f"{SPECBAND} ({algorithm})", (pick,), figs.figures(bs, [pick]), "the pick"))
        tier = _tier(bs, keys)
        cycle, trace = settle_adaptive(entries[tier], start, figs.accepted(bs))
        actions = tuple(chain_action(s) for s in cycle)
        note = f"tier {tier} (candidate steps {entries[tier]['candidate_steps']}): " + ", ".join(trace)
        rows.append(BaselineRow(bs, SGLANG, actions, figs.figures(bs, actions), note))
        vllm = chain_action(VLLM_K)
        vnote = (
            "fixed K"
            if engine is VLLM_ENGINE  # the rows are vLLM's own runs of it
            else f"read as sglang's chain {vllm} from {engine.name} rows (vLLM's own speed differs)"
        )
        rows.append(BaselineRow(bs, VLLM, (vllm,), figs.figures(bs, [vllm]), vnote))
    notes = [
        f"sglang: default adaptive tiers and start ({start} steps) from {SGLANG_DEFAULTS_SOURCE}; "
        "steady state of its acceptance controller on this data's accept lengths",
        f"vLLM: num_speculative_tokens={VLLM_K} (vLLM has no default for an EAGLE3 head)",
    ]
    missing = [r for r in rows if r.figures is None]
    if missing:
        why = figs.no_sim or "the config does not fit in memory (simulated)"
        notes.append(f"{len(missing)} row(s) without figures: not in the data and not simulated ({why})")
    if figs.simulated_used and figs.sim is not None:
        errors = _simulator_errors(figs)
        text = f"rows marked simulated were not in the data: simulated on {figs.sim.label} at {figs.sim.limit_w:g} W"
        if errors:
            worst = max(errors)
            rows = [_widened(r, worst) for r in rows]
            text += (
                f"; on the data's own {len(errors)} configs its speed is off by {statistics.median(errors):.1%} "
                f"(median), {worst:.1%} at worst: the interval on a simulated speed"
            )
        notes.append(text)
    return BaselineComparison(
        tuple(rows), figs.kind, figs.sim.label if figs.sim and figs.simulated_used else None, tuple(notes)
    )


def _widened(row: BaselineRow, error: float) -> BaselineRow:
    """``row`` with a speed interval of +-``error`` (relative) when its figures are simulated."""
    f = row.figures
    if f is None or f.from_data:
        return row
    interval = (f.speed_tok_s * (1.0 - error), f.speed_tok_s * (1.0 + error))
    return replace(row, figures=replace(f, speed_interval=interval))


def _simulator_errors(figs: _Figures) -> list[float]:
    """The simulator's relative speed error on each of the data's own (batch size, config)s."""
    if figs.sim is None:
        return []
    errors = []
    for (bs, action), known in figs.measured.items():
        try:
            pred = figs.sim.model.predict(bs, action, figs.temps.get(bs, figs.sim.model.ambient_temp_c))
        except ConfigError:
            continue
        if known.speed > 0:
            errors.append(abs(pred.speed_tok_s / known.speed - 1.0))
    return errors


def picks_of(result: Any, algorithm: str | None = None) -> tuple[str, dict[int, Action]]:
    """specband's pick per batch size in an evaluation: ``algorithm``'s (default ``lookup_table``,
    what ``recommend`` answers with, else the first evaluated) modal pick over the splits, with
    the first feature kind, from the held-out result and its in-sample fallback.

    Args:
        result: a :class:`~specband.evaluation.results.EvaluationResult`.
        algorithm: the algorithm to take the picks of.

    Returns:
        the algorithm's name and batch size -> its pick.
    """
    from specband.contract.actions import EXTENDED_ACTIONS

    algos = list(result.algorithms)
    algo = algorithm or ("lookup_table" if "lookup_table" in algos else algos[0])
    picks: dict[int, Action] = {}
    for r in (result, result.in_sample):
        if r is None:
            continue
        fr = next(iter(r.features.values()))
        for bs, p in fr.picks.get(algo, {}).items():
            picks.setdefault(bs, EXTENDED_ACTIONS[p.pick])
    return algo, dict(sorted(picks.items()))


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def comparison_table(comparison: BaselineComparison) -> tuple[str, tuple[str, ...], list[list[str]], list[str]]:
    """The comparison as a table: title, headers, rows (one per contender and batch size) and
    the notes to print under it (sources, how each sglang config was reached)."""
    headers = ("bs", "who", "config", "tok/s", "J/token", "utilisation", "band", "reward", "figures from")
    rows = []
    for r in comparison.rows:
        f = r.figures
        if f is None:
            rows.append(
                [str(r.batch_size), r.who, r.config_text, "-", "-", "-", "-", "-", "not in the data, not simulated"]
            )
            continue
        band = {"in": "in band", "unknown": "-"}.get(f.band, f.band)
        rows.append(
            [
                str(r.batch_size),
                r.who,
                r.config_text,
                f"{f.speed_tok_s:.1f}"
                + ("" if f.speed_interval is None else f" [{f.speed_interval[0]:.1f}, {f.speed_interval[1]:.1f}]"),
                _cell(f.joules_per_token, ".4f"),
                _cell(f.energy_utilization, ".3f"),
                band,
                _cell(f.reward, ".3f"),
                f.source,
            ]
        )
    moves = [f"bs {r.batch_size}, sglang {r.note}" for r in comparison.rows if r.who == SGLANG]
    title = f"specband's pick against the engines' defaults ({comparison.data} data)"
    return title, headers, rows, [*comparison.notes, *moves]

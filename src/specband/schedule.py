"""Per-batch-size speculation schedules: the energy-band pick where the batch size moves.

A pick from ``specband recommend`` is for one batch size. A server whose batch size moves
with the traffic can instead be given a *schedule*: a speculation config per batch-size
tier, switched at runtime by the engine. This module builds one from a policy's reward
estimates and writes it in the engine's own format.

Engine formats (read from the engines' sources, not invented here):

* sglang 0.5.23, ``python/sglang/srt/speculative/adaptive_spec_params.py``
  (``_load_adaptive_config``, ``AdaptiveStepSlot``, ``AdaptiveSpeculativeParams``) and
  ``srt/arg_groups/speculative_hook.py`` (``_init_adaptive_speculative_params``): the file of
  ``--speculative-adaptive --speculative-adaptive-config FILE`` is a JSON object whose
  integer-string keys (``"1"``, ``"8"``, ...) are batch-size tier thresholds; each entry has
  ``candidate_steps`` (a non-empty list of ints >= 0; 0 turns speculation off) and optional
  controller knobs (``ema_alpha``, ``update_interval``, ``warmup_batches``,
  ``up_hysteresis``, ``down_hysteresis``, ``ceiling_coeff``); non-digit keys are defaults
  merged into every tier. A running batch size is routed to the tier with the largest key
  <= it (the smallest tier below all keys). Only EAGLE/EAGLE3 with topk 1 run adaptive
  (``adaptive_unsupported_reason``), draft tokens = steps + 1, and
  ``--speculative-num-steps`` must be one of the union of the candidate steps (default: its
  middle element).
* vLLM (``vllm-project/vllm``, ``vllm/config/speculative.py``: the
  ``SpeculativeConfig.num_speculative_tokens_per_batch_size`` field; rules in
  ``vllm/v1/spec_decode/dynamic/utils.py``, ``validate_and_normalize_dynamic_sd_schedule``
  and ``build_dynamic_sd_schedule_lookup``, commit 14b450ca590c): in ``--speculative-config``,
  ``num_speculative_tokens_per_batch_size`` is a non-empty list of ``[start, end, K]``
  inclusive batch-size ranges, positive, ``start <= end``, sorted and non-overlapping, the
  first starting at 1, ``K >= 0`` (0: no speculation); K is clipped to
  ``num_speculative_tokens`` (which must be > 0), a gap takes the previous range's K and
  batch sizes past the last range take the last K. vLLM's K counts draft tokens, i.e.
  sglang's steps for a topk-1 chain.

Only *chain* configs (topk 1, plus the baseline) can be scheduled: among the 19 contract
actions, (1,1,2), (3,1,4), (5,1,6) and (0,0,0). :func:`pick_chain_tiers` reports how far
the best chain config falls behind the best tree config (topk > 1) at each batch size.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specband.actions import ACTION_SETS, ACTIONS, EXTENDED_ACTIONS, NUM_ACTIONS, Action
from specband.errors import ConfigError
from specband.fileio import read_text_bounded
from specband.limits import MAX_CONFIG_FILE_BYTES, is_int

if TYPE_CHECKING:
    from specband.transfer import TransferCheck, UserSetup

__all__ = [
    "CHAIN_INDICES",
    "SGLANG_CONTROLLER_KEYS",
    "SGLANG_DEFAULT_ADAPTIVE_CONFIG",
    "TREE_INDICES",
    "AdaptiveController",
    "AdaptiveSlot",
    "PolicyScorer",
    "Tier",
    "TierPick",
    "chain_action",
    "chain_and_tree_indices",
    "check_sglang_adaptive_config",
    "check_vllm_schedule",
    "load_scorer",
    "merge_tiers",
    "pick_chain_tiers",
    "read_sglang_adaptive_config",
    "sglang_adaptive_config",
    "sglang_initial_steps",
    "sglang_schedule_flags",
    "validate_with_sglang",
    "vllm_speculative_config",
]

#: Indices of the chain configs (topk 1) and the baseline among the 19 actions.
CHAIN_INDICES: tuple[int, ...] = tuple(i for i, a in enumerate(ACTIONS) if a.is_baseline or a[1] == 1)
#: Indices of the tree configs (topk > 1).
TREE_INDICES: tuple[int, ...] = tuple(i for i in range(NUM_ACTIONS) if i not in CHAIN_INDICES)


def chain_and_tree_indices(num_actions: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """:data:`CHAIN_INDICES` and :data:`TREE_INDICES` of the first ``num_actions`` actions of
    :data:`~specband.actions.EXTENDED_ACTIONS` (19: the contract's; 44: the extended set's)."""
    actions = EXTENDED_ACTIONS[:num_actions]
    chain = tuple(i for i, a in enumerate(actions) if a.is_baseline or a[1] == 1)
    return chain, tuple(i for i in range(num_actions) if i not in chain)


#: Controller knobs of an sglang tier entry (``AdaptiveStepSlot.__init__``, sglang 0.5.23).
SGLANG_CONTROLLER_KEYS: tuple[str, ...] = (
    "ema_alpha",
    "update_interval",
    "warmup_batches",
    "up_hysteresis",
    "down_hysteresis",
    "ceiling_coeff",
)
#: Controller defaults when a key is absent (``AdaptiveStepSlot.__init__``, sglang 0.5.23).
_SLOT_DEFAULTS: dict[str, float] = {
    "ema_alpha": 0.2,
    "update_interval": 5,
    "warmup_batches": 10,
    "down_hysteresis": -0.25,
    "up_hysteresis": 0.0,
    "ceiling_coeff": 0,
}

#: sglang's built-in schedule, used without ``--speculative-adaptive-config``
#: (``DEFAULT_ADAPTIVE_CONFIG`` in ``srt/speculative/adaptive_spec_params.py``, sglang 0.5.23;
#: a test holds this copy to sglang's own). Chosen for acceptance, not energy.
SGLANG_DEFAULT_ADAPTIVE_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}


def chain_action(steps: int) -> Action:
    """The chain config with ``steps`` draft steps: ``(steps, 1, steps + 1)``, or the
    baseline ``(0, 0, 0)`` for 0 (what an sglang adaptive tier runs at that step count)."""
    return Action(0, 0, 0) if steps == 0 else Action(steps, 1, steps + 1)


# --------------------------------------------------------------------------- scores


@dataclass
class PolicyScorer:
    """A policy's reward estimate for every action at a batch size.

    Attributes:
        algorithm: model card algorithm name.
        source: where the policy came from (folder or the embedded default).
        manifest: the folder's :class:`~specband.artifacts.Manifest`.
        policy: the fitted policy, or ``None`` for ``lookup_table`` (observed means).
        lookup_means: batch size -> action index -> observed mean reward (lookup_table).
        measured_only: restrict every batch size to the actions measured there without
            failure (the manifest's ``allowed``), as ``specband recommend`` does.
        telemetry: ``(temp_c, mem_used_mb, util_pct)`` of the GPU, or ``None`` for the
            state the folder's picks were made from (as ``recommend --state``).
        notes: the loading notes (:attr:`specband.recommend.LoadedModels.notes`).
    """

    algorithm: str
    source: str
    manifest: Any
    policy: Any = None
    lookup_means: Mapping[int, Mapping[int, float]] | None = None
    measured_only: bool = True
    telemetry: tuple[float, float, float] | None = None
    notes: tuple[str, ...] = ()

    @property
    def batch_sizes(self) -> list[int]:
        """The measured batch sizes (the lookup table's, for a folder without a manifest)."""
        if self.manifest.batch_sizes:
            return list(self.manifest.batch_sizes)
        return sorted(self.lookup_means or ())

    def scores_at(self, batch_size: int) -> tuple[int, np.ndarray]:
        """``(measured batch size used, (19,) float64 estimated reward)``; NaN marks an
        action with no estimate or not allowed there.

        Raises:
            ConfigError: the folder knows no batch size to map ``batch_size`` to (pass
                ``--data`` for a folder without a manifest).
        """
        from specband.policies.files import nearest_batch_size

        known = self.batch_sizes
        if not known and self.policy is None:
            raise ConfigError(f"{self.source} knows no measured batch size; pass --data SWEEP")
        measured = nearest_batch_size(batch_size, known) if known else batch_size
        n = len(ACTION_SETS[self.manifest.action_set])
        if self.lookup_means is not None:
            row = self.lookup_means.get(measured, {})
            scores = np.array([row.get(i, math.nan) for i in range(n)], dtype=np.float64)
        else:
            state = np.asarray(self.manifest.state_for(batch_size, self.telemetry), dtype=np.float32)
            scores = np.array(self.policy.scores(state[None, :])[0], dtype=np.float64)
            scores[~np.isfinite(scores)] = math.nan
        allowed = self.manifest.allowed_indices(batch_size) if self.measured_only else None
        if allowed is not None:
            mask = np.zeros(n, dtype=bool)
            mask[list(allowed)] = True
            scores[~mask] = math.nan
        return measured, scores


def check_scorer_transfer(scorer: PolicyScorer, setup: UserSetup, *, allow: bool = False) -> TransferCheck:
    """:func:`specband.transfer.check_transfer` for a schedule's policy (the data behind
    ``scorer``), plus a note when that data is simulated.

    Raises:
        TransferError: the data is from another setup and ``allow`` is False.
    """
    from specband.transfer import TransferCheck, check_transfer

    label = "the embedded study policy" if scorer.source == "embedded" else scorer.source
    checked = check_transfer(scorer.manifest.origin, setup, allow=allow, source=label)
    origin = scorer.manifest.origin
    if origin is not None and origin.simulated:
        note = f"{label}: trained on SIMULATED rows; the schedule rests on a simulation, not a measurement"
        checked = TransferCheck(checked.differences, (*checked.warnings, note))
    return checked


def load_scorer(
    algo: str,
    models: Path | None,
    data_path: Path | None = None,
    *,
    measured_only: bool = True,
    trust_pickle: bool = False,
) -> PolicyScorer:
    """Load a policy the way ``specband recommend`` does (:func:`specband.recommend.load_models`:
    ``--models``, else ``./specband-models`` when it holds ``algo``, else the embedded
    default) and wrap it; the loading notes travel on the scorer (``notes``).

    Raises:
        ConfigError: unknown algorithm; ArtifactError: unreadable folder or an untrusted
        pickle; DataError: bad sweep.
    """
    from specband.recommend import load_models

    loaded = load_models(algo, models, data_path, trust_pickle=trust_pickle)
    source = "embedded" if loaded.folder is None else str(loaded.folder)
    return PolicyScorer(
        algo, source, loaded.manifest, loaded.policy, loaded.lookup_means, measured_only, notes=loaded.notes
    )


def _best(scores: np.ndarray, indices: Iterable[int]) -> int | None:
    """Index with the highest finite score among ``indices`` (ties: lowest index)."""
    candidates = [i for i in indices if not math.isnan(scores[i])]
    return max(candidates, key=lambda i: (scores[i], -i)) if candidates else None


# --------------------------------------------------------------------------- tiers


@dataclass(frozen=True)
class TierPick:
    """The chain pick at one batch size, beside the best tree config.

    Attributes:
        batch_size: the batch size asked for.
        measured_batch_size: the measured batch size its scores come from.
        chain: candidate chain action indices (the best first, then those within the
            margin, by score).
        chain_reward: estimated reward of the best chain config.
        tree_index: best tree config (topk > 1), or ``None`` when none is scored.
        tree_reward: its estimated reward.
        chain_scored: speculative chain configs (topk 1, steps > 0) with an estimate here
            (measured there, for ``measured_only`` scorers).
        best_chain_reward: the best of them, or ``None`` when there is none.
        engine: the engine the schedule is for (``"sglang"``: adaptive tiers; ``"vllm"``:
            a per-batch-size K), named in :attr:`off_reason`.
    """

    batch_size: int
    measured_batch_size: int
    chain: tuple[int, ...]
    chain_reward: float
    tree_index: int | None
    tree_reward: float | None
    chain_scored: int = 0
    best_chain_reward: float | None = None
    engine: str = "sglang"

    @property
    def off_reason(self) -> str | None:
        """Why the schedule turns speculation off at this batch size, or ``None`` when it
        speculates: no chain config scored (measured) there, or none above the baseline."""
        if self.best_steps != 0:
            return None
        if self.chain_scored == 0:
            runs = "vLLM's per-batch-size K runs" if self.engine == "vllm" else "sglang's adaptive tiers run"
            return (
                f"batch size {self.batch_size}: speculation off: no chain config (topk 1) was measured at batch "
                f"size {self.measured_batch_size}, and {runs} chains only"
            )
        behind = "" if self.best_chain_reward is None else f" (best chain {self.best_chain_reward:.4f}"
        behind += "" if not behind else f" vs baseline {self.chain_reward:.4f})"
        return (
            f"batch size {self.batch_size}: speculation off: none of the {self.chain_scored} chain config(s) "
            f"scores above the non-speculative baseline at batch size {self.measured_batch_size}{behind}"
        )

    @property
    def steps(self) -> tuple[int, ...]:
        """Sorted candidate step counts (0 = no speculation)."""
        return tuple(sorted({EXTENDED_ACTIONS[i][0] for i in self.chain}))

    @property
    def best_steps(self) -> int:
        """Step count of the best chain config."""
        return EXTENDED_ACTIONS[self.chain[0]][0]

    @property
    def chain_cost(self) -> float | None:
        """Reward the schedule gives up here: best tree minus best chain (<= 0 when the
        chain config is at least as good), or ``None`` without a tree estimate."""
        return None if self.tree_reward is None else self.tree_reward - self.chain_reward


def pick_chain_tiers(
    scorer: PolicyScorer, batch_sizes: Sequence[int] | None = None, margin: float = 0.0, *, engine: str = "sglang"
) -> list[TierPick]:
    """The best chain config per batch size (and those within ``margin`` of it).

    Args:
        scorer: the policy's estimates.
        batch_sizes: batch sizes to schedule (default: the measured ones).
        margin: reward units; chain configs scoring at least ``best - margin`` join the
            candidate set (sglang's acceptance controller moves inside it).
        engine: the engine the schedule is for (``"sglang"`` or ``"vllm"``; named in the
            picks' :attr:`TierPick.off_reason`).

    Raises:
        ConfigError: a negative margin or a non-positive batch size, or a batch size where
            no chain config (not even the baseline) has an estimate.
    """
    if not margin >= 0:
        raise ConfigError(f"--margin must be >= 0, got {margin}")
    sizes = sorted(set(batch_sizes or scorer.batch_sizes))
    if not sizes:
        raise ConfigError(f"{scorer.source} knows no measured batch size; pass --batch-sizes (or --data SWEEP)")
    if sizes[0] <= 0:
        raise ConfigError(f"--batch-sizes must be positive integers, got {sizes}")
    picks = []
    for bs in sizes:
        measured, scores = scorer.scores_at(bs)
        chains, trees = chain_and_tree_indices(len(scores))
        best = _best(scores, chains)
        if best is None:
            raise ConfigError(
                f"{scorer.algorithm} has no estimate for any chain config (topk 1) or the baseline at batch size {bs}"
            )
        near = [i for i in chains if i != best and not math.isnan(scores[i]) and scores[i] >= scores[best] - margin]
        chain = (best, *sorted(near, key=lambda i: (-scores[i], i)))
        tree = _best(scores, trees)
        spec_chain = [i for i in chains if i != 0 and not math.isnan(scores[i])]
        best_spec = _best(scores, spec_chain)
        picks.append(
            TierPick(
                bs,
                measured,
                chain,
                float(scores[best]),
                tree,
                None if tree is None else float(scores[tree]),
                chain_scored=len(spec_chain),
                best_chain_reward=None if best_spec is None else float(scores[best_spec]),
                engine=engine,
            )
        )
    return picks


@dataclass(frozen=True)
class Tier:
    """One schedule tier: batch sizes ``start`` .. ``end`` (inclusive; ``None``: no end).

    Attributes:
        start: first batch size of the tier (the sglang key; the first tier starts at 1).
        end: last batch size, ``None`` for the last tier.
        steps: sorted candidate step counts.
        best_steps: the step count of the best chain config (vLLM's K).
        batch_sizes: the scheduled batch sizes the tier merges.
    """

    start: int
    end: int | None
    steps: tuple[int, ...]
    best_steps: int
    batch_sizes: tuple[int, ...] = field(default=())


def merge_tiers(picks: Sequence[TierPick]) -> list[Tier]:
    """Merge consecutive batch sizes with the same candidate set into tiers.

    A batch size between two scheduled ones belongs to the nearer one (the larger on a
    tie), as ``specband recommend`` maps an unmeasured batch size: the boundary between
    scheduled ``a < b`` is ``ceil((a + b) / 2)``. The first tier starts at 1.
    """
    tiers: list[Tier] = []
    previous: TierPick | None = None
    for pick in picks:
        start = 1 if previous is None else (previous.batch_size + pick.batch_size + 1) // 2
        key = (pick.steps, pick.best_steps)
        if tiers and (tiers[-1].steps, tiers[-1].best_steps) == key:
            last = tiers[-1]
            tiers[-1] = Tier(last.start, None, last.steps, last.best_steps, (*last.batch_sizes, pick.batch_size))
        else:
            if tiers:
                last = tiers[-1]
                tiers[-1] = Tier(last.start, start - 1, last.steps, last.best_steps, last.batch_sizes)
            tiers.append(Tier(start, None, pick.steps, pick.best_steps, (pick.batch_size,)))
        previous = pick
    return tiers


# --------------------------------------------------------------------------- sglang


def sglang_adaptive_config(tiers: Sequence[Tier], knobs: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``--speculative-adaptive-config`` JSON object (sglang 0.5.23 format, see the
    module docstring): one ``"<start>"`` key per tier with ``candidate_steps``; ``knobs``
    (controller keys of :data:`SGLANG_CONTROLLER_KEYS`) go into every tier.

    Raises:
        ConfigError: an unknown knob.
    """
    extra = dict(knobs or {})
    unknown = sorted(set(extra) - set(SGLANG_CONTROLLER_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown sglang adaptive knob(s) {', '.join(unknown)}; expected {', '.join(SGLANG_CONTROLLER_KEYS)}"
        )
    obj = {str(t.start): {"candidate_steps": list(t.steps), **extra} for t in tiers}
    check_sglang_adaptive_config(obj)
    return obj


def check_sglang_adaptive_config(obj: Any, where: str = "adaptive config") -> dict[int, dict[str, Any]]:
    """Check an sglang adaptive config with the rules of sglang 0.5.23's
    ``_load_adaptive_config``, and return ``{tier key: entry}`` (``{**defaults, **entry}``).

    Raises:
        ConfigError: not a JSON object; a digit key whose ``candidate_steps`` is not a
            non-empty list of ints >= 0; no digit key (the message names ``where`` and the key).
    """
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    defaults = {k: v for k, v in obj.items() if not k.isdigit()}
    entries: dict[int, dict[str, Any]] = {}
    for key, entry in obj.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if not (isinstance(steps, list) and steps and all(is_int(s) and s >= 0 for s in steps)):
            raise ConfigError(
                f"{where}: tier {key!r}: candidate_steps must be a non-empty list of ints >= 0, got {steps!r}"
            )
        entries[int(key)] = {**defaults, **entry}
    if not entries:
        raise ConfigError(f'{where}: no batch-size tier (an integer-string key such as "1"); keys: {list(obj)}')
    return entries


def read_sglang_adaptive_config(path: str | Path | None) -> dict[int, dict[str, Any]]:
    """Read and check an sglang adaptive config file (``None``: sglang's built-in default).

    Raises:
        ConfigError: unreadable file, bad JSON (with line) or a rule broken.
    """
    if path is None:
        return check_sglang_adaptive_config(SGLANG_DEFAULT_ADAPTIVE_CONFIG, "sglang default adaptive config")
    try:
        text = read_text_bounded(path, limit=MAX_CONFIG_FILE_BYTES, kind="JSON schedule file", error=ConfigError)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: line {exc.lineno}: not JSON ({exc.msg})") from None
    except (RecursionError, ValueError):
        raise ConfigError(f"{path}: not JSON (nested too deeply, or a number too long)") from None
    return check_sglang_adaptive_config(obj, str(path))


def validate_with_sglang(path: str | Path) -> bool:
    """Load ``path`` with sglang's own ``_load_adaptive_config`` when sglang is importable.

    Returns:
        True when sglang accepted it, False when sglang is not importable.

    Raises:
        ConfigError: sglang rejected the file (its message).
    """
    try:
        from sglang.srt.speculative.adaptive_spec_params import _load_adaptive_config
    except ImportError:
        return False
    try:
        _load_adaptive_config(str(path))
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise ConfigError(f"{path}: sglang's _load_adaptive_config rejects it: {exc}") from None
    return True


def sglang_initial_steps(entries: Mapping[int, Mapping[str, Any]]) -> int:
    """The ``--speculative-num-steps`` sglang picks for a schedule when none is given: the
    middle element of the union of every tier's ``candidate_steps``
    (``_init_adaptive_speculative_params``, sglang 0.5.23)."""
    union = sorted({int(s) for e in entries.values() for s in e["candidate_steps"]})
    return union[len(union) // 2]


def sglang_schedule_flags(
    config_path: str | Path, entries: Mapping[int, Mapping[str, Any]], draft_model: str | None
) -> list[str]:
    """sglang launch flags for adaptive speculation with a schedule file: EAGLE3, topk 1,
    ``--speculative-num-steps`` = :func:`sglang_initial_steps` and draft tokens = steps + 1
    (what sglang resolves itself, written out so the command line says it).

    Raises:
        ConfigError: the schedule never speculates (every candidate is 0).
    """
    steps = sglang_initial_steps(entries)
    if all(int(s) == 0 for e in entries.values() for s in e["candidate_steps"]):
        raise ConfigError(
            f"{config_path}: every tier's candidate_steps is [0]: the schedule never speculates; launch without it"
        )
    flags = ["--speculative-algorithm", "EAGLE3"]
    if draft_model is not None:
        flags += ["--speculative-draft-model-path", draft_model]
    return flags + [
        "--speculative-num-steps",
        str(steps),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(steps + 1),
        "--speculative-adaptive",
        "--speculative-adaptive-config",
        str(config_path),
    ]


# --------------------------------------------------------------------------- sglang's controller


class AdaptiveSlot:
    """One tier's step controller, as sglang 0.5.23's ``AdaptiveStepSlot``
    (``srt/speculative/adaptive_spec_params.py``): an EMA of accepted draft tokens per
    request, updated every verify while speculating; after ``warmup_batches`` batches,
    every ``update_interval`` batches it moves down the sorted candidate steps while the
    EMA is at or below ``prev - 0.5 + down_hysteresis`` (``0.5 + down_hysteresis`` when the
    lower candidate is 0), else up while it is above ``current - 0.5 + up_hysteresis``;
    from 0 it probes the next candidate up. ``ceiling_coeff > 0`` caps a non-rising target
    at ``max(1, ceil(ema * ceiling_coeff))``. A test holds it to sglang's class.

    Args:
        initial_steps: ``--speculative-num-steps``; a step count not in the candidates
            starts at the middle candidate.
        cfg: the tier entry (``candidate_steps`` and optional knobs).
    """

    def __init__(self, initial_steps: int, cfg: Mapping[str, Any]) -> None:
        self.candidate_steps = sorted({int(s) for s in cfg["candidate_steps"]})
        knobs = {k: cfg.get(k, v) for k, v in _SLOT_DEFAULTS.items()}
        self.ema_alpha = float(knobs["ema_alpha"])
        self.update_interval = int(knobs["update_interval"])
        self.warmup_batches = int(knobs["warmup_batches"])
        self.down_hysteresis = float(knobs["down_hysteresis"])
        self.up_hysteresis = float(knobs["up_hysteresis"])
        self.ceiling_coeff = float(knobs["ceiling_coeff"])
        middle = self.candidate_steps[len(self.candidate_steps) // 2]
        self.current_steps = initial_steps if initial_steps in self.candidate_steps else middle
        self.ema_accept_len = float(self.current_steps - 1)
        self.batches = 0

    def update(self, accepted_drafts: Sequence[int]) -> bool:
        """Feed one verify's accepted draft tokens per request; True when the step count changed."""
        if not accepted_drafts:
            return False
        if self.current_steps > 0:
            mean = sum(accepted_drafts) / len(accepted_drafts)
            self.ema_accept_len += self.ema_alpha * (mean - self.ema_accept_len)
        self.batches += 1
        if self.batches <= self.warmup_batches or (self.batches - self.warmup_batches) % self.update_interval:
            return False
        target = self._target()
        changed = target != self.current_steps
        self.current_steps = target
        return changed

    def _target(self) -> int:
        steps, old = self.candidate_steps, self.current_steps
        i = steps.index(old)
        if old == 0:
            target = steps[min(i + 1, len(steps) - 1)]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return target
        start = i
        while (
            i > 0 and self.ema_accept_len <= (0.5 if steps[i - 1] == 0 else steps[i - 1] - 0.5) + self.down_hysteresis
        ):
            i -= 1
        if i == start:
            while i < len(steps) - 1 and self.ema_accept_len > steps[i] - 0.5 + self.up_hysteresis:
                i += 1
        if self.ceiling_coeff > 0 and steps[i] <= old:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            while i > 0 and steps[i] > ceiling:
                i -= 1
        return steps[i]


class AdaptiveController:
    """Routes a running batch size to its tier's :class:`AdaptiveSlot`, as sglang 0.5.23's
    ``AdaptiveSpeculativeParams`` without CUDA-graph padding: the tier with the largest
    key <= the batch size, the smallest tier below every key.

    Args:
        entries: tier key -> entry, from :func:`check_sglang_adaptive_config`.
        initial_steps: ``--speculative-num-steps``.
    """

    def __init__(self, entries: Mapping[int, Mapping[str, Any]], initial_steps: int) -> None:
        self.keys = sorted(entries)
        self.slots = {k: AdaptiveSlot(initial_steps, entries[k]) for k in self.keys}

    def slot_for(self, batch_size: int) -> AdaptiveSlot:
        """The slot serving ``batch_size``."""
        return self.slots[self.keys[max(0, bisect.bisect_right(self.keys, batch_size) - 1)]]

    def steps_for(self, batch_size: int) -> int:
        """The step count the engine runs at ``batch_size`` now."""
        return self.slot_for(batch_size).current_steps

    def on_verify(self, accepted_drafts: Sequence[int], batch_size: int) -> int | None:
        """Feed a verify's accepted drafts to the batch size's slot; the new step count
        when it switched, else ``None``."""
        slot = self.slot_for(batch_size)
        return slot.current_steps if slot.update(accepted_drafts) else None


# --------------------------------------------------------------------------- vLLM


def vllm_speculative_config(tiers: Sequence[Tier], draft_model: str | None, method: str = "eagle3") -> dict[str, Any]:
    """The ``--speculative-config`` JSON object for vLLM with a per-batch-size schedule:
    ``method``, ``model`` (when given), ``num_speculative_tokens`` = the largest K and
    ``num_speculative_tokens_per_batch_size`` = ``[[start, end, K], ...]`` (the last range
    ends at its last scheduled batch size; vLLM keeps the last K past it).

    Raises:
        ConfigError: every tier has K = 0 (vLLM needs ``num_speculative_tokens`` > 0:
            run it without ``--speculative-config`` then).
    """
    ranges = [[t.start, t.end if t.end is not None else max(t.batch_sizes[-1], t.start), t.best_steps] for t in tiers]
    max_k = max(r[2] for r in ranges)
    if max_k <= 0:
        raise ConfigError(
            "the schedule never speculates (K = 0 at every batch size): run vLLM without --speculative-config"
        )
    obj: dict[str, Any] = {"method": method}
    if draft_model is not None:
        obj["model"] = draft_model
    obj["num_speculative_tokens"] = max_k
    obj["num_speculative_tokens_per_batch_size"] = ranges
    check_vllm_schedule(ranges, max_k)
    return obj


def check_vllm_schedule(schedule: Any, num_speculative_tokens: Any) -> list[tuple[int, int, int]]:
    """Check a 3-item ``num_speculative_tokens_per_batch_size`` with vLLM's rules
    (``validate_and_normalize_dynamic_sd_schedule`` and ``build_dynamic_sd_schedule_lookup``
    in ``vllm/v1/spec_decode/dynamic/utils.py``, commit 14b450ca590c; see the module
    docstring) and return it sorted.

    Raises:
        ConfigError: the rule broken, in vLLM's terms.
    """
    if not is_int(num_speculative_tokens) or num_speculative_tokens <= 0:
        raise ConfigError(f"num_speculative_tokens must be an int > 0, got {num_speculative_tokens!r}")
    if not isinstance(schedule, list) or not schedule:
        raise ConfigError("num_speculative_tokens_per_batch_size must be a non-empty list of [start, end, K]")
    parsed = []
    for entry in schedule:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3 or not all(is_int(v) for v in entry):
            raise ConfigError(f"each entry must be [start, end, K] with ints, got {entry!r}")
        start, end, k = entry
        if start <= 0 or end <= 0:
            raise ConfigError(f"batch-size range ({start}, {end}) must be positive")
        if start > end:
            raise ConfigError(f"batch-size range start must be <= end for {entry!r}")
        if k < 0:
            raise ConfigError(f"K must be >= 0, got {k}")
        parsed.append((start, end, k))
    parsed.sort()
    previous_end = 0
    for start, end, _ in parsed:
        if start <= previous_end:
            raise ConfigError("batch-size ranges must be non-overlapping and sorted")
        previous_end = end
    if parsed[0][0] != 1:
        raise ConfigError("the first batch-size range must start at 1")
    return parsed

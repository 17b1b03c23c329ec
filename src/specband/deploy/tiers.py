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

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specband.artifacts.load import load_models
from specband.contract.actions import (
    CONTRACT_SET,
    EXTENDED_ACTIONS,
    ActionSet,
    chain_and_tree_indices,
)
from specband.core.batchlist import nearest_batch_size
from specband.core.errors import ConfigError
from specband.engines.base import Engine
from specband.engines.schedule_files import Tier

if TYPE_CHECKING:
    from specband.artifacts.load import ModelFolder

__all__ = [
    "PolicyScorer",
    "TierPick",
    "load_scorer",
    "merge_tiers",
    "pick_chain_tiers",
]


# --------------------------------------------------------------------------- scores


@dataclass
class PolicyScorer:
    """A policy's reward estimate for every action at a batch size.

    Attributes:
        algorithm: model card algorithm name.
        source: where the policy came from (folder or the embedded default).
        manifest: the folder's :class:`~specband.artifacts.folder.Manifest`.
        policy: the fitted policy, or ``None`` for ``lookup_table`` (observed means).
        lookup_means: batch size -> action index -> observed mean reward (lookup_table).
        measured_only: restrict every batch size to the actions measured there without
            failure (the manifest's ``allowed``), as ``specband recommend`` does.
        telemetry: ``(temp_c, mem_used_mb, util_pct)`` of the GPU, or ``None`` for the
            state the folder's picks were made from (as ``recommend --state``).
        notes: the loading notes (:attr:`specband.artifacts.load.LoadedModels.notes`).
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

        known = self.batch_sizes
        if not known and self.policy is None:
            raise ConfigError(f"{self.source} knows no measured batch size; pass --data SWEEP")
        measured = nearest_batch_size(batch_size, known) if known else batch_size
        n = len(self.manifest.action_set)
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


def load_scorer(
    algo: str,
    models: str | Path | ModelFolder | None,
    data_path: str | Path | None = None,
    *,
    measured_only: bool = True,
    trust_pickle: bool = False,
    action_set: ActionSet = CONTRACT_SET,
) -> PolicyScorer:
    """Load a policy the way ``specband recommend`` does (:func:`specband.artifacts.load.load_models`:
    ``--models`` (a folder, or a :class:`~specband.artifacts.load.ModelFolder` opened already),
    else ``./specband-models`` when it holds ``algo``, else the embedded default), read
    against ``action_set`` (the command's ``--actions``), and wrap it; the loading notes
    travel on the scorer (``notes``).

    Raises:
        ConfigError: unknown algorithm; ArtifactError: unreadable folder or an untrusted
        pickle; DataError: bad sweep.
    """

    loaded = load_models(algo, models, data_path, trust_pickle=trust_pickle, action_set=action_set)
    source = loaded.source
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
        engine: the engine the schedule is for (sglang: adaptive tiers; vLLM: a per-batch-size
            K), named in :attr:`off_reason` (:attr:`specband.engines.base.Engine.schedule_runs`).
    """

    batch_size: int
    measured_batch_size: int
    chain: tuple[int, ...]
    chain_reward: float
    tree_index: int | None
    tree_reward: float | None
    engine: Engine
    chain_scored: int = 0
    best_chain_reward: float | None = None

    @property
    def off_reason(self) -> str | None:
        """Why the schedule turns speculation off at this batch size, or ``None`` when it
        speculates: no chain config scored (measured) there, or none above the baseline."""
        if self.best_steps != 0:
            return None
        if self.chain_scored == 0:
            runs = self.engine.schedule_runs
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
    scorer: PolicyScorer, batch_sizes: Sequence[int] | None = None, margin: float = 0.0, *, engine: Engine
) -> list[TierPick]:
    """The best chain config per batch size (and those within ``margin`` of it).

    Args:
        scorer: the policy's estimates.
        batch_sizes: batch sizes to schedule (default: the measured ones).
        margin: reward units; chain configs scoring at least ``best - margin`` join the
            candidate set (sglang's acceptance controller moves inside it).
        engine: the engine the schedule is for (named in the picks' :attr:`TierPick.off_reason`).

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


# --------------------------------------------------------------------------- sglang's controller


# --------------------------------------------------------------------------- vLLM

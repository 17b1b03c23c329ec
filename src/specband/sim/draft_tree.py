"""Accept length of an EAGLE3 draft tree: per-depth, per-rank acceptance over the tree that
sglang builds for ``(speculative_num_steps, speculative_eagle_topk,
speculative_num_draft_tokens)``.

Tree (sglang ``speculative/eagle_utils.py``: ``select_top_k_tokens`` and
``organize_draft_results``; EAGLE-2, Li et al. 2024, "dynamic draft trees"): depth 1 holds
the root's ``topk`` best candidates; at each further depth the ``topk`` best nodes of the
previous depth (by path score) are expanded by ``topk`` children each, and all ``topk**2``
children are candidates; after ``steps`` depths the ``num_draft_tokens - 1`` best candidates
by path score are verified by the target (the root, the last accepted token, makes up the
``num_draft_tokens``-th).

Acceptance (greedy verification, temperature 0): the target's token at each depth is one
token, so the expected number of accepted draft tokens is the sum over verified nodes of the
probability that the whole path matches, and accept length = 1 + that sum, within
``[1, steps + 1]``. The probability that the target's token at depth ``d`` is the draft's
rank-``j`` candidate, given the path so far matched, is

* ``first_token_accept * depth_decay ** (d - 1)`` for rank 1;
* that times ``rank2_ratio * alt_depth_decay ** (d - 1) * rank_decay ** (j - 2)`` for rank ``j >= 2``;
* times ``off_track_factor`` once the path has taken any rank ``>= 2`` candidate (positions
  where the draft's first guess was wrong are followed by hard positions);
* for a chain draft (``topk == 1``), times ``chain_factor`` at depths ``>= 2``: an empirical
  correction, fitted to the one published chain row deeper than 1 ((3,1,4): 2.039, where the
  tree parameters predict 2.11); chain drafts measuring below what independent per-depth
  acceptance predicts is also reported for EAGLE itself (SafeAILab/EAGLE issue 132).

The draft is taken as calibrated (its path scores order nodes like these probabilities).
The seven numbers are fitted to published accept lengths (:mod:`specband.sim.calibrate`).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from functools import lru_cache

from specband.contract.actions import Action
from specband.core.errors import ConfigError
from specband.core.limits import is_finite_number

__all__ = ["AcceptParams", "accept_length", "tree_node_values"]


@dataclass(frozen=True)
class AcceptParams:
    """Parameters of the per-depth acceptance model (see the module docstring).

    Attributes:
        first_token_accept: P(target token = draft's top-1 at depth 1), in (0, 1).
        depth_decay: ratio of top-1 acceptance between consecutive depths, in (0, 1.5].
        rank2_ratio: rank-2 acceptance relative to rank 1 at depth 1, in [0, 1].
        rank_decay: ratio between consecutive ranks from rank 2 on, in [0, 1].
        alt_depth_decay: per-depth factor on the rank >= 2 ratio, in [0, 1.5].
        off_track_factor: factor on acceptance after a path took a rank >= 2 node, in [0, 1].
        chain_factor: factor on depth >= 2 acceptance of ``topk == 1`` chains, in [0, 1.5].

    Raises:
        ConfigError: a value outside its range, or rank probabilities at a depth summing
            above 1.
    """

    first_token_accept: float = 0.59
    depth_decay: float = 0.95
    rank2_ratio: float = 0.2
    rank_decay: float = 0.8
    alt_depth_decay: float = 0.55
    off_track_factor: float = 0.55
    chain_factor: float = 1.0

    def __post_init__(self) -> None:
        bounds = {
            "first_token_accept": (1e-6, 0.999),
            "depth_decay": (1e-6, 1.5),
            "rank2_ratio": (0.0, 1.0),
            "rank_decay": (0.0, 1.0),
            "alt_depth_decay": (0.0, 1.5),
            "off_track_factor": (0.0, 1.0),
            "chain_factor": (0.0, 1.5),
        }
        for name, (lo, hi) in bounds.items():
            value = getattr(self, name)
            if not is_finite_number(value):
                raise ConfigError(f"acceptance '{name}' must be a finite number, got {value!r}")
            if not lo <= value <= hi:
                raise ConfigError(f"acceptance '{name}' must be in [{lo:g}, {hi:g}], got {value!r}")


def _rank_prob(p: tuple[float, ...], depth: int, rank: int, off_track: bool, chain: bool) -> float:
    a1, decay, b, c, rho, h, chain_factor = p
    base = a1 * decay ** (depth - 1)
    if chain and depth > 1:
        base *= chain_factor
    if off_track:
        base *= h
    if rank > 1:
        base *= b * rho ** (depth - 1) * c ** (rank - 2)
    return min(base, 1.0)


@lru_cache(maxsize=4096)
def _node_values(p: tuple[float, ...], steps: int, topk: int) -> tuple[float, ...]:
    chain = topk == 1
    level = [(_rank_prob(p, 1, j, False, chain), j > 1) for j in range(1, topk + 1)]
    values = [v for v, _ in level]
    for depth in range(2, steps + 1):
        beam = sorted(level, key=lambda node: -node[0])[:topk]
        level = [
            (score * _rank_prob(p, depth, j, off, chain), off or j > 1)
            for score, off in beam
            for j in range(1, topk + 1)
        ]
        values.extend(v for v, _ in level)
    values.sort(reverse=True)
    return tuple(values)


def tree_node_values(action: Action | tuple[int, int, int], params: AcceptParams) -> tuple[float, ...]:
    """Path-match probabilities of every candidate node of the draft tree, best first.

    Args:
        action: ``(steps, topk, num_draft_tokens)``; the baseline has no nodes.
        params: acceptance parameters.

    Returns:
        ``topk + (steps - 1) * topk**2`` probabilities in [0, 1] (empty for the baseline).
    """
    steps, topk, _ = action
    if steps == 0 or topk == 0:
        return ()
    return _node_values(astuple(params), int(steps), int(topk))


def accept_length(action: Action | tuple[int, int, int], params: AcceptParams) -> float:
    """Expected tokens accepted per verify step (bonus token included), in ``[1, steps + 1]``.

    Args:
        action: ``(steps, topk, num_draft_tokens)``; ``(0, 0, 0)`` gives 1.
        params: acceptance parameters.

    Source: the tree construction of sglang ``eagle_utils.py`` (see the module docstring).
    """
    steps, _, draft_tokens = action
    values = tree_node_values(action, params)
    total = 1.0 + sum(values[: max(0, int(draft_tokens) - 1)])
    return min(max(total, 1.0), float(steps) + 1.0)

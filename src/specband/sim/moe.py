"""Mixture of experts: how many experts' weights a forward pass reads.

A mixture-of-experts layer routes every token to ``k`` of its ``E`` routed experts (its
``top-k``) and, where the model has them, through shared experts that every token uses. The
fused MoE kernels of sglang and vLLM (``fused_moe``: one grouped GEMM over the experts that
received at least one token) stream the whole weight matrix of every expert that at least one
token of the batch was routed to, and none of the others. So a forward over ``T`` tokens reads

    shared experts + D(T) routed experts per MoE layer,

where ``D(T)`` is the number of *distinct* experts the ``T x k`` routings touch. A dense model
reads the same weights whatever ``T`` is; an MoE model reads more the more tokens a step
verifies: at batch size 8 a speculative verify of 8 draft tokens routes 64 tokens, not 8.

Routing model (an assumption, stated): each token picks ``k`` distinct experts uniformly at
random, independently of the other tokens, so an expert is missed by one token with probability
``1 - k/E`` and

    D(T) = E x (1 - (1 - k/E) ** T),

which is ``k`` at ``T = 1`` and tends to ``E``. Real routers are skewed (some experts are hot,
and the tokens of one sequence, such as the draft tokens a step verifies, tend to share experts),
which makes ``D(T)`` *smaller* than this; no skew parameter is fitted (the shared measurements,
two models at one batch size, cannot separate a skew from the kernel's efficiency), so uniform
routing is an upper bound on the experts read. Source of the kernel behaviour: sglang
``srt/layers/moe/fused_moe_triton`` and vLLM ``model_executor/layers/fused_moe`` (the expert
loop skips experts with no token; ``moe_align_block_size`` pads each used expert to a block).
"""

from __future__ import annotations

from dataclasses import dataclass

from specband.core.errors import ConfigError
from specband.core.limits import is_finite_number, is_int

__all__ = ["MoESpec", "expected_distinct_experts"]


def expected_distinct_experts(tokens: float, experts: int, top_k: int) -> float:
    """Expected number of distinct routed experts that ``tokens`` routings of ``top_k`` each touch,
    under uniform independent routing (see the module docstring).

    Args:
        tokens: tokens routed (``>= 0``; a verify of ``bs x num_draft_tokens`` tokens).
        experts: routed experts ``E`` (``>= 1``).
        top_k: experts per token ``k`` (``1 <= k <= E``).

    Returns:
        ``E x (1 - (1 - k/E) ** tokens)``, in ``[0, E]``; ``k`` for one token.

    Raises:
        ConfigError: ``k`` outside ``[1, E]`` or negative tokens.
    """
    if not (is_int(experts) and is_int(top_k) and 1 <= top_k <= experts):
        raise ConfigError(f"experts per token must be between 1 and the expert count ({experts}), got {top_k!r}")
    if not (is_finite_number(tokens) and tokens >= 0):
        raise ConfigError(f"tokens must be a number >= 0, got {tokens!r}")
    if top_k == experts:
        return float(experts) if tokens > 0 else 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass(frozen=True)
class MoESpec:
    """The routed experts of a mixture-of-experts model.

    Attributes:
        num_experts: routed experts per MoE layer ``E`` (config ``num_experts``,
            ``num_local_experts`` or ``n_routed_experts``).
        experts_per_token: experts each token is routed to ``k`` (``num_experts_per_tok``).
        moe_layers: decoder layers whose MLP is an MoE layer.
        expert_bytes: weight bytes of one routed expert in one layer (gate, up and down
            projections), B.
        expert_intermediate_size: a routed expert's intermediate size (``moe_intermediate_size``,
            or Llama-4's and Mixtral's ``intermediate_size``).
        shared_experts: shared experts per MoE layer (always read; their bytes are in the model's
            dense part).

    Raises:
        ConfigError: from ``__post_init__`` on a non-positive count or ``k > E``.
    """

    num_experts: int
    experts_per_token: int
    moe_layers: int
    expert_bytes: float
    expert_intermediate_size: int
    shared_experts: int = 0

    def __post_init__(self) -> None:
        for name in ("num_experts", "experts_per_token", "moe_layers", "expert_intermediate_size"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ConfigError(f"MoE spec: {name} must be an integer >= 1, got {value!r}")
        if self.experts_per_token > self.num_experts:
            raise ConfigError(
                f"MoE spec: {self.experts_per_token} experts per token is more than the {self.num_experts} experts"
            )
        if not (is_finite_number(self.expert_bytes) and self.expert_bytes > 0):
            raise ConfigError(f"MoE spec: expert_bytes must be > 0, got {self.expert_bytes!r}")
        if not is_int(self.shared_experts) or self.shared_experts < 0:
            raise ConfigError(f"MoE spec: shared_experts must be an integer >= 0, got {self.shared_experts!r}")

    def distinct_experts(self, tokens: float) -> float:
        """Expected distinct routed experts per MoE layer a forward over ``tokens`` tokens reads."""
        return expected_distinct_experts(tokens, self.num_experts, self.experts_per_token)

    def extra_read_bytes(self, tokens: float) -> float:
        """Routed-expert bytes a forward over ``tokens`` tokens reads beyond one token's ``k``
        experts (all MoE layers, all ranks together), B; 0 for one token."""
        if tokens <= 1:
            return 0.0
        return self.moe_layers * (self.distinct_experts(tokens) - self.experts_per_token) * self.expert_bytes

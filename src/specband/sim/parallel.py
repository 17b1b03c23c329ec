"""Tensor parallelism: how ``--tp N`` splits a model over N GPUs, what it costs, and which
degrees the engines accept.

Megatron-style tensor parallelism, as sglang and vLLM run it (``QKVParallelLinear``,
``ColumnParallelLinear``/``RowParallelLinear``, ``VocabParallelEmbedding``/``ParallelLMHead``,
fused MoE with ``moe_tp_size = tp``):

* every linear layer is split N ways (attention by heads, MLPs and experts by intermediate
  size, the embedding and LM head by vocabulary); the weights every rank holds whole
  (``ModelSpec.replicated_bytes``: routers, latent attention's down-projections, an EAGLE3
  head's ``fc``) are read by every rank; k/v projections are split by KV head and replicated on
  the ranks beyond the KV heads (``tp > num_key_value_heads``: each rank holds one);
* the KV cache splits with the KV heads (each rank keeps ``max(1, kv_heads / tp)`` heads);
  latent attention's cache (one latent per token) is kept whole on every rank;
* a forward does two all-reduces per decoder layer (after attention's ``o_proj`` and after the
  MLP's ``down_proj`` or the MoE's combine), one after the vocabulary-parallel embedding, and
  one all-gather of the LM head's logits: :func:`collectives_per_forward`;
* an all-reduce of ``B`` bytes takes ``allreduce_latency_s + 2 (N - 1) / N x B / (one-way
  link bandwidth)`` (a ring's bytes on the wire; the one-way bandwidth is half the profile's
  ``interconnect_bandwidth_gbs``, which datasheets state for both directions together);
  an all-gather moves half of that: :func:`allreduce_time_s`, :func:`allgather_time_s`;
* the EAGLE3 head runs with the same degree as the target (sglang's ``EAGLEWorker`` is a
  ``TpModelWorker`` on the target's ranks; vLLM's ``draft_tensor_parallel_size`` defaults to the
  target's), so it pays its own collectives.

Degrees the engines accept (:func:`check_tp`, the rule of vLLM ``ModelConfig.
verify_with_parallel_config`` and ``QKVParallelLinear``, which sglang's ``linear.py`` shares):
the attention heads divisible by N; the KV heads divisible by N, or N divisible by them when N
exceeds them; every intermediate size divisible by N (``MergedColumnParallelLinear`` and the
fused MoE ``divide`` them), and for block-quantized FP8 weights the shard a multiple of the
block (128): Qwen3-30B-A3B-FP8's experts (768) do not split 4 ways, its bf16 weights do.
"""

from __future__ import annotations

from specband.core.errors import ConfigError
from specband.core.limits import is_int
from specband.sim.hfconfig import ModelSpec
from specband.sim.profile import HardwareProfile

__all__ = [
    "ACTIVATION_BYTES",
    "MAX_TP",
    "allgather_time_s",
    "allreduce_time_s",
    "check_tp",
    "collectives_per_forward",
    "kv_share",
    "per_gpu_expert_bytes",
    "per_gpu_flops",
    "per_gpu_kv_bytes_per_token",
    "per_gpu_read_bytes",
    "per_gpu_weight_bytes",
    "valid_tp_sizes",
]

#: Largest tensor-parallel degree specband simulates (64 GPUs: eight 8-GPU nodes).
MAX_TP = 64
#: Bytes per activation element on the wire (bf16/fp16 activations; FP8 weights keep them).
ACTIVATION_BYTES = 2.0


def kv_share(spec: ModelSpec, tp: int) -> float:
    """The share of the KV heads (their k/v projections and cache) one rank holds at degree
    ``tp``: ``max(1, kv / tp) / kv``; ``1 / tp`` for a spec that states no KV heads."""
    if spec.num_kv_heads <= 0:
        return 1.0 / tp
    return max(1, spec.num_kv_heads // tp) / spec.num_kv_heads


def _kv_cache_share(spec: ModelSpec, tp: int) -> float:
    """As :func:`kv_share`, but latent attention's cache (no KV heads, query heads known) is
    whole on every rank."""
    if spec.num_kv_heads <= 0 and spec.num_attention_heads > 0:
        return 1.0
    return kv_share(spec, tp)


def _split(total: float, spec: ModelSpec, tp: int) -> float:
    rest = total - spec.replicated_bytes - spec.kv_proj_bytes
    return rest / tp + spec.replicated_bytes + spec.kv_proj_bytes * kv_share(spec, tp)


def per_gpu_weight_bytes(spec: ModelSpec, tp: int) -> float:
    """Weight bytes one rank stores at degree ``tp``, B (``spec.weight_bytes`` at 1)."""
    return _split(spec.weight_bytes, spec, tp)


def per_gpu_read_bytes(spec: ModelSpec, tokens: float, tp: int) -> float:
    """Weight bytes one rank reads in a forward over ``tokens`` tokens at degree ``tp``, B: the
    split part over ``tp``, the replicated part whole, and for a mixture-of-experts model the
    distinct experts the tokens touch (:mod:`specband.sim.moe`)."""
    extra = spec.moe.extra_read_bytes(tokens) if spec.moe is not None else 0.0
    return _split(spec.read_bytes_per_forward + extra, spec, tp)


def per_gpu_expert_bytes(spec: ModelSpec, tokens: float, tp: int) -> float:
    """Of :func:`per_gpu_read_bytes`, the routed experts' weights (the distinct experts the
    tokens touch, split ``tp`` ways), B; 0 for a dense model."""
    if spec.moe is None:
        return 0.0
    return spec.moe.moe_layers * spec.moe.distinct_experts(max(tokens, 1.0)) * spec.moe.expert_bytes / tp


def per_gpu_kv_bytes_per_token(spec: ModelSpec, tp: int) -> float:
    """KV-cache bytes per token one rank keeps at degree ``tp``, B."""
    return spec.kv_bytes_per_token * _kv_cache_share(spec, tp)


def per_gpu_flops(spec: ModelSpec, tokens: float, ctx: float, tp: int) -> float:
    """FLOPs one rank does in a forward over ``tokens`` query tokens with ``ctx`` context tokens
    each: the linear layers split ``tp`` ways but the replicated ones, attention by heads."""
    dense = (spec.dense_flops_per_token - spec.replicated_flops_per_token) / tp + spec.replicated_flops_per_token
    return tokens * (dense + ctx * spec.attn_flops_per_token_ctx / tp)


def collectives_per_forward(spec: ModelSpec) -> tuple[int, int]:
    """``(all-reduces, all-gathers)`` of one tensor-parallel forward: two per decoder layer and
    one after the embedding; one all-gather of the logits."""
    return 2 * spec.num_layers + 1, 1


def _one_way_bytes_per_s(profile: HardwareProfile) -> float:
    if profile.interconnect_bandwidth_gbs <= 0:
        raise ConfigError(
            f"profile '{profile.name}': no GPU interconnect ([interconnect] interconnect_bandwidth_gbs = 0): "
            "tensor parallelism needs a profile that states one"
        )
    return profile.interconnect_bandwidth_gbs * 1e9 / 2.0


def allreduce_time_s(profile: HardwareProfile, nbytes: float, tp: int) -> float:
    """Time of one all-reduce of ``nbytes`` bytes over ``tp`` GPUs, s (0 at ``tp`` 1).

    Raises:
        ConfigError: ``tp > 1`` on a profile without an interconnect.
    """
    if tp <= 1:
        return 0.0
    return profile.allreduce_latency_s + 2.0 * (tp - 1) / tp * nbytes / _one_way_bytes_per_s(profile)


def allgather_time_s(profile: HardwareProfile, nbytes: float, tp: int) -> float:
    """Time of one all-gather whose result is ``nbytes`` bytes over ``tp`` GPUs, s (0 at 1)."""
    if tp <= 1:
        return 0.0
    return profile.allreduce_latency_s + (tp - 1) / tp * nbytes / _one_way_bytes_per_s(profile)


def _tp_problem(spec: ModelSpec, tp: int) -> str | None:
    """Why degree ``tp`` does not split ``spec``, or ``None``."""
    heads = spec.num_attention_heads
    if heads and heads % tp:
        return f"num_attention_heads ({heads}) is not divisible by {tp}"
    for field, size in spec.tp_dims:
        if size % tp:
            return f"{field} ({size}) is not divisible by {tp}"
        if spec.quant_block and (size // tp) % spec.quant_block:
            return (
                f"{field} ({size}) / {tp} = {size // tp} is not a multiple of the FP8 weight block ({spec.quant_block})"
            )
    kv = spec.num_kv_heads
    if kv > 0 and ((tp < kv and kv % tp) or (tp >= kv and tp % kv)):
        return f"the {kv} KV heads and {tp} do not divide one another"
    return None


def valid_tp_sizes(spec: ModelSpec, limit: int = MAX_TP) -> list[int]:
    """The degrees up to ``limit`` that split ``spec`` (see :func:`check_tp`)."""
    return [tp for tp in range(1, limit + 1) if _tp_problem(spec, tp) is None]


def check_tp(tp: int, *specs: ModelSpec, profile: HardwareProfile | None = None) -> int:
    """Check a tensor-parallel degree against the models (target and draft head) and profile.

    Args:
        tp: the degree (``--tp``).
        specs: the models it splits (the draft head runs at the target's degree).
        profile: the hardware profile (``tp > 1`` needs its interconnect).

    Returns:
        ``tp``.

    Raises:
        ConfigError: one line, ``"--tp N: ..."``: not an integer in ``[1, MAX_TP]``, a model
            whose heads or intermediate sizes it does not divide (naming the config field and
            the degrees that do), or a profile without an interconnect.
    """
    if not is_int(tp) or not 1 <= tp <= MAX_TP:
        raise ConfigError(f"--tp: expected an integer from 1 to {MAX_TP}, got {tp!r}")
    for spec in specs:
        problem = _tp_problem(spec, tp)
        if problem is not None:
            ok = ", ".join(str(n) for n in valid_tp_sizes(spec, 16))
            raise ConfigError(
                f"--tp {tp}: {spec.name}: {problem}, as sglang and vLLM require (degrees up to 16 that split it: {ok})"
            )
    if tp > 1 and profile is not None and profile.interconnect_bandwidth_gbs <= 0:
        raise ConfigError(
            f"--tp {tp}: profile '{profile.name}' states no GPU interconnect ([interconnect] "
            "interconnect_bandwidth_gbs); tensor parallelism needs one (h100-sxm, h200, a100-sxm4-80gb state NVLink)"
        )
    return tp

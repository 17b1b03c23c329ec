"""Tensor parallelism and mixture of experts in the step cost (issue 36 items 2 and 3): the degrees
the engines accept, weights and KV split N ways, the all-reduces, N boards of power, memory per
GPU, and the experts a verify reads growing with the tokens it verifies."""

from __future__ import annotations

import json
import math

import pytest

from specband.core.errors import ConfigError
from specband.sim import build_model
from specband.sim.hfconfig import ModelSpec, bundled_model_config_path, load_model_spec
from specband.sim.moe import expected_distinct_experts
from specband.sim.parallel import (
    allreduce_time_s,
    check_tp,
    collectives_per_forward,
    per_gpu_kv_bytes_per_token,
    per_gpu_read_bytes,
    per_gpu_weight_bytes,
    valid_tp_sizes,
)
from specband.sim.profile import load_profile

PAIR_70B = {"target_config": "llama-3.3-70b-instruct", "draft_config": "eagle3-llama-3.3-70b-instruct"}
PAIR_QWEN = {"target_config": "qwen3-30b-a3b-instruct-2507", "draft_config": "eagle3-qwen3-30b-a3b-instruct-2507"}


def test_distinct_experts_under_uniform_routing() -> None:
    assert expected_distinct_experts(1, 128, 8) == pytest.approx(8.0)
    assert expected_distinct_experts(0, 128, 8) == 0.0
    # bs 8 x 8 verified tokens = 64 routings of 8 among 128: E (1 - (1 - k/E)^T)
    assert expected_distinct_experts(64, 128, 8) == pytest.approx(128 * (1 - (120 / 128) ** 64))
    values = [expected_distinct_experts(t, 128, 8) for t in (1, 8, 32, 64, 256)]
    assert values == sorted(values) and values[-1] < 128
    assert expected_distinct_experts(5, 16, 16) == 16.0
    with pytest.raises(ConfigError):
        expected_distinct_experts(4, 16, 17)


def test_a_verify_reads_more_experts_the_more_tokens_it_verifies() -> None:
    qwen = load_model_spec("qwen3-30b-a3b-instruct-2507", draft=False)
    dense = load_model_spec("llama-3.3-70b-instruct", draft=False)
    # the dense model reads the same weights for 8 or 64 tokens; the MoE model reads 2.5x more experts
    assert per_gpu_read_bytes(dense, 64, 4) == per_gpu_read_bytes(dense, 8, 4)
    assert qwen.moe is not None
    growth = per_gpu_read_bytes(qwen, 64, 4) - per_gpu_read_bytes(qwen, 8, 4)
    extra = qwen.moe.moe_layers * (qwen.moe.distinct_experts(64) - qwen.moe.distinct_experts(8))
    assert growth == pytest.approx(extra * qwen.moe.expert_bytes / 4)
    model = build_model("h200", **PAIR_QWEN, tp=4)
    verify = {n: model.forward_time_s(model.target, 8, 8 * n) for n in (1, 4, 8)}
    dense_model = build_model("h200", **PAIR_70B, tp=4)
    dense_verify = {n: dense_model.forward_time_s(dense_model.target, 8, 8 * n) for n in (1, 4, 8)}
    assert verify[4] / verify[1] > 1.4 and verify[8] / verify[1] > 1.5
    assert dense_verify[4] / dense_verify[1] < 1.1


@pytest.mark.parametrize(
    "name,tp,problem",
    [
        ("llama-4-scout-17b-16e-instruct", 16, "num_attention_heads (40) is not divisible by 16"),
        ("llama-3.3-70b-instruct", 3, "num_attention_heads (64) is not divisible by 3"),
        ("qwen3-30b-a3b-instruct-2507", 6, "num_attention_heads (32) is not divisible by 6"),
    ],
)
def test_degrees_the_engines_refuse_are_one_error_line(name: str, tp: int, problem: str) -> None:
    spec = load_model_spec(name, draft=False)
    with pytest.raises(ConfigError) as err:
        check_tp(tp, spec)
    assert str(err.value).startswith(f"--tp {tp}: {spec.name}: {problem}, as sglang and vLLM require")
    assert "\n" not in str(err.value)


def test_kv_heads_split_or_replicate_and_fp8_blocks_must_divide() -> None:
    qwen = load_model_spec("qwen3-30b-a3b-instruct-2507", draft=False)
    assert valid_tp_sizes(qwen, 16) == [1, 2, 4, 8, 16]  # 4 KV heads: 8 and 16 replicate them
    # each rank keeps max(1, 4 / tp) KV heads: at tp 8 a rank keeps 1 of 4 (replicated, not 1/8)
    assert per_gpu_kv_bytes_per_token(qwen, 8) == qwen.kv_bytes_per_token / 4
    assert per_gpu_kv_bytes_per_token(qwen, 2) == qwen.kv_bytes_per_token / 2
    cfg = json.loads(bundled_model_config_path("qwen3-30b-a3b-instruct-2507").read_text())
    fp8 = ModelSpec.from_hf_config(
        {**cfg, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    )
    with pytest.raises(ConfigError, match=r"moe_intermediate_size \(768\) / 4 = 192 is not a multiple of the FP8"):
        check_tp(4, fp8)
    assert check_tp(2, fp8) == 2  # 384 = 3 x 128
    kimi = load_model_spec("kimi-k2-instruct", draft=False)
    # the latent cache is whole on every rank
    assert per_gpu_kv_bytes_per_token(kimi, 8) == kimi.kv_bytes_per_token


def test_weights_split_n_ways_but_the_replicated_ones() -> None:
    dense = load_model_spec("llama-3.3-70b-instruct", draft=False)
    assert per_gpu_weight_bytes(dense, 4) == pytest.approx(dense.weight_bytes / 4)
    head = load_model_spec("eagle3-llama-3.3-70b-instruct", draft=True)
    fc = 3 * 8192 * 8192 * 2
    assert head.replicated_bytes == fc
    assert per_gpu_weight_bytes(head, 4) == pytest.approx((head.weight_bytes - fc) / 4 + fc)


def test_all_reduces_per_forward_and_their_time() -> None:
    h200 = load_profile("h200")
    dense = load_model_spec("llama-3.3-70b-instruct", draft=False)
    assert collectives_per_forward(dense) == (161, 1)
    assert allreduce_time_s(h200, 1e6, 1) == 0.0
    # 2 (N - 1) / N x bytes over one direction of NVLink 4 (900 GB/s both ways), plus the latency
    assert allreduce_time_s(h200, 1e6, 4) == pytest.approx(h200.allreduce_latency_s + 1.5 * 1e6 / 450e9)
    one = build_model("h200", **PAIR_70B, tp=4)
    assert one.collective_time_s(one.target, 8) > 161 * h200.allreduce_latency_s
    with pytest.raises(ConfigError, match="--tp 2: profile 'rtx4060-laptop' states no GPU interconnect"):
        build_model("rtx4060-laptop", tp=2)


def test_n_boards_power_per_gpu_energy_over_all() -> None:
    model = build_model("h200", **PAIR_70B, tp=4)
    pred = model.predict(8, (7, 1, 8), 55.0)
    assert pred.power_limit_w == 700.0 and 0 < pred.avg_power_w < 700.0
    cost = model.run_cost(8, (7, 1, 8), pred)
    assert cost.energy_j == pytest.approx(4 * pred.avg_power_w * cost.wall_clock_s)
    assert cost.joules_per_token == pytest.approx(cost.energy_j / cost.total_output_tokens)
    # each GPU reads a quarter of the weights: at tp 2 the step is slower and each GPU busier
    two = build_model("h200", **PAIR_70B, tp=2)
    assert two.predict(8, (7, 1, 8), 55.0).step_time_s > pred.step_time_s
    assert two.step_cost(8, (0, 0, 0)).bytes_moved > 1.9 * model.step_cost(8, (0, 0, 0)).bytes_moved


def test_memory_per_gpu_and_the_degree_a_model_needs() -> None:
    h100 = build_model("h100-sxm", **PAIR_70B, tp=2)
    assert not h100.fits(1, (0, 0, 0), 0.65)
    assert h100.gpus_needed(0.65) == 4
    with pytest.raises(ConfigError) as err:
        h100.require_fit(0.65)
    text = str(err.value)
    assert text.startswith("--tp 2: meta-llama/Llama-3.3-70B-Instruct does not fit on 2 x h100-sxm: the smallest")
    assert text.endswith("it needs --tp 4") and "\n" not in text
    four = build_model("h100-sxm", **PAIR_70B, tp=4)
    four.require_fit(0.65)
    assert four.memory_needed_mb(8, (7, 1, 8)) < 0.65 * four.profile.vram_mb
    kimi = build_model("h200", target_config="kimi-k2-instruct", draft_config="eagle3-kimi-k2-instruct", tp=8)
    assert kimi.gpus_needed(0.55) == 16  # ~1 TB of FP8 weights: 16 H200 at the sweep's retry fraction


def test_one_gpu_is_the_old_model() -> None:
    """At tp 1 a dense model costs what it cost before tensor parallelism (8B, H200, bs 1)."""
    model = build_model("h200", target_config="llama-3.1-8b-instruct", draft_config="eagle3-llama-3.1-8b-instruct")
    spec = model.target
    nbytes, flops, _t_mem, _t_cmp = model._forward_work(spec, 1, 1, model.context_tokens())
    assert nbytes == pytest.approx(spec.read_bytes_per_forward + model.context_tokens() * spec.kv_bytes_per_token)
    assert flops == pytest.approx(spec.dense_flops_per_token + model.context_tokens() * spec.attn_flops_per_token_ctx)
    assert model.collective_time_s(spec, 1) == 0.0
    pred = model.predict(1, (3, 1, 4), 55.0)
    cost = model.run_cost(1, (3, 1, 4), pred)
    assert math.isclose(cost.energy_j, pred.avg_power_w * cost.wall_clock_s)

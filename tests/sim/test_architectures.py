"""Model specs of the architectures fleets serve, read from config.json (issue 36 item 1): the
bundled configs' sizes against the published parameter counts, the MoE layer rules, the
spellings of one parameter, the nested text config, quantization, and one error line for an
architecture specband does not model."""

from __future__ import annotations

import json

import pytest

from specband.core.errors import ConfigError
from specband.sim.hfconfig import ModelSpec, bundled_model_config_path, load_model_spec


def _cfg(name: str) -> dict:
    return json.loads(bundled_model_config_path(name).read_text())


def _params_b(spec: ModelSpec, nbytes: float = 2.0) -> float:
    return spec.weight_bytes / nbytes / 1e9


@pytest.mark.parametrize(
    "name,total_b,active_b,moe",
    [
        # published: 70.6B; Qwen3-30B-A3B 30.5B total, 3.3B activated (with the 0.31B LM head);
        # Llama-4-Scout 109B total (text 108B + vision), 17B active
        ("llama-3.3-70b-instruct", 70.55, 69.5, False),
        ("qwen3-30b-a3b-instruct-2507", 30.53, 3.04, True),
        ("llama-4-scout-17b-16e-instruct", 108.6, 16.14, True),
    ],
)
def test_bundled_targets_have_their_published_size(name: str, total_b: float, active_b: float, moe: bool) -> None:
    spec = load_model_spec(name, draft=False)
    assert _params_b(spec) == pytest.approx(total_b, rel=0.01)
    assert spec.dense_flops_per_token / 2e9 == pytest.approx(active_b, rel=0.01)
    assert spec.is_moe == moe


def test_qwen3_moe_layers_experts_and_heads() -> None:
    spec = load_model_spec("qwen3-30b-a3b-instruct-2507", draft=False)
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_layers) == (128, 8, 48)
    assert spec.moe.expert_bytes == 3 * 2048 * 768 * 2
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (32, 4, 128)
    # a one-token forward reads 8 experts per layer, the weights hold 128
    assert spec.weight_bytes - spec.read_bytes_per_forward == pytest.approx(
        48 * 120 * spec.moe.expert_bytes + 151936 * 2048 * 2, rel=1e-9
    )
    # routers are replicated on every tensor-parallel rank
    assert spec.replicated_bytes == 48 * 2048 * 128 * 2
    cfg = _cfg("qwen3-30b-a3b-instruct-2507")
    sparse = ModelSpec.from_hf_config({**cfg, "decoder_sparse_step": 2, "mlp_only_layers": [1, 3]})
    assert sparse.moe is not None and sparse.moe.moe_layers == 24 - 2  # odd layers 1..47, less two


def test_kimi_k2_latent_attention_shared_expert_fp8() -> None:
    spec = load_model_spec("kimi-k2-instruct", draft=False)
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_layers) == (384, 8, 60)
    assert spec.moe.shared_experts == 1
    assert spec.quantization == "fp8" and spec.quant_block == 128
    assert spec.moe.expert_bytes == 3 * 7168 * 2048 * 1  # FP8 experts: one byte a weight
    # ~1.03T parameters, 32B activated (moonshotai/Kimi-K2-Instruct model card); FP8 linear layers,
    # bf16 embedding and head
    stored_params = (spec.weight_bytes - 2 * 163840 * 7168 * 2 - 60 * 7168 * 384 * 2) + 2 * 163840 * 7168
    assert stored_params / 1e12 == pytest.approx(1.03, rel=0.02)
    assert spec.dense_flops_per_token / 2e9 == pytest.approx(32.0, rel=0.03)
    # the MLA cache: one 512 + 64 latent per token and layer (bf16), no KV heads
    assert spec.kv_bytes_per_token == 61 * (512 + 64) * 2
    assert spec.num_kv_heads == 0 and spec.num_attention_heads == 64
    cfg = _cfg("kimi-k2-instruct")
    dense3 = ModelSpec.from_hf_config({**cfg, "first_k_dense_replace": 3, "moe_layer_freq": 2})
    assert dense3.moe is not None and dense3.moe.moe_layers == len([i for i in range(3, 61) if i % 2 == 0])


def test_llama4_nested_text_config_interleaved_layers_and_shared_expert() -> None:
    spec = load_model_spec("llama-4-scout-17b-16e-instruct", draft=False)
    assert spec.architecture == "Llama4ForConditionalGeneration"
    assert spec.moe is not None and spec.moe.shared_experts == 1
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_layers) == (16, 1, 48)
    assert spec.rope_theta == 500000.0 and spec.rope_scaling is not None
    cfg = _cfg("llama-4-scout-17b-16e-instruct")
    maverick_like = {**cfg, "text_config": {**cfg["text_config"], "interleave_moe_layer_step": 2}}
    half = ModelSpec.from_hf_config(maverick_like)
    assert half.moe is not None and half.moe.moe_layers == 24
    # the dense layers use intermediate_size_mlp (16384), the experts intermediate_size (8192)
    assert ("text_config.intermediate_size_mlp", 16384) in half.tp_dims
    listed = {**cfg, "text_config": {**cfg["text_config"], "moe_layers": [0, 5]}}
    assert ModelSpec.from_hf_config(listed).moe.moe_layers == 2  # type: ignore[union-attr]


def test_eagle3_heads_are_dense_with_their_draft_vocabulary() -> None:
    head = load_model_spec("eagle3-qwen3-30b-a3b-instruct-2507", draft=True)
    assert head.is_eagle3_draft and not head.is_moe and head.vocab_size == 32000
    assert head.dense_flops_per_token / 2e6 == pytest.approx(183.0, rel=0.01)  # 183M parameters
    assert head.replicated_bytes == 3 * 2048 * 2048 * 2  # the fc, whole on every rank
    for name in ("eagle3-llama-3.3-70b-instruct", "eagle3-llama-4-scout-17b-16e-instruct", "eagle3-kimi-k2-instruct"):
        spec = load_model_spec(name, draft=True)
        assert spec.is_eagle3_draft and spec.num_layers == 1 and spec.vocab_size == 32000


def test_each_spelling_of_a_parameter_is_read_and_disagreements_are_one_error() -> None:
    cfg = _cfg("qwen3-30b-a3b-instruct-2507")
    base = ModelSpec.from_hf_config(cfg)
    respelled = {k: v for k, v in cfg.items() if k not in ("num_experts", "num_hidden_layers")}
    respelled.update(n_routed_experts=128, n_layer=48)
    assert ModelSpec.from_hf_config(respelled).read_bytes_per_forward == base.read_bytes_per_forward
    with pytest.raises(ConfigError) as err:
        ModelSpec.from_hf_config({**cfg, "num_local_experts": 64}, source="q/config.json")
    assert str(err.value) == (
        "q/config.json: fields 'num_experts' and 'num_local_experts' both give num_experts but disagree (128 vs 64)"
    )


@pytest.mark.parametrize(
    "change,message",
    [
        (
            {"architectures": ["Qwen3NextForCausalLM"]},
            "field 'architectures': Qwen3NextForCausalLM is not an architecture",
        ),
        ({"architectures": None, "model_type": "mamba"}, "field 'model_type': mamba is not a model type"),
        ({"moe_intermediate_size": None}, "field 'moe_intermediate_size': expected a positive integer"),
        ({"num_experts_per_tok": 200}, "200 experts per token is more than the 128 experts"),
        ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantization 'bitsandbytes' states no weight"),
    ],
)
def test_what_cannot_be_modelled_is_one_error_line(change: dict, message: str) -> None:
    cfg = {**_cfg("qwen3-30b-a3b-instruct-2507"), **change}
    with pytest.raises(ConfigError, match=message) as err:
        ModelSpec.from_hf_config(cfg, source="m/config.json")
    assert str(err.value).startswith("m/config.json: ") and "\n" not in str(err.value)


def test_a_dense_architecture_with_expert_fields_is_refused() -> None:
    cfg = {**_cfg("llama-3.1-8b-instruct"), "num_local_experts": 8}
    with pytest.raises(ConfigError, match="a mixture-of-experts field on LlamaForCausalLM"):
        ModelSpec.from_hf_config(cfg)


def test_fp8_halves_the_linear_weights_and_keeps_the_head() -> None:
    cfg = _cfg("qwen3-30b-a3b-instruct-2507")
    fp8 = ModelSpec.from_hf_config(
        {**cfg, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    )
    bf16 = ModelSpec.from_hf_config(cfg)
    head = 151936 * 2048 * 2
    embed_router = head + 48 * 2048 * 128 * 2
    assert fp8.weight_bytes - head - embed_router == pytest.approx((bf16.weight_bytes - head - embed_router) / 2)
    assert fp8.quant_block == 128

"""Model specs derived from Hugging Face config.json (docs/FACTS.md §6 figures)."""

from __future__ import annotations

import json

import pytest

from specband.core.errors import ConfigError
from specband.sim.hfconfig import (
    BUNDLED_DRAFT_CONFIG,
    BUNDLED_TARGET_CONFIG,
    ModelSpec,
    bundled_model_config_path,
    load_model_spec,
    rope_mismatch,
)


def _target() -> ModelSpec:
    return load_model_spec(None, draft=False, default=BUNDLED_TARGET_CONFIG)


def _draft() -> ModelSpec:
    return load_model_spec(None, draft=True, default=BUNDLED_DRAFT_CONFIG)


def test_target_costs_match_llama_3_2_1b() -> None:
    t = _target()
    # 2.47 GFLOPs per token without speculation (docs/FACTS.md §6)
    assert t.dense_flops_per_token / 1e9 == pytest.approx(2.47, abs=0.005)
    # tied embedding: stored once, read once per forward as the LM head
    assert t.weight_bytes == t.read_bytes_per_forward == pytest.approx(2.4715e9, rel=1e-3)
    # K and V: 2 x 16 layers x 8 kv heads x 64 x 2 bytes
    assert t.kv_bytes_per_token == 2 * 16 * 8 * 64 * 2
    assert t.name == "unsloth/Llama-3.2-1B-Instruct"
    assert not t.is_eagle3_draft


def test_draft_head_layout() -> None:
    d = _draft()
    assert d.is_eagle3_draft
    assert d.vocab_size == 32000
    # one layer with 2h-wide q/k/v, fc 3h -> h, lm_head h x 32000
    h, i = 2048, 8192
    params = 2 * h * h + 2 * 2 * h * 512 + h * h + 3 * h * i + 3 * h * h + h * 32000
    assert d.dense_flops_per_token == 2 * params
    assert d.kv_bytes_per_token == 2 * 1 * 8 * 64 * 2


@pytest.mark.parametrize("action,accept,published", [((3, 4, 8), 2.425, 9.24), ((3, 2, 4), 2.129, 5.36)])
def test_gflops_per_output_token_match_published(action: tuple[int, int, int], accept: float, published: float) -> None:
    t, d = _target(), _draft()
    steps, topk, draft_tokens = action
    flops = draft_tokens * t.dense_flops_per_token + (1 + (steps - 1) * topk) * d.dense_flops_per_token
    assert flops / accept / 1e9 == pytest.approx(published, rel=0.01)


def test_untied_model_stores_separate_head() -> None:
    cfg = json.loads(bundled_model_config_path(BUNDLED_TARGET_CONFIG).read_text())
    cfg["tie_word_embeddings"] = False
    untied = ModelSpec.from_hf_config(cfg)
    tied = _target()
    assert untied.weight_bytes - tied.weight_bytes == pytest.approx(128256 * 2048 * 2)
    assert untied.read_bytes_per_forward == tied.read_bytes_per_forward


def test_bad_configs_raise_config_error(tmp_path) -> None:
    cfg = json.loads(bundled_model_config_path(BUNDLED_TARGET_CONFIG).read_text())
    bad = dict(cfg, hidden_size=-1)
    with pytest.raises(ConfigError, match="hidden_size"):
        ModelSpec.from_hf_config(bad)
    with pytest.raises(ConfigError, match="mixture-of-experts"):
        ModelSpec.from_hf_config(dict(cfg, num_local_experts=8))
    with pytest.raises(ConfigError, match="torch_dtype"):
        ModelSpec.from_hf_config(dict(cfg, torch_dtype="int3"))
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match=r"config.json:1"):
        load_model_spec(path, draft=False)
    with pytest.raises(ConfigError, match="no such model config"):
        load_model_spec(tmp_path / "missing.json", draft=False)


def test_rope_mismatch_is_reported() -> None:
    t = _target()
    cfg = json.loads(bundled_model_config_path(BUNDLED_DRAFT_CONFIG).read_text())
    assert rope_mismatch(t, _draft()) is None
    published_head = ModelSpec.from_hf_config(dict(cfg, rope_theta=10000.0, rope_scaling=None))
    warning = rope_mismatch(t, published_head)
    assert warning is not None and "rope_theta" in warning


def test_bundled_configs_by_name() -> None:
    from specband.sim.hfconfig import bundled_model_configs

    assert "llama-3.1-8b-instruct" in bundled_model_configs()
    t8 = load_model_spec("llama-3.1-8b-instruct", draft=False)
    assert t8.dense_flops_per_token / 1e9 == pytest.approx(15.0, abs=0.1)
    assert t8.weight_bytes / 1e9 == pytest.approx(16.06, abs=0.05)
    d8 = load_model_spec("eagle3-llama-3.1-8b-instruct", draft=True)
    assert d8.is_eagle3_draft and d8.vocab_size == 32000
    with pytest.raises(ConfigError, match=r"nope: no such model config file \(bundled configs: eagle3"):
        load_model_spec("nope", draft=False)


def test_an_8b_target_does_not_fit_the_8gb_laptop() -> None:
    from specband.sim import build_model, simulate_sweep

    model = build_model(
        "rtx4060-laptop", target_config="llama-3.1-8b-instruct", draft_config="eagle3-llama-3.1-8b-instruct"
    )
    rows = simulate_sweep(model, repeats=1, batch_sizes=[1])
    assert all(r["error"] and "out of memory" in r["error"] for r in rows)
    h100 = build_model("h100-sxm", target_config="llama-3.1-8b-instruct", draft_config="eagle3-llama-3.1-8b-instruct")
    assert h100.fits(16, (5, 4, 16))
    assert h100.predict(1, (3, 4, 8), 50.0).speed_tok_s > h100.predict(1, (0, 0, 0), 50.0).speed_tok_s

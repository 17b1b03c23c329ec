"""Qwen3-8B and an EAGLE3 head for it, as config.json files, for the first-guess tests.

Values from the Hugging Face model cards' config.json: ``Qwen/Qwen3-8B`` (36 layers, hidden
4096, 32 heads / 8 KV heads of 128, intermediate 12288, vocabulary 151936, RoPE theta 1e6,
bfloat16) and an EAGLE3 head of the same hidden size (``Tengyunw/qwen3_8b_eagle3``: one
``LlamaForCausalLMEagle3`` layer, draft vocabulary 32000). specband bundles neither pair's
acceptance: a first guess for it borrows one.
"""

from __future__ import annotations

import json
from pathlib import Path

QWEN3_8B = {
    "_name_or_path": "Qwen/Qwen3-8B",
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
QWEN3_8B_EAGLE3 = {
    "_name_or_path": "Tengyunw/qwen3_8b_eagle3",
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "vocab_size": 151936,
    "draft_vocab_size": 32000,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def write_qwen3_pair(folder: Path) -> tuple[Path, Path]:
    """Write both configs under ``folder``; returns (target, draft) paths."""
    target, draft = folder / "qwen3-8b.json", folder / "qwen3-8b-eagle3.json"
    target.write_text(json.dumps(QWEN3_8B), encoding="utf-8")
    draft.write_text(json.dumps(QWEN3_8B_EAGLE3), encoding="utf-8")
    return target, draft

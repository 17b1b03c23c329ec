"""Build the tiny Llama target + EAGLE3 draft pairs for the real-engine tests, offline.

Run with an engine's interpreter (it has torch, transformers, tokenizers and safetensors):
``python build_tiny_models.py OUT_DIR``. Writes ``OUT_DIR/{random,predictable}/{target,draft}``.

Shapes (../shared/engines/README.md, "Tiny models"): target ``LlamaForCausalLM``, hidden 128,
8 layers (EAGLE3 captures the inputs of layers 2, L//2 and L-3), 4 heads / 2 KV heads, head_dim
32, intermediate 256, vocab 512, untied lm_head, bf16. Draft: an EAGLE3 head (one mid layer,
``fc`` 3H -> H, draft vocab 256 with ``d2t``/``t2d``, no embedding: it shares the target's).

The predictable pair: the target's attention and MLP outputs are zero (o_proj, down_proj), so the
residual stream is the token's embedding, which has a large value in dimension 0; lm_head's only
non-zero row is the unit vector e0 at PREDICTED_TOKEN: greedy decoding always yields that token.
The draft's ``fc`` passes the first captured hidden state (dimension 0 large) through, its mid
layer adds nothing, and its lm_head's row 0 is e0 with ``d2t[0] = PREDICTED_TOKEN``: it always
proposes the token the target will pick, so every draft token is accepted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HIDDEN = 128
LAYERS = 8
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
INTERMEDIATE = 256
VOCAB = 512
DRAFT_VOCAB = 256
#: The token the predictable target always generates (an ordinary BPE token, not a special one).
PREDICTED_TOKEN = 300

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
CORPUS = [
    "Human: Write a complete, well-commented Python implementation of a command-line todo application.",
    "Explain step by step how a transformer language model turns a prompt into its next token.",
    "Write a long travel story about a week spent walking along the coast of Portugal.",
    "Solve the equation x^2 - 5x + 6 = 0 in three different ways, explaining every step.",
    "The quick brown fox jumps over the lazy dog. Assistant: Sure, here is the answer.",
]


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=SPECIALS[0], eos_token=SPECIALS[1], pad_token=SPECIALS[2]
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    assert len(fast) <= VOCAB, len(fast)


def target_config(tokenizer_dir: Path) -> dict:
    tok = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": VOCAB,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": ids["<|begin_of_text|>"],
        "eos_token_id": ids["<|end_of_text|>"],
        "pad_token_id": ids["<|pad|>"],
    }


def build_pair(out: Path, predictable: bool, seed: int) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    target_dir, draft_dir = out / "target", out / "draft"
    build_tokenizer(target_dir)
    cfg = target_config(target_dir)
    model = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.bfloat16)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for k in state:
        if "norm" not in k:
            state[k] = torch.randn_like(state[k], dtype=torch.float32).mul(0.02).to(torch.bfloat16)
    if predictable:
        for k in state:
            if k.endswith("o_proj.weight") or k.endswith("down_proj.weight"):
                state[k].zero_()
        state["model.embed_tokens.weight"][:, 0] = 1.0
        head = torch.zeros(VOCAB, HIDDEN, dtype=torch.bfloat16)
        head[PREDICTED_TOKEN, 0] = 1.0
        state["lm_head.weight"] = head
    model.load_state_dict(state)
    model.save_pretrained(target_dir, safe_serialization=True)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape).mul(0.02).to(torch.bfloat16)

    h = HIDDEN
    draft = {
        "fc.weight": rnd(h, 3 * h),
        "midlayer.input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
        "midlayer.hidden_norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "midlayer.post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
        "midlayer.self_attn.q_proj.weight": rnd(HEADS * HEAD_DIM, 2 * h),
        "midlayer.self_attn.k_proj.weight": rnd(KV_HEADS * HEAD_DIM, 2 * h),
        "midlayer.self_attn.v_proj.weight": rnd(KV_HEADS * HEAD_DIM, 2 * h),
        "midlayer.self_attn.o_proj.weight": rnd(h, HEADS * HEAD_DIM),
        "midlayer.mlp.gate_proj.weight": rnd(INTERMEDIATE, h),
        "midlayer.mlp.up_proj.weight": rnd(INTERMEDIATE, h),
        "midlayer.mlp.down_proj.weight": rnd(h, INTERMEDIATE),
        "norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "lm_head.weight": rnd(DRAFT_VOCAB, h),
        "d2t": torch.zeros(DRAFT_VOCAB, dtype=torch.int64),
        "t2d": torch.zeros(VOCAB, dtype=torch.bool),
    }
    draft["t2d"][:DRAFT_VOCAB] = True
    if predictable:
        fc = torch.zeros(h, 3 * h, dtype=torch.bfloat16)
        fc[:, :h] = torch.eye(h, dtype=torch.bfloat16)
        draft["fc.weight"] = fc
        draft["midlayer.self_attn.o_proj.weight"].zero_()
        draft["midlayer.mlp.down_proj.weight"].zero_()
        head = torch.zeros(DRAFT_VOCAB, h, dtype=torch.bfloat16)
        head[0, 0] = 1.0
        draft["lm_head.weight"] = head
        draft["d2t"][0] = PREDICTED_TOKEN  # draft id 0 -> target id 0 + d2t[0]
        draft["t2d"][:] = False
        draft["t2d"][PREDICTED_TOKEN] = True
        draft["t2d"][: DRAFT_VOCAB - 1] = True
    draft_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in draft.items()}, str(draft_dir / "model.safetensors"))
    draft_cfg = {
        **{k: v for k, v in cfg.items() if k not in ("architectures",)},
        "architectures": ["LlamaForCausalLMEagle3"],
        "num_hidden_layers": 1,
        "draft_vocab_size": DRAFT_VOCAB,
        "target_hidden_size": HIDDEN,
    }
    (draft_dir / "config.json").write_text(json.dumps(draft_cfg, indent=2))


def main() -> None:
    out = Path(sys.argv[1])
    build_pair(out / "random", predictable=False, seed=0)
    build_pair(out / "predictable", predictable=True, seed=1)
    print(json.dumps({"predicted_token": PREDICTED_TOKEN, "out": str(out)}))


if __name__ == "__main__":
    main()

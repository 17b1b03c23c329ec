"""What one forward pass of a model reads and computes, derived from its Hugging Face
``config.json``, for the architectures fleets serve.

Families (the layer layouts of sglang ``srt/models/`` and vLLM ``model_executor/models/``):

* **dense** (``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``,
  ``Qwen3ForCausalLM``): grouped-query attention (q, k, v, o) and a gated MLP (gate, up, down)
  in every layer;
* **EAGLE3 heads** (an architecture naming ``Eagle3``, e.g. ``LlamaForCausalLMEagle3``): dense,
  usually one layer whose q/k/v read ``[embedding; hidden]`` (2 x hidden inputs), an ``fc``
  folding the target's three hidden states (``3 x target_hidden_size -> hidden``, replicated on
  every tensor-parallel rank: ``ReplicatedLinear`` in vLLM's ``llama_eagle3.py``, a plain
  ``nn.Linear`` in sglang's) and an LM head over ``draft_vocab_size`` tokens; the input
  embedding is the target's, neither stored nor read;
* **Qwen-MoE** (``Qwen3MoeForCausalLM``, ``Qwen2MoeForCausalLM``): layer ``i`` is an MoE layer
  when ``i`` is not in ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``
  (``qwen3_moe.py``); ``num_experts`` experts of ``moe_intermediate_size``, top
  ``num_experts_per_tok``; Qwen2-MoE adds one shared expert of
  ``shared_expert_intermediate_size``; the other layers are dense MLPs of ``intermediate_size``;
* **Mixtral** (``MixtralForCausalLM``): every layer MoE, ``num_local_experts`` experts of
  ``intermediate_size``;
* **Llama-4** (``Llama4ForConditionalGeneration``, ``Llama4ForCausalLM``): the text model's
  fields under ``text_config``; layer ``i`` is MoE when it is in ``moe_layers`` (else when
  ``(i + 1) % interleave_moe_layer_step == 0``, vLLM ``llama4.py``): ``num_local_experts``
  routed experts and one shared expert, both of ``intermediate_size``; dense layers use
  ``intermediate_size_mlp``; a vision encoder (``vision_config``) is stored, never read by decode;
* **DeepSeek-V2/V3, Kimi-K2** (``DeepseekV3ForCausalLM``, ``DeepseekV2ForCausalLM``): multi-head
  latent attention (``q_a_proj`` hidden -> ``q_lora_rank`` and ``kv_a_proj_with_mqa`` hidden ->
  ``kv_lora_rank + qk_rope_head_dim``, both replicated on every rank; ``q_b_proj``,
  ``kv_b_proj`` and ``o_proj`` split by heads; the KV cache holds the ``kv_lora_rank +
  qk_rope_head_dim`` latent per token and layer, whole on every rank); layer ``i`` is MoE when
  ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0`` (``deepseek_v2.py``):
  ``n_routed_experts`` of ``moe_intermediate_size``, top ``num_experts_per_tok``, and
  ``n_shared_experts`` shared ones; the first layers are dense MLPs of ``intermediate_size``.

Parameters that configs spell differently are read in each spelling (:data:`ALIASES`: e.g.
``num_experts`` / ``num_local_experts`` / ``n_routed_experts``); two spellings in one config that
disagree are an error naming both. Weights are at the config's dtype (``torch_dtype`` or
``dtype``, bfloat16 when absent); a ``quantization_config`` (``fp8``, or one stating a bit width)
sets the bytes of the linear layers, while embeddings, the LM head and the routers stay at the
config's dtype. An architecture outside these families is one error naming it.

Counts (2 FLOPs per multiply-accumulate): the dense FLOPs per token are twice the parameters one
token uses (``k`` routed experts per MoE layer); attention FLOPs per query token and context
token are ``4 x heads x head_dim`` per layer for grouped-query attention and ``2 x heads x
(2 x kv_lora_rank + qk_rope_head_dim)`` for latent attention with absorbed weights (sglang's
MLA decode path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specband.core.errors import ConfigError
from specband.core.limits import is_finite_number, is_int
from specband.sim.moe import MoESpec

__all__ = ["ALIASES", "DTYPE_BYTES", "FAMILIES", "config_dtype", "spec_fields"]

DTYPE_BYTES = {
    "float32": 4.0,
    "float": 4.0,
    "float16": 2.0,
    "half": 2.0,
    "bfloat16": 2.0,
    "float8_e4m3fn": 1.0,
    "float8_e5m2": 1.0,
}

#: Each parameter specband reads and the spellings configs give it, in the order they are tried.
ALIASES: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"),
    "intermediate_size": ("intermediate_size", "ffn_dim", "ffn_hidden_size", "n_inner"),
    "vocab_size": ("vocab_size", "padded_vocab_size", "n_vocab"),
    "num_experts": ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"),
    "num_experts_per_tok": ("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "top_k_experts"),
    "moe_intermediate_size": ("moe_intermediate_size", "expert_intermediate_size", "moe_ffn_hidden_size"),
    "n_shared_experts": ("n_shared_experts", "num_shared_experts"),
    "first_k_dense_replace": ("first_k_dense_replace", "first_k_dense_layers", "num_dense_layers"),
}

#: Architecture (``architectures[0]``) -> family; a ``model_type`` stands in when the config names none.
FAMILIES: dict[str, str] = {
    "LlamaForCausalLM": "dense",
    "MistralForCausalLM": "dense",
    "Qwen2ForCausalLM": "dense",
    "Qwen3ForCausalLM": "dense",
    "Qwen3MoeForCausalLM": "qwen_moe",
    "Qwen2MoeForCausalLM": "qwen_moe",
    "MixtralForCausalLM": "mixtral",
    "Llama4ForConditionalGeneration": "llama4",
    "Llama4ForCausalLM": "llama4",
    "DeepseekV3ForCausalLM": "deepseek",
    "DeepseekV2ForCausalLM": "deepseek",
}
_MODEL_TYPES: dict[str, str] = {
    "llama": "dense",
    "mistral": "dense",
    "qwen2": "dense",
    "qwen3": "dense",
    "qwen3_moe": "qwen_moe",
    "qwen2_moe": "qwen_moe",
    "mixtral": "mixtral",
    "llama4": "llama4",
    "llama4_text": "llama4",
    "deepseek_v3": "deepseek",
    "deepseek_v2": "deepseek",
    "kimi_k2": "deepseek",
}
_MOE_FIELDS = ALIASES["num_experts"]


class _View:
    """A config's fields, the text model's (``text_config``) first where it has one."""

    def __init__(self, config: Mapping[str, Any], source: str) -> None:
        text = config.get("text_config")
        if text is not None and not isinstance(text, Mapping):
            raise ConfigError(f"{source}: field 'text_config': expected an object, got {type(text).__name__}")
        self.config = config
        self.text: Mapping[str, Any] = text or {}
        self.source = source

    def where(self, key: str) -> str:
        return f"text_config.{key}" if key in self.text else key

    def get(self, key: str, default: Any = None) -> Any:
        if self.text.get(key) is not None:
            return self.text[key]
        value = self.config.get(key)
        return default if value is None else value

    def alias(self, param: str) -> tuple[Any, str]:
        """``(value, field)`` of a parameter in whichever spelling the config gives (``(None,
        param)`` when absent); two spellings with different values are an error."""
        found = [(name, self.get(name)) for name in ALIASES.get(param, (param,)) if self.get(name) is not None]
        for name, value in found[1:]:
            if value != found[0][1]:
                raise ConfigError(
                    f"{self.source}: fields '{self.where(found[0][0])}' and '{self.where(name)}' both give "
                    f"{param} but disagree ({found[0][1]!r} vs {value!r})"
                )
        return (found[0][1], found[0][0]) if found else (None, param)

    def positive(self, param: str, default: int | None = None) -> int:
        value, name = self.alias(param)
        value = default if value is None else value
        if not is_int(value) or value <= 0:
            raise ConfigError(f"{self.source}: field '{self.where(name)}': expected a positive integer, got {value!r}")
        return int(value)

    def count(self, param: str, default: int = 0) -> int:
        """A non-negative integer parameter (``None`` reads as ``default``)."""
        value, name = self.alias(param)
        value = default if value is None else value
        if not is_int(value) or value < 0:
            raise ConfigError(f"{self.source}: field '{self.where(name)}': expected an integer >= 0, got {value!r}")
        return int(value)


def config_dtype(config: Mapping[str, Any], source: str = "<config>") -> str | None:
    """The weights' dtype of a Hugging Face config (``torch_dtype``, or transformers 5's
    ``dtype``; the text model's under ``text_config`` first) without a ``torch.`` prefix, or
    ``None`` when the config names none.

    Raises:
        ConfigError: ``"<source>: field 'torch_dtype': unknown dtype ..."``.
    """
    text = config.get("text_config")
    for block in (text if isinstance(text, Mapping) else {}, config):
        key = "torch_dtype" if block.get("torch_dtype") is not None else "dtype"
        dtype = block.get(key)
        if dtype is None:
            continue
        if not isinstance(dtype, str) or dtype.replace("torch.", "") not in DTYPE_BYTES:
            raise ConfigError(f"{source}: field '{key}': unknown dtype {dtype!r}")
        return dtype.replace("torch.", "")
    return None


def _quantization(view: _View, dtype_bytes: float) -> tuple[float, int, str | None]:
    """``(bytes per linear-layer weight, quantization block, method)`` from ``quantization_config``."""
    quant = view.get("quantization_config")
    if quant is None:
        return dtype_bytes, 0, None
    where = view.where("quantization_config")
    if not isinstance(quant, Mapping):
        raise ConfigError(f"{view.source}: field '{where}': expected an object")
    method = str(quant.get("quant_method", ""))
    if method == "fp8":
        block = quant.get("weight_block_size") or [0]
        if not (isinstance(block, list) and block and is_int(block[0]) and block[0] >= 0):
            raise ConfigError(f"{view.source}: field '{where}.weight_block_size': expected a list of integers")
        return 1.0, int(block[0]), method
    bits = quant.get("bits", quant.get("num_bits", quant.get("w_bit")))
    if bits is None and isinstance(quant.get("config_groups"), Mapping):  # compressed-tensors
        groups = [g for g in quant["config_groups"].values() if isinstance(g, Mapping)]
        weights = [g["weights"] for g in groups if isinstance(g.get("weights"), Mapping)]
        bits = weights[0].get("num_bits") if weights else None
    if method == "mxfp4" and bits is None:
        bits = 4.25  # 4-bit values and one 8-bit scale per 32 (the OCP MX format)
    if not (is_finite_number(bits) and 1 <= bits <= 16):
        raise ConfigError(
            f"{view.source}: field '{where}': quantization {method or '(no quant_method)'!r} states no weight "
            "bit width specband can read (it reads fp8 and configs with bits / num_bits)"
        )
    return float(bits) / 8.0, 0, method


def _family(view: _View, draft: bool) -> tuple[str, str]:
    """``(family, architecture label)``; an unmodelled architecture is one error naming it."""
    archs = view.config.get("architectures") or []
    if not isinstance(archs, list):
        raise ConfigError(f"{view.source}: field 'architectures': expected a list of names")
    model_type = view.config.get("model_type")
    label = str(archs[0] if archs else model_type or "model")
    if draft:
        return "eagle3", label
    if archs:
        family = FAMILIES.get(str(archs[0]))
        if family is None:
            raise ConfigError(
                f"{view.source}: field 'architectures': {archs[0]} is not an architecture specband's simulator "
                f"models (it models {', '.join(FAMILIES)} and their EAGLE3 heads)"
            )
        return family, label
    if model_type is not None:
        family = _MODEL_TYPES.get(str(model_type))
        if family is None:
            raise ConfigError(
                f"{view.source}: field 'model_type': {model_type} is not a model type specband's simulator models "
                f"(it models {', '.join(_MODEL_TYPES)})"
            )
        return family, label
    return "dense", label


def _layer_flags(view: _View, family: str, layers: int) -> list[bool]:
    """Which decoder layers are MoE layers, by the family's rule (see the module docstring)."""
    experts = view.count("num_experts")
    if family == "dense" or family == "eagle3" or experts == 0:
        return [False] * layers
    if family == "mixtral":
        return [True] * layers
    if family == "qwen_moe":
        step = view.positive("decoder_sparse_step", 1)
        only = view.get("mlp_only_layers", [])
        if not (isinstance(only, list) and all(is_int(i) for i in only)):
            raise ConfigError(f"{view.source}: field '{view.where('mlp_only_layers')}': expected a list of integers")
        return [i not in only and (i + 1) % step == 0 for i in range(layers)]
    if family == "llama4":
        listed = view.get("moe_layers")
        if listed is not None:
            if not (isinstance(listed, list) and all(is_int(i) for i in listed)):
                raise ConfigError(f"{view.source}: field '{view.where('moe_layers')}': expected a list of integers")
            return [i in listed for i in range(layers)]
        step = view.count("interleave_moe_layer_step", 1)
        return [step > 0 and (i + 1) % step == 0 for i in range(layers)]
    first = view.count("first_k_dense_replace")
    freq = view.get("moe_layer_freq", 1)
    if isinstance(freq, list):  # one flag per layer
        if len(freq) != layers:
            raise ConfigError(
                f"{view.source}: field '{view.where('moe_layer_freq')}': {len(freq)} flags for {layers} layers"
            )
        return [bool(f) and i >= first for i, f in enumerate(freq)]
    if not is_int(freq) or freq < 1:
        raise ConfigError(f"{view.source}: field '{view.where('moe_layer_freq')}': expected a positive integer")
    return [i >= first and i % freq == 0 for i in range(layers)]


def _attention(view: _View, family: str, hidden: int, heads: int) -> dict[str, Any]:
    """Per-layer attention parameters: split, replicated and k/v projection counts, the KV
    elements per token and the attention FLOPs per query and context token."""
    if family == "deepseek":
        kv_lora = view.positive("kv_lora_rank")
        rope = view.positive("qk_rope_head_dim")
        nope = view.positive("qk_nope_head_dim")
        v_dim = view.positive("v_head_dim")
        q_lora = view.count("q_lora_rank")
        q_head = heads * (nope + rope)
        q_split = q_lora * q_head if q_lora else hidden * q_head
        return {
            "split": q_split + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden,
            "replicated": (hidden * q_lora if q_lora else 0) + hidden * (kv_lora + rope),
            "kv_proj": 0,
            "kv_elements": kv_lora + rope,
            "attn_flops": 2 * heads * (2 * kv_lora + rope),
            "kv_heads": 0,
            "head_dim": nope + rope,
        }
    kv_heads = view.positive("num_key_value_heads", heads)
    if view.get("head_dim") is not None:
        head_dim = view.positive("head_dim")
    else:
        if hidden % heads:
            raise ConfigError(f"{view.source}: field 'head_dim': missing and hidden_size is not a multiple of heads")
        head_dim = hidden // heads
    attn_in = 2 * hidden if family == "eagle3" else hidden
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    return {
        "split": attn_in * q_out + q_out * hidden,
        "replicated": 0,
        "kv_proj": 2 * attn_in * kv_out,
        "kv_elements": 2 * kv_out,
        "attn_flops": 4 * q_out,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
    }


def _mlps(view: _View, family: str, hidden: int, flags: list[bool]) -> dict[str, Any]:
    """Dense-MLP and MoE parameters over all layers (gated MLPs: 3 x hidden x intermediate)."""
    dense_inter_key = "intermediate_size_mlp" if family == "llama4" else "intermediate_size"
    moe_layers = sum(flags)
    dense_layers = len(flags) - moe_layers
    sizes: list[tuple[str, int]] = []
    dense_inter = view.positive(dense_inter_key) if dense_layers else 0
    if dense_layers:
        sizes.append((view.where(dense_inter_key), dense_inter))
    out: dict[str, Any] = {"dense": dense_layers * 3 * hidden * dense_inter, "sizes": sizes}
    out.update(shared=0, router=0, expert_params=0, experts=0, top_k=0, shared_count=0, moe_layers=0, expert_inter=0)
    if not moe_layers:
        return out
    experts = view.positive("num_experts")
    top_k = view.positive("num_experts_per_tok", 2 if family == "mixtral" else None)
    if family in ("mixtral", "llama4"):
        expert_inter = view.positive("intermediate_size")
        expert_key = "intermediate_size"
    else:
        expert_inter = view.positive("moe_intermediate_size")
        expert_key = view.alias("moe_intermediate_size")[1]
    sizes.append((view.where(expert_key), expert_inter))
    shared_count, shared_inter = 0, 0
    if family == "llama4":
        shared_count, shared_inter = 1, expert_inter
    elif family == "deepseek":
        shared_count = view.count("n_shared_experts")
        shared_inter = shared_count * expert_inter
    elif family == "qwen_moe" and view.count("shared_expert_intermediate_size"):
        shared_count, shared_inter = 1, view.count("shared_expert_intermediate_size")
        sizes.append((view.where("shared_expert_intermediate_size"), shared_inter))
    out.update(
        shared=moe_layers * 3 * hidden * shared_inter,
        router=moe_layers * hidden * experts,
        expert_params=3 * hidden * expert_inter,
        experts=experts,
        top_k=top_k,
        shared_count=shared_count,
        moe_layers=moe_layers,
        expert_inter=expert_inter,
    )
    if top_k > experts:
        raise ConfigError(
            f"{view.source}: field '{view.where(view.alias('num_experts_per_tok')[1])}': {top_k} experts per "
            f"token is more than the {experts} experts"
        )
    return out


def _vision_params(view: _View) -> int:
    """Parameters of a vision encoder (``vision_config``: layers x (4 h^2 + 2 h i)), stored but
    not read while decoding text; 0 without one."""
    vision = view.config.get("vision_config")
    if not isinstance(vision, Mapping):
        return 0
    sizes = [vision.get(k) for k in ("hidden_size", "num_hidden_layers", "intermediate_size")]
    if not all(is_int(v) and v > 0 for v in sizes):
        return 0
    h, layers, inter = (int(v) for v in sizes)  # type: ignore[arg-type]
    return layers * (4 * h * h + 2 * h * inter)


def spec_fields(config: Mapping[str, Any], *, draft: bool | None, source: str) -> dict[str, Any]:
    """The :class:`~specband.sim.hfconfig.ModelSpec` fields of a Hugging Face config (see the
    module docstring), without ``name``, ``rope_*`` and ``config_sha256``.

    Args:
        config: the parsed ``config.json``.
        draft: an EAGLE3 draft head; ``None`` decides from ``architectures`` (a name containing
            ``Eagle3``).
        source: file name for error messages.

    Raises:
        ConfigError: a required field missing or not a positive integer, two spellings that
            disagree, an unknown dtype or quantization, or an architecture outside the modelled
            families (one line naming the file and the field).
    """
    archs = config.get("architectures") or []
    if not isinstance(archs, list):
        raise ConfigError(f"{source}: field 'architectures': expected a list of names")
    is_draft = any("eagle3" in str(a).lower() for a in archs) if draft is None else bool(draft)
    view = _View(config, source)
    family, architecture = _family(view, is_draft)
    if family in ("dense", "eagle3"):
        for key in _MOE_FIELDS:
            if view.get(key):
                raise ConfigError(
                    f"{source}: field '{view.where(key)}': a mixture-of-experts field on {architecture}, which "
                    "specband models as dense; name the MoE architecture in 'architectures'"
                )
    hidden = view.positive("hidden_size")
    layers = view.positive("num_hidden_layers")
    heads = view.positive("num_attention_heads")
    vocab = view.positive("vocab_size")
    dtype_bytes = DTYPE_BYTES[config_dtype(config, source) or "bfloat16"]
    wbytes, block, method = _quantization(view, dtype_bytes)
    attn = _attention(view, family, hidden, heads)
    flags = _layer_flags(view, family, layers)
    mlp = _mlps(view, "dense" if family == "eagle3" else family, hidden, flags)
    attn_split, attn_rep, kv_proj = (layers * attn[k] for k in ("split", "replicated", "kv_proj"))
    moe = None
    routed_one = 0
    if mlp["experts"]:
        moe = MoESpec(
            num_experts=mlp["experts"],
            experts_per_token=mlp["top_k"],
            moe_layers=mlp["moe_layers"],
            expert_bytes=float(mlp["expert_params"] * wbytes),
            expert_intermediate_size=mlp["expert_inter"],
            shared_experts=mlp["shared_count"],
        )
        routed_one = mlp["moe_layers"] * mlp["top_k"] * mlp["expert_params"]
    routed_all = mlp["moe_layers"] * mlp["experts"] * mlp["expert_params"] if moe else 0
    linear_used = attn_split + attn_rep + kv_proj + mlp["dense"] + mlp["shared"] + routed_one
    linear_stored = attn_split + attn_rep + kv_proj + mlp["dense"] + mlp["shared"] + routed_all
    replicated_bytes = attn_rep * wbytes + mlp["router"] * dtype_bytes
    replicated_params = attn_rep + mlp["router"]
    if is_draft:
        draft_vocab = config.get("draft_vocab_size") or vocab
        if not is_int(draft_vocab) or draft_vocab <= 0:
            raise ConfigError(f"{source}: field 'draft_vocab_size': expected a positive integer")
        target_hidden = config.get("target_hidden_size") or hidden
        if not is_int(target_hidden) or target_hidden <= 0:
            raise ConfigError(f"{source}: field 'target_hidden_size': expected a positive integer")
        fc = 3 * target_hidden * hidden
        head = hidden * draft_vocab
        used_bytes = (linear_used + fc) * wbytes + head * dtype_bytes
        stored_bytes = used_bytes
        used_params = linear_used + fc + head
        replicated_bytes += fc * wbytes
        replicated_params += fc
        logits = int(draft_vocab)
    else:
        head = hidden * vocab
        tied = bool(view.get("tie_word_embeddings", False))
        used_bytes = linear_used * wbytes + (mlp["router"] + head) * dtype_bytes
        stored_bytes = (
            linear_stored * wbytes
            + (mlp["router"] + vocab * hidden + (0 if tied else head)) * dtype_bytes
            + _vision_params(view) * dtype_bytes
        )
        used_params = linear_used + mlp["router"] + head
        logits = vocab
    tp_dims = list(mlp["sizes"])
    return {
        "weight_bytes": float(stored_bytes),
        "read_bytes_per_forward": float(used_bytes),
        "dense_flops_per_token": float(2 * used_params),
        "attn_flops_per_token_ctx": float(layers * attn["attn_flops"]),
        "kv_bytes_per_token": float(layers * attn["kv_elements"] * dtype_bytes),
        "hidden_size": hidden,
        "vocab_size": logits,
        "num_layers": layers,
        "is_eagle3_draft": is_draft,
        "architecture": architecture,
        "num_attention_heads": heads,
        "num_kv_heads": attn["kv_heads"],
        "head_dim": attn["head_dim"],
        "replicated_bytes": float(replicated_bytes),
        "replicated_flops_per_token": float(2 * replicated_params),
        "kv_proj_bytes": float(kv_proj * wbytes),
        "moe": moe,
        "tp_dims": tuple(tp_dims),
        "quant_block": block,
        "quantization": method,
    }

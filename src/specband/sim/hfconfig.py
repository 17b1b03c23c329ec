"""Model sizes, bytes and FLOPs of a target model and its EAGLE3 draft head, derived from a
Hugging Face ``config.json`` (or given directly).

What a decode step costs is counted the way docs/FACTS.md §6 counts it (linear layers only,
2 FLOPs per multiply-accumulate), per architecture family by :mod:`specband.sim.architectures`
(dense Llama/Qwen, Qwen-MoE, Mixtral, Llama-4, DeepSeek-V3/Kimi-K2 and EAGLE3 heads):

* target, per token: ``2 x (L x (q + k + v + o + mlp) + lm_head)`` parameters, i.e. 2.47 GFLOPs
  for Llama-3.2-1B (tied embedding: the 128256 x 2048 matrix is read once per forward as the
  LM head); a mixture-of-experts layer counts the ``k`` experts one token is routed to
  (:mod:`specband.sim.moe` adds the experts that more tokens touch);
* EAGLE3 draft head, per token: one decoder layer whose q/k/v projections read
  ``[embedding; hidden]`` (2 x hidden inputs), the ``fc`` that folds the target's three
  hidden states (3 x hidden -> hidden) and an LM head over ``draft_vocab_size`` tokens; its
  input embedding is the target's (sglang ``eagle_worker.py``: ``set_embed``), so it is
  neither stored nor read.

A speculative step ``(steps, topk, num_draft_tokens)`` then costs ``num_draft_tokens`` target
tokens plus ``1 + (steps - 1) x topk`` draft tokens per request (sglang ``eagle_worker.py``:
one draft-extend token after verify, then ``steps - 1`` draft forwards of ``topk`` tokens),
which gives 9.23 GFLOPs per output token for (3,4,8) at accept 2.425 (published 9.24) and
5.33 for (3,2,4) at accept 2.129 (published 5.36).

Attention is counted separately (``attn_flops_per_token_ctx``: ``4 x heads x head_dim x L``
FLOPs per query token per context token; ``kv_bytes_per_token``: K and V of every layer).
A spec also says how tensor parallelism splits it (:mod:`specband.sim.parallel`): which bytes
every rank reads whole (``replicated_bytes``), the k/v projections (replicated when the degree
exceeds the KV heads), the sizes a degree must divide.

The bundled configs (``specband/data/models``, sources in its ``README.md``) are the public
``config.json`` of ``unsloth/Llama-3.2-1B-Instruct`` and of the SpecForge EAGLE3 head for it,
with the head's ``rope_theta``/``rope_scaling`` set to the target's (the published head ships
10000/null, which collapses accept length on long prompts; upstream copied the target's values,
docs/FACTS.md §6), of ``meta-llama/Llama-3.1-8B-Instruct`` with the
``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`` head, ``Qwen/Qwen3-8B``, and the fleet models with
their EAGLE3 heads: ``meta-llama/Llama-3.3-70B-Instruct``, ``Qwen/Qwen3-30B-A3B-Instruct-2507``,
``meta-llama/Llama-4-Scout-17B-16E-Instruct`` and ``moonshotai/Kimi-K2-Instruct``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError
from specband.core.limits import MAX_CONFIG_FILE_BYTES, is_finite_number
from specband.files.fileio import read_text_bounded
from specband.files.hub import resolve_config_file
from specband.sim.architectures import config_dtype, spec_fields
from specband.sim.moe import MoESpec

__all__ = [
    "BUNDLED_DRAFT_CONFIG",
    "BUNDLED_TARGET_CONFIG",
    "ModelSpec",
    "bundled_model_config_path",
    "bundled_model_configs",
    "config_dtype",
    "load_model_spec",
    "read_model_config",
    "rope_mismatch",
    "rope_settings",
]

#: Names of the bundled configs under ``specband/data/models``.
BUNDLED_TARGET_CONFIG = "llama-3.2-1b-instruct"
BUNDLED_DRAFT_CONFIG = "eagle3-llama-3.2-1b-instruct"


@dataclass(frozen=True)
class ModelSpec:
    """What one forward pass of a model costs, per token and per pass.

    Attributes:
        name: label used in reports and sweep rows (the config's ``_name_or_path``, else the
            name the caller gave it by: a folder, a path, a hub id; a parsed dict: its architecture).
        weight_bytes: bytes the weights occupy in GPU memory, B.
        read_bytes_per_forward: weight bytes streamed from memory by one forward pass
            (every matrix used, the LM head included; the input embedding only gathers a
            few rows and is not counted), B.
        dense_flops_per_token: FLOPs of the dense linear layers per token (2 x params used).
        attn_flops_per_token_ctx: attention FLOPs per query token per context token.
        kv_bytes_per_token: K and V cache bytes per token over all layers, B.
        hidden_size: model width (for reports).
        vocab_size: logits per token (the draft's ``draft_vocab_size`` for a draft head).
        num_layers: decoder layers.
        rope_theta: RoPE base, or ``None`` when unknown.
        rope_scaling: RoPE scaling dict as in the config, or ``None``.
        is_eagle3_draft: True for an EAGLE3 draft head.
        architecture: the config's ``architectures[0]`` (else its ``model_type``).
        config_sha256: :func:`config_sha256` of the config: what the model is, however it was named.
        num_attention_heads: query heads (0: unknown; tensor-parallel checks then skip heads).
        num_kv_heads: key/value heads (0: latent attention, one latent per token shared by all
            heads, or unknown).
        head_dim: dimension of a query head.
        replicated_bytes: of ``read_bytes_per_forward``, the bytes every tensor-parallel rank
            holds and reads whole (routers, latent attention's down-projections, an EAGLE3
            head's ``fc``), B; they are also stored whole on every rank.
        replicated_flops_per_token: the FLOPs per token of those weights (every rank computes them).
        kv_proj_bytes: of ``read_bytes_per_forward``, the k and v projections (split by KV head,
            replicated on ranks beyond the KV heads), B.
        moe: the routed experts of a mixture-of-experts model (``None``: dense);
            ``read_bytes_per_forward`` and ``dense_flops_per_token`` count one token's ``k``
            experts, ``weight_bytes`` all of them.
        tp_dims: ``(config field, size)`` pairs a tensor-parallel degree must divide (the
            intermediate sizes; the heads are ``num_attention_heads``/``num_kv_heads``).
        quant_block: block size of block-quantized weights (FP8 ``weight_block_size``, 128), 0
            without; a tensor-parallel shard of an intermediate size must be a multiple of it.
        quantization: the ``quantization_config`` method (``fp8``, ...), ``None`` without one.

    Raises:
        ConfigError: from ``__post_init__`` on a non-positive size.
    """

    name: str
    weight_bytes: float
    read_bytes_per_forward: float
    dense_flops_per_token: float
    attn_flops_per_token_ctx: float
    kv_bytes_per_token: float
    hidden_size: int = 0
    vocab_size: int = 0
    num_layers: int = 0
    rope_theta: float | None = None
    rope_scaling: Mapping[str, Any] | None = None
    is_eagle3_draft: bool = False
    architecture: str = ""
    config_sha256: str | None = None
    num_attention_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    replicated_bytes: float = 0.0
    replicated_flops_per_token: float = 0.0
    kv_proj_bytes: float = 0.0
    moe: MoESpec | None = None
    tp_dims: tuple[tuple[str, int], ...] = ()
    quant_block: int = 0
    quantization: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "weight_bytes",
            "read_bytes_per_forward",
            "dense_flops_per_token",
            "attn_flops_per_token_ctx",
            "kv_bytes_per_token",
        ):
            value = getattr(self, name)
            if not is_finite_number(value):
                raise ConfigError(f"model spec '{self.name}': {name} must be a finite number, got {value!r}")
            if value < 0 or (value == 0 and name != "attn_flops_per_token_ctx"):
                raise ConfigError(f"model spec '{self.name}': {name} must be > 0, got {value!r}")
        for name in ("replicated_bytes", "replicated_flops_per_token", "kv_proj_bytes"):
            value = getattr(self, name)
            if not (is_finite_number(value) and value >= 0):
                raise ConfigError(f"model spec '{self.name}': {name} must be a number >= 0, got {value!r}")
        if self.replicated_bytes + self.kv_proj_bytes > self.read_bytes_per_forward:
            raise ConfigError(f"model spec '{self.name}': replicated and k/v bytes exceed the bytes a forward reads")

    @classmethod
    def from_hf_config(
        cls, config: Mapping[str, Any], *, draft: bool | None = None, source: str = "<config>"
    ) -> ModelSpec:
        """Derive the spec from a Hugging Face ``config.json`` dict (the families of
        :mod:`specband.sim.architectures`: dense Llama/Qwen, Qwen-MoE, Mixtral, Llama-4,
        DeepSeek-V3/Kimi-K2, EAGLE3 heads).

        Args:
            config: the parsed ``config.json``.
            draft: treat it as an EAGLE3 draft head; ``None`` decides from ``architectures``
                (a name containing ``Eagle3``).
            source: file name for error messages.

        Raises:
            ConfigError: a required field is missing or not a positive integer, two spellings
                of one parameter disagree, an unknown ``torch_dtype`` or quantization, or an
                architecture specband does not model (one line naming the file and field).
        """
        if not isinstance(config, Mapping):
            raise ConfigError(f"{source}: a model config must be a JSON object")
        fields = spec_fields(config, draft=draft, source=source)
        rope_theta, rope_scaling = rope_settings(_text_config(config), source)
        name = str(config.get("_name_or_path") or fields["architecture"])
        return cls(
            name=name, rope_theta=rope_theta, rope_scaling=rope_scaling, config_sha256=config_sha256(config), **fields
        )

    @property
    def is_moe(self) -> bool:
        """Whether the model has routed experts."""
        return self.moe is not None


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text model's fields (Llama-4's ``text_config``) over the top level's, for RoPE."""
    text = config.get("text_config")
    return {**config, **text} if isinstance(text, Mapping) else config


#: Keys of a ``config.json`` that name or stamp it rather than define the model: left out of
#: :func:`config_sha256` (a folder's copy and the hub's differ in them only).
CONFIG_NAMING_KEYS: tuple[str, ...] = ("_name_or_path", "_commit_hash", "transformers_version")


def config_sha256(config: Mapping[str, Any]) -> str:
    """The identity of a model config: the sha256 of its JSON with sorted keys and no spaces,
    :data:`CONFIG_NAMING_KEYS` left out, so that the same ``config.json`` has the same hash
    whether it was given as a folder, a path, a bundled name or a hub id."""
    import hashlib

    body = {k: v for k, v in config.items() if k not in CONFIG_NAMING_KEYS}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _rope_block(config: Mapping[str, Any], source: str) -> Mapping[str, Any] | None:
    """The RoPE dict of a config: transformers 5's ``rope_parameters`` (the
    ``full_attention`` entry when nested by layer type), else ``rope_scaling``."""
    for key in ("rope_parameters", "rope_scaling"):
        block = config.get(key)
        if block is None:
            continue
        if not isinstance(block, Mapping):
            raise ConfigError(f"{source}: field '{key}': expected an object or null, got {block!r}")
        nested = [v for v in block.values() if isinstance(v, Mapping)]
        if nested:
            block = block.get("full_attention", nested[0])
        return block
    return None


def rope_settings(config: Mapping[str, Any], source: str = "<config>") -> tuple[float | None, dict[str, Any] | None]:
    """``(rope_theta, rope_scaling)`` of a Hugging Face config in either layout, normalised
    so that the two compare equal for the same RoPE: the classic top-level ``rope_theta``
    and ``rope_scaling``, or transformers 5's ``rope_parameters`` holding both (nested by
    layer type for some models; ``type`` read as ``rope_type``). A scaling of type
    ``default`` with nothing else is ``None``. Source: transformers 5
    ``modeling_rope_utils.RotaryEmbeddingConfigMixin.standardize_rope_params``; sglang
    0.5.23 ``srt/configs/model_config.py`` reads ``rope_parameters`` before ``rope_scaling``.

    Raises:
        ConfigError: ``"<source>: field 'rope_theta': ..."`` for a theta that is not a
            positive number, or an object field of the wrong type.
    """
    block = _rope_block(config, source)
    theta = config.get("rope_theta")
    if block is not None and block.get("rope_theta") is not None:
        theta = block["rope_theta"]
    if theta is not None and not (is_finite_number(theta) and theta > 0):
        raise ConfigError(f"{source}: field 'rope_theta': expected a positive number, got {theta!r}")
    scaling = None
    if block is not None:
        scaling = {("rope_type" if k == "type" else k): v for k, v in block.items() if k != "rope_theta"}
        if scaling in ({}, {"rope_type": "default"}):
            scaling = None
    return (None if theta is None else float(theta)), scaling


def bundled_model_config_path(name: str) -> Path:
    """Path of a bundled ``config.json`` (``specband/data/models/<name>.json``).

    Raises:
        ConfigError: no such bundled config.
    """
    path = Path(str(resources.files("specband").joinpath(f"data/models/{name}.json")))
    if not path.is_file():
        raise ConfigError(
            f"no model config file or bundled config named '{name}' (bundled: {', '.join(bundled_model_configs())})"
        )
    return path


def bundled_model_configs() -> list[str]:
    """Names of the bundled ``config.json`` files (``specband/data/models``)."""
    folder = Path(str(resources.files("specband").joinpath("data/models")))
    return sorted(p.stem for p in folder.glob("*.json"))


def read_model_config(config: str | Path) -> tuple[dict[str, Any], str]:
    """The parsed ``config.json`` named by ``config`` (a file, a model folder, a bundled
    config's name or a hub id) and the file it came from.

    Raises:
        ConfigError: one line naming the file (missing, unreadable, invalid JSON, not an
            object). :class:`specband.files.hub.HubError`: one line naming the hub id (no such
            repo or file: exit 2; not in the cache with the hub unreachable: exit 5).
    """
    path = Path(config)
    if not path.exists() and str(config) in bundled_model_configs():
        path = bundled_model_config_path(str(config))
    else:
        path = resolve_config_file(config)  # a folder's config.json, or a hub id's
    try:
        data = json.loads(
            read_text_bounded(path, limit=MAX_CONFIG_FILE_BYTES, kind="model config file", error=ConfigError)
        )
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such model config file (bundled configs: {', '.join(bundled_model_configs())})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read model config ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except ConfigError:
        raise  # read_text_bounded's refusal (a device, FIFO, too large): a ValueError too
    except (RecursionError, ValueError):
        raise ConfigError(f"{path}: not valid JSON (nested too deeply, or a number too long)") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a model config must be a JSON object")
    return data, str(path)


def load_model_spec(
    config: str | Path | Mapping[str, Any] | ModelSpec | None, *, draft: bool, default: str | None = None
) -> ModelSpec:
    """A :class:`ModelSpec` from a ``config.json`` path, the name of a bundled config (see
    :func:`bundled_model_configs`), a parsed dict, a spec, or ``None`` (the bundled config
    named ``default``).

    Args:
        config: what the caller gave.
        draft: whether this is the EAGLE3 draft head (forces the draft layout).
        default: bundled config name used when ``config`` is ``None``.

    Raises:
        ConfigError: unreadable file, invalid JSON, or a bad config (see
            :meth:`ModelSpec.from_hf_config`).
    """
    if isinstance(config, ModelSpec):
        return config
    if config is None:
        if default is None:
            raise ConfigError("no model config given")
        config = bundled_model_config_path(default)
    if isinstance(config, Mapping):
        return ModelSpec.from_hf_config(config, draft=draft)
    data, source = read_model_config(config)
    spec = ModelSpec.from_hf_config(data, draft=draft, source=source)
    if not data.get("_name_or_path"):  # the name the user gave (a folder, a path, a hub id), not the architecture
        spec = replace(spec, name=str(config))
    return spec


def rope_mismatch(target: ModelSpec, draft: ModelSpec) -> str | None:
    """A warning when the draft head's RoPE settings differ from the target's, else ``None``.

    Source: docs/FACTS.md §6 (a SpecForge head with ``rope_theta``/``rope_scaling`` 10000/null
    against the target's 500000/llama3 collapses accept length to about 1.0 on long prompts).
    """
    if target.rope_theta is None or draft.rope_theta is None:
        return None
    if target.rope_theta != draft.rope_theta or dict(target.rope_scaling or {}) != dict(draft.rope_scaling or {}):
        return (
            f"draft rope_theta/rope_scaling ({draft.rope_theta:g}/{draft.rope_scaling}) differ from the "
            f"target's ({target.rope_theta:g}/{target.rope_scaling}): accept length collapses to about 1.0 "
            f"on long prompts; copy the target's values into the draft config.json"
        )
    return None

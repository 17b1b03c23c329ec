"""Model sizes, bytes and FLOPs of a target model and its EAGLE3 draft head, derived from a
Hugging Face ``config.json`` (or given directly).

What a decode step costs is counted the way docs/FACTS.md §6 counts it (dense linear layers only,
2 FLOPs per multiply-accumulate):

* target, per token: ``2 x (L x (q + k + v + o + mlp) + lm_head)`` parameters, i.e. 2.47 GFLOPs
  for Llama-3.2-1B (tied embedding: the 128256 x 2048 matrix is read once per forward as the
  LM head);
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
Mixture-of-experts configs are not supported (no active-parameter count is derived).

The bundled configs (``specband/data/models``) are the public ``config.json`` of
``unsloth/Llama-3.2-1B-Instruct`` and of the SpecForge EAGLE3 head for it, with the head's
``rope_theta``/``rope_scaling`` set to the target's (the published head ships 10000/null,
which collapses accept length on long prompts; upstream copied the target's values, docs/FACTS.md §6),
and of ``meta-llama/Llama-3.1-8B-Instruct`` with the ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``
head (for what-if runs; its acceptance is not calibrated).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError
from specband.core.limits import MAX_CONFIG_FILE_BYTES, is_finite_number, is_int
from specband.files.fileio import read_text_bounded
from specband.files.hub import resolve_config_file

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

_DTYPE_BYTES = {
    "float32": 4.0,
    "float": 4.0,
    "float16": 2.0,
    "half": 2.0,
    "bfloat16": 2.0,
    "float8_e4m3fn": 1.0,
    "float8_e5m2": 1.0,
}


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

    @classmethod
    def from_hf_config(
        cls, config: Mapping[str, Any], *, draft: bool | None = None, source: str = "<config>"
    ) -> ModelSpec:
        """Derive the spec from a Hugging Face ``config.json`` dict (Llama-family layout:
        gated MLP, grouped-query attention).

        Args:
            config: the parsed ``config.json``.
            draft: treat it as an EAGLE3 draft head; ``None`` decides from ``architectures``
                (a name containing ``Eagle3``).
            source: file name for error messages.

        Raises:
            ConfigError: a required field is missing or not a positive integer, an unknown
                ``torch_dtype``, or a mixture-of-experts config.
        """
        if not isinstance(config, Mapping):
            raise ConfigError(f"{source}: a model config must be a JSON object")
        for moe_key in ("num_local_experts", "num_experts", "n_routed_experts"):
            if config.get(moe_key):
                raise ConfigError(f"{source}: field '{moe_key}': mixture-of-experts models are not supported")

        def need_int(key: str, default: int | None = None) -> int:
            value = config.get(key, default)
            if not is_int(value) or value <= 0:
                raise ConfigError(f"{source}: field '{key}': expected a positive integer, got {value!r}")
            return value

        hidden = need_int("hidden_size")
        layers = need_int("num_hidden_layers")
        heads = need_int("num_attention_heads")
        kv_heads = need_int("num_key_value_heads", heads)
        if config.get("head_dim") is not None:
            head_dim = need_int("head_dim")
        else:
            if hidden % heads:
                raise ConfigError(f"{source}: field 'head_dim': missing and hidden_size is not a multiple of heads")
            head_dim = hidden // heads
        intermediate = need_int("intermediate_size")
        vocab = need_int("vocab_size")
        nbytes = _DTYPE_BYTES[config_dtype(config, source) or "bfloat16"]
        archs = config.get("architectures") or []
        if not isinstance(archs, list):
            raise ConfigError(f"{source}: field 'architectures': expected a list of names")
        is_draft = any("eagle3" in str(a).lower() for a in archs) if draft is None else bool(draft)
        rope_theta, rope_scaling = rope_settings(config, source)

        q_out = heads * head_dim
        kv_out = kv_heads * head_dim
        attn_in = 2 * hidden if is_draft else hidden
        attn_params = attn_in * q_out + 2 * attn_in * kv_out + q_out * hidden
        mlp_params = 3 * hidden * intermediate
        layer_params = layers * (attn_params + mlp_params)
        if is_draft:
            draft_vocab = config.get("draft_vocab_size") or vocab
            if not is_int(draft_vocab) or draft_vocab <= 0:
                raise ConfigError(f"{source}: field 'draft_vocab_size': expected a positive integer")
            target_hidden = config.get("target_hidden_size") or hidden
            fc_params = 3 * target_hidden * hidden
            head_params = hidden * draft_vocab
            used = layer_params + fc_params + head_params
            stored = used
            logits = draft_vocab
        else:
            head_params = hidden * vocab
            used = layer_params + head_params
            tied = bool(config.get("tie_word_embeddings", False))
            stored = layer_params + vocab * hidden + (0 if tied else head_params)
            logits = vocab
        architecture = str(archs[0] if archs else config.get("model_type", "model"))
        name = str(config.get("_name_or_path") or architecture)
        return cls(
            name=name,
            weight_bytes=float(stored * nbytes),
            read_bytes_per_forward=float(used * nbytes),
            dense_flops_per_token=float(2 * used),
            attn_flops_per_token_ctx=float(4 * q_out * layers),
            kv_bytes_per_token=float(2 * layers * kv_out * nbytes),
            hidden_size=hidden,
            vocab_size=int(logits),
            num_layers=layers,
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            is_eagle3_draft=is_draft,
            architecture=architecture,
            config_sha256=config_sha256(config),
        )


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


def config_dtype(config: Mapping[str, Any], source: str = "<config>") -> str | None:
    """The weights' dtype of a Hugging Face config (``torch_dtype``, or transformers 5's
    ``dtype``) without a ``torch.`` prefix, or ``None`` when the config names none.

    Raises:
        ConfigError: ``"<source>: field 'torch_dtype': unknown dtype ..."``.
    """
    key = "torch_dtype" if config.get("torch_dtype") is not None else "dtype"
    dtype = config.get(key)
    if dtype is None:
        return None
    if not isinstance(dtype, str) or dtype.replace("torch.", "") not in _DTYPE_BYTES:
        raise ConfigError(f"{source}: field '{key}': unknown dtype {dtype!r}")
    return dtype.replace("torch.", "")


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

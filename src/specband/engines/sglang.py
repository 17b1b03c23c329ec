"""sglang as the engine (``--engine sglang``, the default): :class:`SglangEngine`, what it is and
how it spells a config (every contract and extended action, trees included:
``--speculative-algorithm EAGLE3 --speculative-num-steps S --speculative-eagle-topk K
--speculative-num-draft-tokens D``, :func:`specband.contract.actions.sglang_cli_args`), with its
serving half (:class:`specband.engines.sglang_serving.SglangServing`: launch line, versions,
``/get_server_info``, the adaptive-speculation schedule) imported the first time something
serves or launches.

A pick needs only this module: ``recommend`` stays cold-fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING

from specband.contract.actions import ACTIONS, Action, server_args_kwargs, sglang_cli_args

if TYPE_CHECKING:
    from specband.engines.base import Engine, EngineServing

__all__ = ["ENGINE", "SGLANG_LAUNCHER", "SglangEngine"]

#: sglang's launcher (docs/FACTS.md §1): ``--server-command``'s default for ``--engine sglang``.
SGLANG_LAUNCHER = "python -m sglang.launch_server"


class SglangEngine:
    """sglang (:class:`specband.engines.base.Engine`; see the module docstring). A subclass with
    its own ``name``, ``display_name`` and :meth:`speculative_flags` is an engine that serves as
    sglang does and spells its flags its own way (its launch line takes them from the engine)."""

    name = "sglang"
    display_name = "sglang"
    actions: tuple[Action, ...] = ACTIONS
    schedule_runs = "sglang's adaptive tiers run"
    launcher = SGLANG_LAUNCHER
    draft_flag = "--speculative-draft-model-path"

    @cached_property
    def serving(self) -> EngineServing:
        """:class:`~specband.engines.sglang_serving.SglangServing` of this engine."""
        from specband.engines.sglang_serving import SglangServing  # the serving half: off a cold `recommend`

        return SglangServing(self)

    def runs(self, action: Action) -> bool:
        """Every action of the contract and extended sets."""
        return True

    def check_actions(self, actions: Sequence[Action], option: str = "--actions") -> None:
        """Nothing to refuse: sglang runs every action of the contract and extended sets."""

    def speculative_flags(self, action: Action, draft_model: str | None) -> list[str]:
        """:func:`~specband.contract.actions.sglang_cli_args` (``--speculative-draft-model-path``
        only when ``draft_model`` is given)."""
        return sglang_cli_args(action, draft_model)

    def speculative_kwargs(self, action: Action, draft_model: str | None) -> dict[str, object]:
        """sglang's ``ServerArgs`` keyword arguments
        (:func:`~specband.contract.actions.server_args_kwargs`)."""
        return server_args_kwargs(action, draft_model)


#: The engine :func:`specband.engines.base.get_engine` gives for sglang.
ENGINE: Engine = SglangEngine()

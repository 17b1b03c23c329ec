"""The faults the emulator injects (``specband emulate --fault KIND[:key=value,...]``).

Kinds (:data:`FAULT_KINDS`): ``launch_failure``, ``oom_at_capture``, ``die_mid_batch``
(parameter ``after_steps``, default 50 decode steps after the first
``max_running_requests`` requests finished), ``missing_step_times``, ``slow_health``
(parameter ``delay_s``, emulated seconds of 503 before /health answers 200; default
never), ``hung_requests`` (``/generate`` never answers), ``draft_rejected`` (every draft
token rejected: accept length 1, as with a rope mismatch); ``oom_at_capture:hang=1``
logs the out-of-memory and keeps running without ever becoming healthy, as sglang can.
Keys ``bs`` (max running requests), ``steps``, ``topk``, ``draft`` and ``mem``
(mem fraction) restrict a fault to matching launches (:meth:`Fault.applies_to`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specband.core.errors import ConfigError
from specband.emulator.launchargs import LaunchArgs

__all__ = ["FAULT_KINDS", "Fault", "parse_fault"]

#: Faults ``--fault`` can inject.
FAULT_KINDS: tuple[str, ...] = (
    "launch_failure",
    "oom_at_capture",
    "die_mid_batch",
    "missing_step_times",
    "slow_health",
    "hung_requests",
    "draft_rejected",
)
_MATCH_KEYS = {
    "bs": "max_running_requests",
    "steps": "steps",
    "topk": "topk",
    "draft": "draft",
    "mem": "mem_fraction_static",
}
_PARAM_KEYS = {"after_steps", "delay_s", "hang"}


@dataclass(frozen=True)
class Fault:
    """One injected fault.

    Attributes:
        kind: one of :data:`FAULT_KINDS`.
        match: launch attribute filters (``bs``, ``steps``, ``topk``, ``draft``, ``mem``).
        params: ``after_steps`` (die_mid_batch), ``delay_s`` (slow_health).
    """

    kind: str
    match: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, float] = field(default_factory=dict)

    def applies_to(self, launch: LaunchArgs) -> bool:
        """True when every filter equals the launch's value."""
        values = {
            "bs": launch.max_running_requests,
            "steps": launch.action.speculative_num_steps,
            "topk": launch.action.speculative_eagle_topk,
            "draft": launch.action.speculative_num_draft_tokens,
            "mem": launch.mem_fraction_static,
        }
        return all(abs(values[k] - v) < 1e-9 for k, v in self.match.items())


def parse_fault(text: str) -> Fault:
    """Parse ``KIND[:key=value,...]`` (e.g. ``oom_at_capture:bs=16,steps=5``).

    Raises:
        ConfigError: an unknown kind or key, or a non-numeric value.
    """
    kind, _, rest = text.strip().partition(":")
    if kind not in FAULT_KINDS:
        raise ConfigError(f"unknown fault {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
    match: dict[str, float] = {}
    params: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"fault {text!r}: expected key=value, got {item!r}")
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"fault {text!r}: {key} must be a number, got {value!r}") from None
        if key in _MATCH_KEYS:
            match[key] = number
        elif key in _PARAM_KEYS:
            params[key] = number
        else:
            raise ConfigError(
                f"fault {text!r}: unknown key {key!r}; expected {', '.join([*_MATCH_KEYS, *sorted(_PARAM_KEYS)])}"
            )
    return Fault(kind, match, params)

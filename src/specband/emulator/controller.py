"""sglang's adaptive speculation controller, as the emulator runs it: per batch-size tier, an EMA of
the accept length picks the next candidate step count (``AdaptiveStepSlot``, sglang 0.5.23,
``srt/speculative/adaptive_spec_params.py``)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from specband.engines.schedule_files import SLOT_DEFAULTS

if TYPE_CHECKING:
    pass


class AdaptiveSlot:
    """One tier's step controller, as sglang 0.5.23's ``AdaptiveStepSlot``
    (``srt/speculative/adaptive_spec_params.py``): an EMA of accepted draft tokens per
    request, updated every verify while speculating; after ``warmup_batches`` batches,
    every ``update_interval`` batches it moves down the sorted candidate steps while the
    EMA is at or below ``prev - 0.5 + down_hysteresis`` (``0.5 + down_hysteresis`` when the
    lower candidate is 0), else up while it is above ``current - 0.5 + up_hysteresis``;
    from 0 it probes the next candidate up. ``ceiling_coeff > 0`` caps a non-rising target
    at ``max(1, ceil(ema * ceiling_coeff))``. A test holds it to sglang's class.

    Args:
        initial_steps: ``--speculative-num-steps``; a step count not in the candidates
            starts at the middle candidate.
        cfg: the tier entry (``candidate_steps`` and optional knobs).
    """

    def __init__(self, initial_steps: int, cfg: Mapping[str, Any]) -> None:
        self.candidate_steps = sorted({int(s) for s in cfg["candidate_steps"]})
        knobs = {k: cfg.get(k, v) for k, v in SLOT_DEFAULTS.items()}
        self.ema_alpha = float(knobs["ema_alpha"])
        self.update_interval = int(knobs["update_interval"])
        self.warmup_batches = int(knobs["warmup_batches"])
        self.down_hysteresis = float(knobs["down_hysteresis"])
        self.up_hysteresis = float(knobs["up_hysteresis"])
        self.ceiling_coeff = float(knobs["ceiling_coeff"])
        middle = self.candidate_steps[len(self.candidate_steps) // 2]
        self.current_steps = initial_steps if initial_steps in self.candidate_steps else middle
        self.ema_accept_len = float(self.current_steps - 1)
        self.batches = 0

    def update(self, accepted_drafts: Sequence[int]) -> bool:
        """Feed one verify's accepted draft tokens per request; True when the step count changed."""
        if not accepted_drafts:
            return False
        if self.current_steps > 0:
            mean = sum(accepted_drafts) / len(accepted_drafts)
            self.ema_accept_len += self.ema_alpha * (mean - self.ema_accept_len)
        self.batches += 1
        if self.batches <= self.warmup_batches or (self.batches - self.warmup_batches) % self.update_interval:
            return False
        target = self._target()
        changed = target != self.current_steps
        self.current_steps = target
        return changed

    def _target(self) -> int:
        steps, old = self.candidate_steps, self.current_steps
        i = steps.index(old)
        if old == 0:
            target = steps[min(i + 1, len(steps) - 1)]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            return target
        start = i
        while (
            i > 0 and self.ema_accept_len <= (0.5 if steps[i - 1] == 0 else steps[i - 1] - 0.5) + self.down_hysteresis
        ):
            i -= 1
        if i == start:
            while i < len(steps) - 1 and self.ema_accept_len > steps[i] - 0.5 + self.up_hysteresis:
                i += 1
        if self.ceiling_coeff > 0 and steps[i] <= old:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            while i > 0 and steps[i] > ceiling:
                i -= 1
        return steps[i]


class AdaptiveController:
    """Routes a running batch size to its tier's :class:`AdaptiveSlot`, as sglang 0.5.23's
    ``AdaptiveSpeculativeParams`` without CUDA-graph padding: the tier with the largest
    key <= the batch size, the smallest tier below every key.

    Args:
        entries: tier key -> entry, from :func:`check_sglang_adaptive_config`.
        initial_steps: ``--speculative-num-steps``.
    """

    def __init__(self, entries: Mapping[int, Mapping[str, Any]], initial_steps: int) -> None:
        self.keys = sorted(entries)
        self.slots = {k: AdaptiveSlot(initial_steps, entries[k]) for k in self.keys}

    def slot_for(self, batch_size: int) -> AdaptiveSlot:
        """The slot serving ``batch_size``."""
        return self.slots[self.keys[max(0, bisect.bisect_right(self.keys, batch_size) - 1)]]

    def steps_for(self, batch_size: int) -> int:
        """The step count the engine runs at ``batch_size`` now."""
        return self.slot_for(batch_size).current_steps

    def on_verify(self, accepted_drafts: Sequence[int], batch_size: int) -> int | None:
        """Feed a verify's accepted drafts to the batch size's slot; the new step count
        when it switched, else ``None``."""
        slot = self.slot_for(batch_size)
        return slot.current_steps if slot.update(accepted_drafts) else None

"""Drift: the workload's acceptance measured live, against the interval the plan expects.

:class:`AcceptanceWindows` turns successive server samples into windowed accept lengths: on
vLLM from the spec-decode counters' difference over the window (``1 + accepted / drafts``, and
K = draft tokens / drafts: the chain run in the window), on sglang from its accept-length gauge
averaged over the window, weighted by the output tokens of each interval (the gauge is the mean
of the scheduler's last log interval). A window whose config is not known (sglang's adaptive
speculation moves its steps with the batch size, and the server does not say which ran) is not
checked, and :class:`DriftCheck` says so once.

:class:`DriftCheck` compares each window with the plan's 95 % interval for that config
(:attr:`specband.govern.plan.GovernorPlan.acceptance`): the first window outside it is drift
(reported once; the governor then writes the measured windows as a sweep-format JSONL file that
``--acceptance-from`` reads, and prints the plan on the measured acceptance).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from specband.contract.actions import chain_action
from specband.govern.plan import PlanFigure
from specband.govern.readings import ServerSample

__all__ = ["AcceptanceWindow", "AcceptanceWindows", "DriftCheck", "observation_line"]


@dataclass(frozen=True)
class AcceptanceWindow:
    """The acceptance measured over one window.

    Attributes:
        action: the config the server ran in it, or ``None`` when unknown.
        accept_length: tokens per verify step, bonus token included.
        weight: verify steps (vLLM) or output tokens (sglang) behind it.
        batch_size: the mean running batch over the window, rounded.
        t_end_s: when the window closed, s.
        span_s: its length, s.
    """

    action: tuple[int, int, int] | None
    accept_length: float
    weight: float
    batch_size: int
    t_end_s: float
    span_s: float


class AcceptanceWindows:
    """Windowed accept lengths from server samples (module docstring).

    Args:
        window_s: seconds per window.
        action: the config the server runs throughout (sglang without adaptive speculation),
            else ``None`` (vLLM: read from the counters; sglang adaptive: unknown).
        min_weight: the least verify steps (or output tokens) a window needs to count.
    """

    def __init__(self, window_s: float, action: tuple[int, int, int] | None, min_weight: float = 50.0) -> None:
        self.window_s = window_s
        self.action = action
        self.min_weight = min_weight
        self._start: ServerSample | None = None
        self._last: ServerSample | None = None
        self._gauge_sum = 0.0
        self._gauge_weight = 0.0
        self._bs_sum = 0.0
        self._n = 0

    def add(self, sample: ServerSample) -> AcceptanceWindow | None:
        """Feed one checked sample; a window when one closes (``None`` otherwise)."""
        if self._start is None or self._last is None:
            self._start = self._last = sample
            return None
        last = self._last
        if sample.accept_length is not None and sample.batch_size > 0:
            tokens = (
                sample.output_tokens_total - last.output_tokens_total
                if sample.output_tokens_total is not None and last.output_tokens_total is not None
                else 1.0
            )
            if tokens > 0:
                self._gauge_sum += sample.accept_length * tokens
                self._gauge_weight += tokens
        self._bs_sum += sample.batch_size
        self._n += 1
        self._last = sample
        if sample.t_s - self._start.t_s < self.window_s:
            return None
        window = self._close(self._start, sample)
        self._start, self._gauge_sum, self._gauge_weight, self._bs_sum, self._n = sample, 0.0, 0.0, 0.0, 0
        return window

    def _close(self, start: ServerSample, end: ServerSample) -> AcceptanceWindow | None:
        bs = round(self._bs_sum / self._n) if self._n else 0
        span = end.t_s - start.t_s
        if end.drafts_total is not None and start.drafts_total is not None:
            drafts = end.drafts_total - start.drafts_total
            accepted = (end.accepted_total or 0.0) - (start.accepted_total or 0.0)
            tokens = (end.draft_tokens_total or 0.0) - (start.draft_tokens_total or 0.0)
            if drafts < self.min_weight or accepted < 0 or tokens <= 0:
                return None
            k = tokens / drafts
            action = tuple(chain_action(round(k))) if abs(k - round(k)) < 1e-6 and round(k) >= 1 else None
            return AcceptanceWindow(action, 1.0 + accepted / drafts, drafts, bs, end.t_s, span)  # type: ignore[arg-type]
        if self._gauge_weight < self.min_weight:
            return None
        return AcceptanceWindow(
            self.action, self._gauge_sum / self._gauge_weight, self._gauge_weight, bs, end.t_s, span
        )


class DriftCheck:
    """Windows against the plan's acceptance intervals (module docstring).

    Args:
        expected: the plan's accept length per config (with its 95 % interval).
    """

    def __init__(self, expected: Mapping[tuple[int, int, int], PlanFigure]) -> None:
        self.expected = expected
        self.drifted: AcceptanceWindow | None = None
        self.outside: list[AcceptanceWindow] = []
        self._unchecked_said = False

    def check(self, window: AcceptanceWindow) -> tuple[str | None, bool]:
        """``(note, drift)``: a note to print once (an unchecked config), and whether this
        window is the first outside the plan's interval."""
        if window.action is None:
            if self._unchecked_said:
                return None, False
            self._unchecked_said = True
            return (
                f"acceptance {window.accept_length:.3f} measured, but the config the server ran is not known (adaptive "
                "speculation): drift is not checked"
            ), False
        figure = self.expected.get(window.action)
        if figure is None or figure.low is None or figure.high is None:
            if self._unchecked_said:
                return None, False
            self._unchecked_said = True
            return f"the plan holds no acceptance interval for {window.action}: drift is not checked", False
        if figure.contains(window.accept_length):
            return None, False
        self.outside.append(window)
        if self.drifted is not None:
            return None, False
        self.drifted = window
        return None, True


def observation_line(window: AcceptanceWindow, target: str | None, draft: str | None) -> str:
    """One measured window as a sweep-format JSONL line (``steps``, ``topk``,
    ``num_draft_tokens``, ``accept_length``, ``batch_size``), which ``--acceptance-from`` reads."""
    assert window.action is not None
    steps, topk, tokens = window.action
    rec = {
        "steps": steps,
        "topk": topk,
        "num_draft_tokens": tokens,
        "accept_length": round(window.accept_length, 6),
        "batch_size": max(1, window.batch_size),
        "provenance": "measured",
        "source": f"specband govern: a {window.span_s:.0f} s window of the server's counters "
        f"({window.weight:.0f} behind it)",
    }
    if target:
        rec["target_model"] = target
    if draft:
        rec["draft_model"] = draft
    return json.dumps(rec)

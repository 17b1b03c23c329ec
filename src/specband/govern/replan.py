"""What the plan would be on the acceptance measured live (drift): the measured windows are
written as a sweep-format JSONL (``--drift-out``, all or nothing), the first guess is simulated
again with ``--acceptance-from`` that file, and the tiers' flags and limits are printed beside
the plan's, labelled simulated, with the command that writes that plan. The server is never
restarted: a new plan takes a new launch of the server with its flags, which is the operator's
call."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from specband.core.errors import SpecbandError
from specband.files.fileio import write_text_atomic
from specband.govern.drift import AcceptanceWindow, DriftCheck, observation_line
from specband.govern.firstguess import first_guess_plan
from specband.govern.request import GovernRequest
from specband.govern.setup import Governed

__all__ = ["DriftReport", "drift_report"]


@dataclass(frozen=True)
class DriftReport:
    """The drift found: the lines printed once, and the file of measured windows."""

    lines: tuple[str, ...]
    path: Path | None


def drift_report(r: GovernRequest, gov: Governed, check: DriftCheck, window: AcceptanceWindow) -> DriftReport:
    """The report of the first window outside the plan's interval (module docstring); never
    raises (a failed re-plan is a line of the report)."""
    plan = gov.plan
    assert window.action is not None
    figure = plan.acceptance[window.action]
    lines = [
        f"drift: accept length {window.accept_length:.3f} measured over {window.span_s:.0f} s for {window.action} "
        f"(batch size ~{window.batch_size}), outside the plan's 95 % interval "
        f"[{figure.low:.3f}, {figure.high:.3f}] ({figure.basis or figure.source})"
    ]
    target, draft = gov.facts.target, gov.facts.draft
    text = "".join(observation_line(w, target, draft) + "\n" for w in check.outside)
    try:
        path = write_text_atomic(r.drift_out, text, error=SpecbandError)
    except SpecbandError as exc:
        return DriftReport((*lines, f"drift: the measured acceptance could not be written: {exc}"), None)
    lines.append(f"drift: the measured acceptance is in {path} (measured; --acceptance-from reads it)")
    model = plan.model
    profile = model.get("profile")
    if not profile:
        lines.append("drift: the plan names no simulator profile: no plan on the measured acceptance is simulated")
        return DriftReport(tuple(lines), path)
    try:
        new = first_guess_plan(
            profile,
            model.get("target_config"),
            model.get("draft_config"),
            acceptance_from=str(path),
            batch_sizes=[t.planned_batch_size for t in plan.tiers],
            gpu_range=gov.ranges[0],
            range_source=plan.gpu.range_source,
            chains_only=not any(a[1] > 1 for a in gov.engine.actions),
            extra_actions=[window.action],
            band=plan.band,
        )
    except SpecbandError as exc:
        lines.append(f"drift: the plan on the measured acceptance could not be simulated: {exc}")
        return DriftReport(tuple(lines), path)
    lines.append("drift: the plan on the measured acceptance (SIMULATED, not measured; the server is not restarted):")
    for old, tier in zip(plan.tiers, new.tiers, strict=True):
        moved = "" if (old.action, old.power_limit_w) == (tier.action, tier.power_limit_w) else " (changed)"
        lines.append(
            f"  tier {tier.label}: {old.action} at {old.power_limit_w:g} W -> {tier.action} at "
            f"{tier.power_limit_w:g} W{moved}"
        )
    command = ["specband", "govern", "--write-plan", "specband-govern-plan.json", "--gpu", profile]
    for flag, value in (("--target-config", model.get("target_config")), ("--draft-config", model.get("draft_config"))):
        if value:
            command += [flag, value]
    command += ["--acceptance-from", str(path), "--tiers", ",".join(str(t.planned_batch_size) for t in plan.tiers)]
    lines.append(f"drift: to write that plan: {shlex.join(command)}")
    return DriftReport(tuple(lines), path)

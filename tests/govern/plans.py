"""A small hand-made plan for the loop's tests (no simulation)."""

from __future__ import annotations

from pathlib import Path

from specband.govern.plan import GovernorPlan, PlanFigure, PlanGpu, PlanTier


def small_plan(*, acceptance: float | None = None) -> GovernorPlan:
    """Tiers 1-4 at 300 W, 5-16 at 400 W, 17+ at 600 W on a 200-700 W GPU; with
    ``acceptance``, the plan expects (3,1,4) to accept that (+-3 %)."""
    gpu = PlanGpu("h100-sxm", "H100_SXM5_80GB", 200.0, 700.0, "a test")
    tiers = (
        PlanTier(1, 4, 1, (3, 1, 4), 300.0, "simulated", {"utilization": PlanFigure(0.965, "simulated")}),
        PlanTier(5, 16, 8, (3, 1, 4), 400.0, "simulated"),
        PlanTier(17, None, 32, (3, 1, 4), 600.0, "simulated"),
    )
    accept = (
        {}
        if acceptance is None
        else {(3, 1, 4): PlanFigure(acceptance, "simulated", acceptance * 0.97, acceptance * 1.03)}
    )
    return GovernorPlan(tiers, gpu, "a hand-made test plan", acceptance=accept)


def plan_file(folder: Path, **kwargs: float) -> Path:
    path = folder / "plan.json"
    path.write_text(small_plan(**kwargs).dumps())  # type: ignore[arg-type]
    return path

"""A :class:`~specband.harness.job.SweepJob` built in code, as a library user or a benchmark
builds one (without ``build_sweep`` and its checks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specband.engines.base import EngineVersion
from specband.harness.job import SweepJob
from specband.harness.runner import MeasureSettings


def sweep_job(settings: MeasureSettings, out: Path, **fields: Any) -> SweepJob:
    """The job of ``settings`` writing ``out``; ``fields`` are its other fields (the grid, the
    device, the pool, ...); its engine release is the one ``settings`` spells the flags for."""
    version = EngineVersion(settings.server.engine_version, "the test's settings", None)
    return SweepJob(out=out, settings=settings, version=version, **fields)

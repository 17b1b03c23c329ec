"""A sweep as one typed value: :class:`SweepJob`, what :func:`specband.harness.sweep.run_sweep`
reads, and :class:`SweepDevice`, the telemetry it opens.

:func:`specband.harness.request.build_sweep` builds the job from ``specband sweep``'s options
and makes every check that needs no lock on the output file; the job then travels whole (the
sweep, ``--dry-run``, the summary read it) instead of being unpacked into arguments. A test or
a benchmark may build one directly (every field but ``out``, ``settings`` and ``version`` has the
default of ``specband sweep``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import ACTIONS, Action
from specband.core.errors import ConfigError
from specband.devices import DeviceSpec, open_device
from specband.devices.base import GpuDevice
from specband.engines.base import EngineVersion
from specband.harness.fleet import WorkerSetup
from specband.harness.pipeline import DEFAULT_BATCH_SIZES, SweepPlan, grid
from specband.harness.resume import planned_sweep
from specband.harness.runner import MeasureSettings
from specband.harness.shards import ShardSpec
from specband.harness.workers import WorkerPool

__all__ = ["PredictSetup", "SweepDevice", "SweepJob"]

#: A GPU name's words -> the built-in simulator profile ``--plan predict`` uses for it.
_GPU_PROFILES: tuple[tuple[str, str], ...] = (
    ("h200", "h200"),
    ("h100", "h100-sxm"),
    ("a100", "a100-sxm4-80gb"),
    ("4060", "rtx4060-laptop"),
)


@dataclass(frozen=True)
class PredictSetup:
    """What ``sweep --plan predict`` simulates (:mod:`specband.harness.predict`).

    Attributes:
        profile: the simulator profile (a built-in name or a file); ``None``: the one of the
            GPU's name, found when the sweep opens the GPU (:meth:`profile_for`).
        target_config, draft_config: the models' ``config.json`` paths, or ``None`` for the
            bundled Llama-3.2-1B pair.
        observations: accept lengths measured elsewhere (``--acceptance-from FILE``:
            :class:`specband.sim.acceptance_fit.AcceptanceObservation` s), fitted with the sweep's rows.
    """

    profile: str | None = None
    target_config: str | None = None
    draft_config: str | None = None
    observations: tuple[Any, ...] = ()

    def profile_for(self, gpu_name: str | None) -> str:
        """The profile: :attr:`profile`, else the built-in one whose GPU ``gpu_name`` names.

        Raises:
            ConfigError: no built-in profile matches ``gpu_name``.
        """
        if self.profile is not None:
            return self.profile
        key = "".join(ch for ch in (gpu_name or "").lower() if ch.isalnum())
        for word, profile in _GPU_PROFILES:
            if word in key:
                return profile
        raise ConfigError(
            f"--plan predict: no calibrated simulator profile for the GPU {gpu_name!r}; name one with --profile "
            f"(built-in: {', '.join(p for _, p in _GPU_PROFILES)}, or a TOML file)"
        )

    def model(self, gpu_name: str | None) -> Any:
        """The performance model the predictions come from (:func:`specband.sim.build_model`).

        Raises:
            ConfigError: as :meth:`profile_for`; an unreadable profile or config.
        """
        from specband.sim.model import build_model  # lazy: the simulator only for a predicted sweep

        return build_model(self.profile_for(gpu_name), target_config=self.target_config, draft_config=self.draft_config)


@dataclass(frozen=True)
class SweepDevice:
    """The telemetry of a one-GPU sweep, opened once the sweep holds its lock and every check
    passed (so that a refused sweep touches no device, e.g. creates no emulated GPU state file).

    Attributes:
        kind: :func:`specband.devices.open_device`'s ``kind`` (``--device``, ``auto`` already
            read as ``emulated`` for ``specband emulate``, ``none`` for ``--cpu``).
        index: the NVML index (``--gpu-index``, 0 when not given).
        power_limit_w: ``--power-limit``, W: the limit used when the device gives none.
        plugged: the device plugged in for ``--device emulated``, or ``None``.
    """

    kind: str = "auto"
    index: int = 0
    power_limit_w: float | None = None
    plugged: DeviceSpec | None = None

    def open(self) -> GpuDevice:
        """The opened device (the caller closes it).

        Raises:
            as :func:`specband.devices.open_device`.
        """
        return open_device(self.kind, index=self.index, power_limit_w=self.power_limit_w, plugged=self.plugged)


@dataclass(frozen=True, kw_only=True)
class SweepJob:
    """A checked sweep, ready to run (:func:`specband.harness.request.build_sweep`).

    Attributes:
        out: the output JSONL file.
        settings: how runs are launched and measured.
        version: the engine release the flags are written for (sglang's, or vLLM's with
            ``--engine vllm``), where it came from, and the line to print when it was assumed.
        device: the telemetry of a one-GPU sweep (not opened with a pool).
        batch_sizes, actions: the grid (bs-major: ``for bs in batch_sizes: for action in actions``).
        repeats: full passes over the grid (``--repeats``, > 0).
        power_limits_w: ``--power-limits`` in W, clamped to the GPU's range (``None``: the
            limit is left as it is): the grid runs at each, limit-major, on one local GPU.
        resume: skip the ``(index, repeat)`` rows already in ``out``.
        one_launch_per_config: one server per action serves every batch size.
        adaptive: adaptive repeats (:mod:`specband.harness.adaptive`).
        predict: ``--plan predict`` (:mod:`specband.harness.predict`), or ``None`` for the grid.
        shard: measure only this shard's runs (``--shard``), or ``None``.
        pool: the worker pool of ``--gpus``/``--ray`` (``None``: one GPU, here).
        setup: the pool's worker setup (``None`` without a pool).
        power_limit_notes: one note per ``--power-limits`` value that was clamped.
        notes: lines to say once before the sweep runs, and before a dry run's lines
            (``--cpu``'s note, a newer engine release, the note of a skipped RoPE check).
    """

    out: Path
    settings: MeasureSettings
    version: EngineVersion
    device: SweepDevice = SweepDevice()
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    actions: tuple[Action, ...] = ACTIONS
    repeats: int = 3
    power_limits_w: tuple[float, ...] | None = None
    resume: bool = False
    one_launch_per_config: bool = False
    adaptive: bool = False
    predict: PredictSetup | None = None
    shard: ShardSpec | None = None
    pool: WorkerPool | None = None
    setup: WorkerSetup | None = None
    power_limit_notes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def plan(self) -> SweepPlan:
        """The whole sweep with nothing done: the grid (:func:`~specband.harness.pipeline.grid`,
        limit-major with ``power_limits_w``), the passes and the launch mode.

        Raises:
            ConfigError: a bad grid (see :func:`~specband.harness.pipeline.grid`).
        """
        points = grid(self.batch_sizes, self.actions, self.power_limits_w)
        return SweepPlan(tuple(points), self.repeats, self.actions, self.one_launch_per_config)

    def planned(self, existing: Sequence[dict[str, Any]]) -> tuple[SweepPlan, int]:
        """What the sweep still runs given the rows already in :attr:`out`, and how many runs
        its shard holds in all (:func:`specband.harness.resume.planned_sweep`: the checks a
        resumed sweep makes, the sweep's and ``--dry-run``'s alike).

        Raises:
            ConfigError: as :func:`~specband.harness.resume.planned_sweep`.
        """
        return planned_sweep(
            existing,
            self.plan(),
            self.settings,
            self.out,
            resume=self.resume,
            adaptive=self.adaptive,
            predicted=self.predict is not None,
            shard=self.shard,
        )

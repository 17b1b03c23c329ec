"""A sweep's launch units on several GPUs: ``sweep --gpus 0,1`` (:class:`LocalGpuPool`) and
``sweep --ray [ADDRESS]`` (:class:`RayPool`), feeding the driver's one :class:`RowSink`.

Each unit runs in a worker (a thread per local GPU, or a Ray task needing one GPU) on its
own :class:`~specband.harness.pipeline.LaunchExecutor`, built for the worker's
:class:`~specband.harness.workers.WorkerContext` by a :data:`WorkerSetup` (its own port,
``CUDA_VISIBLE_DEVICES``, NVML device index, log folder and emulated GPU state). The
executor writes nothing: the unit's :class:`~specband.harness.pipeline.RunResult` s go
back to the driver, whose sink alone writes rows (fsynced, one at a time), so a resumed,
locked, interrupted multi-GPU sweep behaves as a one-GPU sweep.

Stopping (Ctrl-C, SIGTERM, an error): the pool cancels; a local worker's server is
stopped at once (:func:`~specband.harness.process.stop_live_servers` on its port) and its
:class:`CancellableClock` raises ``KeyboardInterrupt`` at the executor's next sleep (the
cool-down after a stop, a retry), so no worker launches again; a Ray task gets
``KeyboardInterrupt`` from ``ray.cancel``. The results of a cancelled unit are dropped
(its rows are measured again on ``--resume``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from specband.devices import DeviceSpec, open_device
from specband.devices.base import Clock, GpuDevice
from specband.harness.pipeline import LaunchExecutor, LaunchUnit, RowSink, RunResult, SweepPlan
from specband.harness.process import stop_live_servers
from specband.harness.runner import MeasureSettings
from specband.harness.workers import Cancellation, WorkerContext, WorkerPool

__all__ = ["CancellableClock", "GpuWorkerSetup", "WorkerSetup", "execute_on_pool", "run_unit"]

#: Builds one worker's settings (port, server environment, log folder) and a function
#: that opens its GPU's telemetry, for the worker's context. It runs in the worker (a Ray
#: task on another node), so it must be picklable by cloudpickle for ``--ray``.
WorkerSetup = Callable[[WorkerContext], tuple[MeasureSettings, Callable[[], GpuDevice]]]


@dataclass(frozen=True)
class GpuWorkerSetup:
    """The :data:`WorkerSetup` of ``sweep --gpus`` / ``--ray``: the one-GPU sweep's
    settings, moved to the worker's GPU.

    Worker on NVML device ``n`` (context port ``p``): the server listens on ``p`` and gets
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=<its GPU>``; its logs go to
    ``<log_dir>/gpu<n>/``; telemetry reads NVML device ``n``, or the plugged device's
    spec for GPU ``n`` (:meth:`specband.devices.DeviceSpec.for_gpu`).

    Attributes:
        settings: the one-GPU sweep's settings.
        device_kind: :func:`specband.devices.open_device`'s ``kind``.
        power_limit_w: ``--power-limit``.
        plugged: the plugged device (``--device emulated``), or ``None``.
    """

    settings: MeasureSettings
    device_kind: str
    power_limit_w: float | None = None
    plugged: DeviceSpec | None = None

    def __call__(self, ctx: WorkerContext) -> tuple[MeasureSettings, Callable[[], GpuDevice]]:

        env = ctx.server_env(self.settings.server.env)
        plugged = None
        if self.plugged is not None:
            plugged, plugged_env = self.plugged.for_gpu(ctx.nvml_index)
            env.update(plugged_env)
        server = dataclasses.replace(self.settings.server, port=ctx.port, env=env)
        settings = dataclasses.replace(
            self.settings, server=server, log_dir=self.settings.log_dir / f"gpu{ctx.nvml_index}"
        )
        opener = functools.partial(
            open_device, self.device_kind, index=ctx.nvml_index, power_limit_w=self.power_limit_w, plugged=plugged
        )
        return settings, opener


#: Real seconds between two checks of the cancellation while a cancellable clock sleeps.
CANCEL_POLL_S = 0.05


@dataclass(frozen=True)
class CancellableClock(Clock):
    """A :class:`~specband.devices.base.Clock` whose :meth:`sleep` raises
    ``KeyboardInterrupt`` once ``cancellation`` is set (checked before and every
    :data:`CANCEL_POLL_S` real seconds during the sleep)."""

    cancellation: Cancellation = field(default_factory=Cancellation, compare=False)

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` emulated seconds unless cancelled.

        Raises:
            KeyboardInterrupt: the pool is stopping.
        """
        deadline = time.monotonic() + max(0.0, seconds) * self.time_scale
        while True:
            if self.cancellation.cancelled:
                raise KeyboardInterrupt
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, CANCEL_POLL_S))


def run_unit(unit: LaunchUnit, ctx: WorkerContext, *, setup: WorkerSetup, time_scale: float) -> list[RunResult]:
    """Run one launch unit in a worker: its executor, its device (opened and closed here).

    Returns:
        the unit's results (plain data, picklable for Ray).

    Raises:
        as :meth:`LaunchExecutor.execute`; ``KeyboardInterrupt`` when cancelled (the
        server is stopped first).
    """
    settings, open_device = setup(ctx)
    clock = CancellableClock(time_scale, ctx.cancellation)

    def stop() -> None:
        stop_live_servers(port=settings.server.port)

    ctx.cancellation.register(stop)
    try:
        device = open_device()
        try:
            return list(LaunchExecutor(settings, device, clock).execute(unit))
        finally:
            device.close()
    finally:
        ctx.cancellation.unregister(stop)


def execute_on_pool(plan: SweepPlan, pool: WorkerPool, setup: WorkerSetup, clock: Clock, sink: RowSink) -> None:
    """Run every unit of ``plan`` on ``pool``'s workers and hand each result to ``sink``
    in the driver (in the order units complete); ``sink.summary.elapsed_s`` gets the
    real seconds taken.

    Raises:
        as :func:`run_unit` (after every worker stopped) and :meth:`RowSink.consume`.
    """
    t0 = time.monotonic()
    units = plan.units()
    sink.reporter.start(len(plan.runs()), sink.summary.skipped)

    def execute(unit: LaunchUnit, ctx: WorkerContext) -> tuple[str, list[RunResult]]:
        return ctx.cuda_visible_devices, run_unit(unit, ctx, setup=setup, time_scale=clock.time_scale)

    try:
        with contextlib.closing(pool.run(units, execute)) as results:
            for _, (gpu, unit_results) in results:
                for result in unit_results:
                    sink.consume(result)
                sink.reporter.unit_finished(gpu, len(unit_results))
    finally:
        sink.summary.elapsed_s = time.monotonic() - t0

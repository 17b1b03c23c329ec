"""The multi-GPU worker pools: every unit runs once on one GPU with its own port and
environment, results stream back, and stopping cancels the rest and waits for the running
executors. Ray runs locally with two fake GPUs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from specband.core.errors import ConfigError
from specband.harness.workers import Cancellation, LocalGpuPool, RayPool, WorkerContext, parse_gpus

#: A guard against a deadlocked test, never a timing assumption.
GUARD_S = 120.0


def test_parse_gpus():
    assert parse_gpus("0,1, 3") == [0, 1, 3]
    for bad in ("", "0,,1", "a", "-1", "0,0"):
        with pytest.raises(ConfigError, match=r"^--gpus: "):
            parse_gpus(bad)


def test_context_gives_the_server_its_gpu_in_nvml_order():
    env = WorkerContext(1, "3", 3, 30001).server_env({"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert env == {"PATH": "/bin", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "3"}


def test_cancellation_calls_each_callback_once_and_late_ones_at_once():
    calls = []
    c = Cancellation()
    c.register(lambda: calls.append("a"))
    c.register(lambda: 1 / 0)  # a failing callback does not stop the others
    gone = lambda: calls.append("gone")  # noqa: E731
    c.register(gone)
    c.unregister(gone)
    c.cancel()
    c.cancel()
    c.register(lambda: calls.append("late"))
    assert calls == ["a", "late"] and c.cancelled


def test_local_pool_runs_every_unit_once_on_each_worker_s_gpu_and_port():
    both_busy = threading.Barrier(2, timeout=GUARD_S)  # the first two units run at the same time

    def execute(unit: int, ctx: WorkerContext) -> tuple[int, str, int, int]:
        if unit < 2:
            both_busy.wait()
        return unit, ctx.cuda_visible_devices, ctx.nvml_index, ctx.port

    pool = LocalGpuPool([2, 5], base_port=31000)
    with pool.run(list(range(7)), execute) as results:
        got = list(results)
    assert sorted(u for u, _ in got) == list(range(7)) and all(u == r[0] for u, r in got)
    assert {r[1:] for _, r in got} == {("2", 2, 31000), ("5", 5, 31001)}
    assert {r[1] for u, r in got if u < 2} == {"2", "5"}  # one unit on each GPU
    assert not [t for t in threading.enumerate() if t.name.startswith("specband-gpu")]


def test_local_pool_raises_an_executor_s_error_and_starts_nothing_after_it():
    ran = []

    def execute(unit: int, ctx: WorkerContext) -> int:
        ran.append(unit)
        if unit == 1:
            raise ConfigError("unit 1 failed")
        return unit

    with pytest.raises(ConfigError, match="unit 1 failed"), LocalGpuPool([0]).run([0, 1, 2, 3], execute) as results:
        assert next(results) == (0, 0)
        next(results)
    assert ran == [0, 1]


def test_stopping_the_local_pool_cancels_running_executors_and_waits_for_them():
    started = threading.Event()
    stopped = []

    def execute(unit: int, ctx: WorkerContext) -> str:
        if unit == 0:
            return "quick"
        server_up = threading.Event()  # stands for a running server
        ctx.cancellation.register(server_up.set)  # the executor registers server.stop
        started.set()
        server_up.wait(GUARD_S)
        stopped.append(unit)  # returns once cancelled, having started
        return "stopped"

    pool = LocalGpuPool([0, 1])
    with pytest.raises(KeyboardInterrupt), pool.run([0, 1, 2, 3], execute):
        assert started.wait(GUARD_S)
        raise KeyboardInterrupt  # Ctrl-C in the driver
    # both workers were held by slow units until the cancel: unit 3 never started, and
    # every slow unit that started was stopped through its registered callback
    assert 3 not in stopped and 1 <= len(stopped) <= 2 and set(stopped) <= {1, 2}
    assert not [t for t in threading.enumerate() if t.name.startswith("specband-gpu")]


def _gpu_of(unit: int, ctx: WorkerContext) -> tuple[int, str, int, int, str | None]:
    return unit, ctx.cuda_visible_devices, ctx.nvml_index, ctx.port, os.environ.get("CUDA_VISIBLE_DEVICES")


def test_ray_pool_streams_every_unit_once_with_one_fake_gpu_each(local_ray):
    with RayPool(base_port=32000).run(list(range(5)), _gpu_of) as results:
        got = list(results)
    assert sorted(u for u, _ in got) == list(range(5))
    for unit, (same, visible, nvml, port, env) in got:
        assert same == unit and visible == env == str(nvml) and nvml in (0, 1) and port == 32000 + nvml
    assert local_ray.is_initialized()  # a Ray the pool did not start is left running


def _slow(unit: tuple[int, str], ctx: WorkerContext) -> str:
    number, folder = unit
    if number == 0:
        return "quick"
    Path(folder, f"started{number}").touch()
    try:
        for _ in range(int(GUARD_S / 0.05)):  # a measurement in progress (Python code: Ray's
            time.sleep(0.05)  # KeyboardInterrupt lands between bytecodes, not in a blocking C call)
    except KeyboardInterrupt:
        Path(folder, f"stopped{number}").touch()  # the executor's `with server:` stops it
        raise
    return "not cancelled"


def test_ray_pool_cancels_running_tasks_on_ctrl_c(local_ray, tmp_path):
    units = [(0, str(tmp_path)), (1, str(tmp_path)), (2, str(tmp_path)), (3, str(tmp_path))]
    with pytest.raises(KeyboardInterrupt), RayPool().run(units, _slow) as results:
        assert next(results)[1] == "quick"
        started = threading.Event()
        while not started.wait(0.05):  # until a slow task runs (GUARD_S below bounds the test)
            if list(tmp_path.glob("started*")):
                started.set()
        raise KeyboardInterrupt
    running = sorted(p.name[len("started") :] for p in tmp_path.glob("started*"))
    assert running and sorted(p.name[len("stopped") :] for p in tmp_path.glob("stopped*")) == running

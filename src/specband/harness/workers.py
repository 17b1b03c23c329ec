"""Run launch units on several GPUs: one worker thread per GPU of this machine
(:class:`LocalGpuPool`, ``sweep --gpus 0,1``) or one Ray task per unit needing one GPU
(:class:`RayPool`, ``sweep --ray [ADDRESS]``), behind one interface (:class:`WorkerPool`).

A *launch unit* is whatever the sweep launches one server for (one run, or every batch
size of one action with ``--one-launch-per-config``); the *executor* is a callable
``execute(unit, context) -> result`` that launches that server on the context's GPU and
port, measures, stops the server and returns the rows. The pool runs units in the order
given as workers free up and streams ``(unit, result)`` back to the driver in the order
they complete; the driver alone writes rows.

Stopping: leaving the ``with`` block of :meth:`WorkerPool.run`, or Ctrl-C while waiting
for a result, or an executor's exception, cancels the units not yet started and the
running ones, and waits until every running executor has returned, so that no server is
left on any GPU. A local worker's executor learns of it through
:attr:`WorkerContext.cancellation` (register ``server.stop`` there: it is called from the
driver's thread); a Ray task gets ``KeyboardInterrupt`` (``ray.cancel(force=False)``; Ray raises it
between two Python bytecodes, so a task blocked in one long C call, e.g. ``Event.wait(60)``,
sees it only when that call returns: poll in short waits), so its ``with server:`` block
stops the server. An executor's exception is raised in the
driver once the others have stopped.

GPU numbering: the servers get ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` with
``CUDA_VISIBLE_DEVICES`` (:meth:`WorkerContext.server_env`) so that the CUDA device a
server sees is the NVML device ``nvml_index`` the telemetry reads (CUDA's default order is
fastest first, NVML's is PCI bus order).
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from specband.core.errors import ConfigError, HarnessError
from specband.core.limits import MAX_GPU_INDEX
from specband.harness.interrupts import note_received

__all__ = ["Cancellation", "LocalGpuPool", "RayPool", "Results", "WorkerContext", "WorkerPool", "parse_gpus"]

#: The node address of a Ray that :class:`RayPool` starts on this machine: loopback, so that
#: its processes never talk over a network interface.
LOCAL_NODE_IP = "127.0.0.1"

U = TypeVar("U")
R = TypeVar("R")


class Cancellation:
    """Set once when the pool stops; callbacks registered before or after run then
    (each once, in the thread that cancels; an exception in one is ignored)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], object]] = []

    @property
    def cancelled(self) -> bool:
        """The pool is stopping: start nothing new."""
        return self._event.is_set()

    def register(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` on cancellation (at once if already cancelled)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        _call(callback)

    def unregister(self, callback: Callable[[], object]) -> None:
        """Forget ``callback`` (e.g. once its server is stopped)."""
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def cancel(self) -> None:
        """Cancel: run every registered callback once."""
        with self._lock:
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _call(callback)


def _call(callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception:  # a server that is already gone, ...: cancelling goes on
        pass


@dataclass(frozen=True)
class WorkerContext:
    """Where one worker runs its servers.

    Attributes:
        worker: the worker's number (0-based; for a Ray task, the GPU's index on its node).
        cuda_visible_devices: ``CUDA_VISIBLE_DEVICES`` for the server (one GPU).
        nvml_index: the NVML device index of that GPU (the telemetry's device).
        port: the server's HTTP port (distinct per worker on one machine).
        cancellation: set when the pool stops (see the module docstring).
    """

    worker: int
    cuda_visible_devices: str
    nvml_index: int
    port: int
    cancellation: Cancellation = field(default_factory=Cancellation, compare=False, repr=False)

    def server_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with this worker's GPU: ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and
        ``CUDA_VISIBLE_DEVICES``."""
        return {**base, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": self.cuda_visible_devices}


#: Environment variables a worker pool sets for each server (:meth:`WorkerContext.server_env`).
POOL_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def check_pool_env(env: Mapping[str, str]) -> None:
    """Refuse ``--env`` values that retarget the device when a pool (``--gpus``,
    ``--ray``) sets it for each server: rows would be measured on another GPU than the
    one whose telemetry is read.

    Raises:
        ConfigError: ``"--env CUDA_VISIBLE_DEVICES=...: specband sets it for each GPU ..."``.
    """
    for key in POOL_ENV:
        if key in env:
            raise ConfigError(
                f"--env {key}={env[key]}: specband sets {key} for each GPU of --gpus/--ray (the GPU whose "
                "power it reads); leave it out"
            )


def check_single_gpu_env(env: Mapping[str, str], gpu_index: int, device_kind: str) -> None:
    """Refuse ``--env CUDA_VISIBLE_DEVICES`` (or ``CUDA_DEVICE_ORDER``) on a one-GPU sweep whose
    telemetry reads a GPU (``--device nvml``, ``zeus`` or ``auto``) unless the two name the
    telemetry's GPU the way NVML numbers it (``CUDA_DEVICE_ORDER=PCI_BUS_ID
    CUDA_VISIBLE_DEVICES=<--gpu-index>``, as a pool sets them): otherwise the server runs on one
    GPU while the power of another is read (hostile trial S39). With ``--device none`` or the
    emulator nothing is read from a GPU, and they pass.

    Raises:
        ConfigError: one line naming the variable, the GPU read and how to name it.
    """
    if device_kind not in ("nvml", "zeus", "auto") or not any(key in env for key in POOL_ENV):
        return
    consistent = env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" and env.get("CUDA_VISIBLE_DEVICES") == str(gpu_index)
    if not consistent:
        given = " ".join(f"{key}={env[key]}" for key in POOL_ENV if key in env)
        raise ConfigError(
            f"--env {given}: the telemetry reads NVML GPU {gpu_index} (--gpu-index), which NVML numbers in PCI "
            "bus order, so the server could run on another GPU than the one whose power is read; give "
            "--gpu-index N with --env CUDA_DEVICE_ORDER=PCI_BUS_ID --env CUDA_VISIBLE_DEVICES=N, or leave both out"
        )


class Results(Generic[U, R]):
    """``(unit, result)`` pairs in completion order; a context manager whose exit (or
    :meth:`close`) cancels what is left and waits for the running executors."""

    def __init__(self, next_result: Callable[[], tuple[U, R] | None], close: Callable[[], None]) -> None:
        self._next = next_result
        self._close = close
        self._closed = False

    def __iter__(self) -> Iterator[tuple[U, R]]:
        return self

    def __next__(self) -> tuple[U, R]:
        if self._closed:
            raise StopIteration
        try:
            item = self._next()
        except BaseException:  # Ctrl-C while waiting, or an executor's exception
            self.close()
            raise
        if item is None:
            self.close()
            raise StopIteration
        return item

    def close(self) -> None:
        """Cancel the units not finished and wait for running executors. Idempotent."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> Results[U, R]:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class WorkerPool(Protocol):
    """Runs an executor on each launch unit, one GPU per running unit."""

    def run(self, units: Sequence[U], execute: Callable[[U, WorkerContext], R]) -> Results[U, R]:
        """Start running ``units`` (in order, as workers free up); iterate the returned
        :class:`Results` for ``(unit, execute(unit, context))`` as they complete."""
        ...


def parse_gpus(text: str) -> list[int]:
    """``--gpus 0,1,2,3`` -> ``[0, 1, 2, 3]`` (NVML indices).

    Raises:
        ConfigError: empty, not whole numbers in 0..MAX_GPU_INDEX, or an index twice (naming
            ``--gpus``).
    """
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(p.isdigit() for p in parts):
        raise ConfigError(f"--gpus: expected GPU indices like 0,1,2,3, got {text!r}")
    if any(len(p) > len(str(MAX_GPU_INDEX)) or int(p) > MAX_GPU_INDEX for p in parts):
        raise ConfigError(f"--gpus: GPU indices are 0..{MAX_GPU_INDEX} (NVML's numbering), got {text!r}")
    gpus = [int(p) for p in parts]
    if len(set(gpus)) != len(gpus):
        raise ConfigError(f"--gpus: a GPU is given twice in {text!r}")
    return gpus


class LocalGpuPool:
    """One worker thread per GPU of this machine; worker ``i`` serves on GPU ``gpus[i]``
    at port ``base_port + i``. Threads suffice: the work runs in the server processes.

    Args:
        gpus: NVML indices (e.g. from :func:`parse_gpus`).
        base_port: port of worker 0.

    Raises:
        ConfigError: no GPU, an index twice, or a port outside 1..65535.
    """

    def __init__(self, gpus: Sequence[int], base_port: int = 30000) -> None:
        if not gpus or len(set(gpus)) != len(gpus):
            raise ConfigError(f"--gpus: give distinct GPU indices, got {list(gpus)}")
        if not (base_port > 0 and base_port + len(gpus) - 1 < 65536):
            raise ConfigError(f"--port: ports {base_port}..{base_port + len(gpus) - 1} are not all in 1..65535")
        self.gpus = list(gpus)
        self.base_port = base_port

    def run(self, units: Sequence[U], execute: Callable[[U, WorkerContext], R]) -> Results[U, R]:
        """See :class:`WorkerPool`."""
        cancellation = Cancellation()
        contexts = [WorkerContext(i, str(g), g, self.base_port + i, cancellation) for i, g in enumerate(self.gpus)]
        todo: queue.SimpleQueue[U] = queue.SimpleQueue()
        for unit in units:
            todo.put(unit)
        done: queue.SimpleQueue[tuple[U, R] | BaseException | None] = queue.SimpleQueue()

        def work(ctx: WorkerContext) -> None:
            try:
                while not cancellation.cancelled:
                    try:
                        unit = todo.get_nowait()
                    except queue.Empty:
                        break
                    done.put((unit, execute(unit, ctx)))
            except BaseException as exc:
                done.put(exc)
            finally:
                done.put(None)

        threads = [threading.Thread(target=work, args=(c,), name=f"specband-gpu{c.nvml_index}") for c in contexts]
        for thread in threads:
            thread.start()
        running = [len(threads)]

        def next_result() -> tuple[U, R] | None:
            while running[0]:
                item = done.get()
                if item is None:
                    running[0] -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    return item
            return None

        def close() -> None:
            cancellation.cancel()
            for thread in threads:
                thread.join()

        return Results(next_result, close)


def _ray_task(execute: Callable[[Any, WorkerContext], Any], unit: Any, base_port: int) -> Any:
    """A Ray task's body: the context of the GPU Ray gave it, then the executor."""
    import ray

    gpu = int(ray.get_gpu_ids()[0])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") or str(gpu)
    return execute(unit, WorkerContext(gpu, visible, gpu, base_port + gpu))


#: Real seconds to reach a ``--ray-address`` before giving up (Ray itself retries for
#: minutes and ignores SIGTERM meanwhile).
RAY_CONNECT_TIMEOUT_S = 10.0


#: The environment variable ``ray.init()`` reads when no address is given.
RAY_ADDRESS_ENV = "RAY_ADDRESS"


def check_ray_address(
    address: str, *, timeout_s: float = RAY_CONNECT_TIMEOUT_S, option: str = "--ray-address"
) -> tuple[str, int] | None:
    """Check a ``--ray-address`` (or ``RAY_ADDRESS``, named by ``option``) before Ray is
    asked to connect: ``auto`` and ``local``
    pass as they are; ``HOST:PORT`` or ``ray://HOST:PORT`` must have a host and a port in
    1..65535, and a TCP connection to it must succeed within ``timeout_s``.

    Returns:
        ``(host, port)``, or ``None`` for ``auto``/``local``.

    Raises:
        ConfigError: a malformed address (``"--ray-address 'x': expected HOST:PORT ..."``).
        HarnessError: nothing answers there within ``timeout_s`` (one line).
    """
    import socket

    text = address.strip()
    if text in ("auto", "local"):
        return None
    rest = text.removeprefix("ray://")
    host, sep, port_text = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536 or "/" in rest:
        raise ConfigError(
            f"{_named(option, address)!s}: expected HOST:PORT (the head node's GCS address), ray://HOST:PORT "
            "(Ray Client) or auto"
        )
    port = int(port_text)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc) or type(exc).__name__)
        raise HarnessError(
            f"{_named(option, address, quote=False)}: cannot reach the Ray cluster ({reason} within {timeout_s:g} s); "
            "check the address and that the head node is running"
        ) from None
    return host, port


def _named(option: str, address: str, *, quote: bool = True) -> str:
    """``--ray-address 'x'`` or ``RAY_ADDRESS='x'`` (an environment variable) for messages."""
    shown = repr(address) if quote else address
    return f"{option}={shown}" if option == RAY_ADDRESS_ENV else f"{option} {shown}"


@contextlib.contextmanager
def _exit_on_signal_while_blocked(message: str) -> Iterator[None]:
    """While the block runs, SIGTERM or SIGINT ends the process at once (status 143 or 130,
    ``message`` on stderr), even inside native code that holds the main thread for minutes
    (``ray.init`` waiting for a GCS that never answers: Python's own handlers run only when
    it returns). The C-level handler writes the signal's number to a wakeup fd
    (``signal.set_wakeup_fd``); a watcher thread reads it. Only for a block before anything
    was written (nothing is left to clean up); off the main thread it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:
        os.close(read_fd)
        os.close(write_fd)
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            ready, _, _ = select.select([read_fd], [], [], 0.1)
            if not ready:
                continue
            for signum in os.read(read_fd, 64):
                if signum in (signal.SIGTERM, signal.SIGINT) and not done.is_set():
                    with contextlib.suppress(OSError):
                        os.write(2, f"error: {message}\n".encode())
                    os._exit(128 + signum)

    watcher = threading.Thread(target=watch, name="specband-signal-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous)
        watcher.join()
        os.close(read_fd)
        os.close(write_fd)


def _ray_init(
    ray: Any,
    address: str | None,
    kwargs: Mapping[str, Any],
    option: str = "--ray-address",
    *,
    prompt_exit: bool = False,
) -> None:
    """``ray.init`` with its failures as one line, and specband's SIGINT/SIGTERM handling
    kept (``ray.init`` installs a SIGTERM handler that exits with status 15).

    Raises:
        HarnessError: Ray could not connect or start (an auth mismatch, a version
            mismatch, no cluster for ``auto``).
        KeyboardInterrupt: SIGTERM or Ctrl-C while connecting (with ``prompt_exit``, the
            process exits at once instead: see :func:`_exit_on_signal_while_blocked`).
    """
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)} if main else {}
    blocked = (
        _exit_on_signal_while_blocked("terminated while connecting to Ray (nothing was written)")
        if prompt_exit
        else contextlib.nullcontext()
    )
    try:
        with blocked:
            ray.init(address=address, include_dashboard=False, **kwargs)
    except SystemExit as exc:  # Ray's own SIGTERM handler: sys.exit(15)
        if exc.code == signal.SIGTERM:
            note_received(signal.SIGTERM)
            raise KeyboardInterrupt from None
        raise
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        where = _named(option, address, quote=False) if address else "--ray"
        raise HarnessError(f"{where}: Ray could not connect ({type(exc).__name__}: {first})") from None
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)


class RayPool:
    """One Ray task per launch unit, each needing one GPU (``num_gpus=1``), on the
    cluster at ``address`` or, without one, a Ray instance already started in this
    process or else a local one (shut down when the run ends).

    Args:
        address: a running cluster (``ray.init(address=...)``); ``None``: local.
        base_port: a task on GPU ``g`` of its node serves at ``base_port + g``.
        cancel_wait_s: real seconds to wait for cancelled tasks to stop their servers.
        init_kwargs: more ``ray.init`` arguments (e.g. ``num_gpus`` for a test).

    Raises:
        ConfigError: Ray is not installed (``pip install 'specband[ray]'``); :meth:`run`:
            the cluster has no GPU.
    """

    def __init__(self, address: str | None = None, *, base_port: int = 30000, cancel_wait_s: float = 120.0,
                 init_kwargs: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("--ray needs Ray: pip install 'specband[ray]'") from None
        self.address_option = "--ray-address"
        if address is None and os.environ.get(RAY_ADDRESS_ENV, "").strip():
            # ray.init() would connect to RAY_ADDRESS itself, retrying for minutes with
            # SIGTERM ignored: the same bounded check as --ray-address, before anything is written
            address, self.address_option = os.environ[RAY_ADDRESS_ENV].strip(), RAY_ADDRESS_ENV
            check_ray_address(address, option=RAY_ADDRESS_ENV)
        elif address is not None:
            check_ray_address(address)
        self.address = address
        self.base_port = base_port
        self.cancel_wait_s = cancel_wait_s
        self.init_kwargs = dict(init_kwargs or {})
        self._started: bool | None = None  # connected: whether this pool started Ray (and shuts it down)

    def connect(self, *, prompt_exit: bool = False) -> None:
        """Connect to the cluster (or start a local Ray) now; :meth:`run` does it when not
        done. A sweep connects before it takes its lock or writes anything, with
        ``prompt_exit``: SIGTERM or Ctrl-C while Ray connects to a cluster then ends the
        process at once (Ray's native connect otherwise holds them for up to a minute); a
        local Ray being started is left to Ray's own handling. Idempotent.

        Raises:
            HarnessError: Ray could not connect or start.
            ConfigError: the cluster has no GPU.
            KeyboardInterrupt: SIGTERM or Ctrl-C while connecting (without ``prompt_exit``).
        """
        import ray

        if self._started is not None:
            return
        started = not ray.is_initialized()
        if started:
            kwargs = dict(self.init_kwargs)
            if self.address is None:  # a Ray started here talks to itself over loopback only
                kwargs.setdefault("_node_ip_address", LOCAL_NODE_IP)
            # never while Ray starts its own processes here (an exit then would orphan them)
            joining = self.address is not None and self.address.strip() != "local"
            _ray_init(ray, self.address, kwargs, self.address_option, prompt_exit=prompt_exit and joining)
        if ray.cluster_resources().get("GPU", 0) < 1:  # its tasks would wait for ever
            if started:
                ray.shutdown()
            raise ConfigError("--ray: the Ray cluster has no GPU (start it with GPUs, or give --ray-address)")
        self._started = started

    def disconnect(self) -> None:
        """Shut down the Ray this pool started (a connected cluster stays up). Idempotent."""
        started, self._started = self._started, None
        if started:
            import ray

            ray.shutdown()

    def run(self, units: Sequence[U], execute: Callable[[U, WorkerContext], R]) -> Results[U, R]:
        """See :class:`WorkerPool`."""
        import ray

        self.connect()
        task = ray.remote(num_gpus=1, max_retries=0)(_ray_task)
        pending = {task.remote(execute, unit, self.base_port): unit for unit in units}

        def next_result() -> tuple[U, R] | None:
            if not pending:
                return None
            (ready,), _ = ray.wait(list(pending), num_returns=1)
            unit = pending.pop(ready)
            return unit, ray.get(ready)

        def close() -> None:
            try:
                for ref in pending:
                    ray.cancel(ref, force=False)  # KeyboardInterrupt in a running task
                if pending:
                    ray.wait(list(pending), num_returns=len(pending), timeout=self.cancel_wait_s)
                pending.clear()
            finally:
                self.disconnect()

        return Results(next_result, close)

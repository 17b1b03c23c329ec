"""Starting, watching and stopping the server process for one configuration (:class:`ServerProcess`).

The command it runs comes from :mod:`specband.engines.serverconfig`
(:func:`~specband.engines.serverconfig.build_launch_command`); a failed launch is classified
by :mod:`specband.engines.failures`.

Process hygiene: the server starts in its own session (``start_new_session=True``, so
its process group id is its pid) with a parent-death signal (a crashed sweep takes its
server down); :meth:`ServerProcess.stop` sends SIGTERM to the whole group, then SIGKILL
after a grace period, and waits until no process of the group is left. Live servers are
also stopped at interpreter exit. Output goes to a log file whose tail classifies a
failed launch (:func:`classify_failure`). A command that cannot be run at all (not found,
not executable, ``python -m`` of a module that is not installed) raises
:class:`LauncherError` instead of :class:`LaunchError` (:func:`launcher_failure`).
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from specband.core.errors import HarnessError
from specband.devices.base import Clock
from specband.engines.failures import (
    LauncherError,
    LaunchError,
    PortInUseError,
    ServerArgsError,
    capture_oom,
    classify_failure,
    launcher_failure,
)
from specband.engines.serverconfig import SGLANG_ENV
from specband.harness.interrupts import deferred
from specband.harness.procfs import (
    group_members,
    listening_socket_inodes,
    process_group_alive,
    socket_inodes_of,
    wait_port_free,
)

__all__ = ["ServerProcess", "stop_live_servers"]

_SHIM = Path(__file__).with_name("_pdeathsig.py")


_LIVE: dict[int, ServerProcess] = {}
_LIVE_LOCK = threading.Lock()


def stop_live_servers(port: int | None = None, grace_s: float = 5.0) -> None:
    """Stop every server process group this process started and has not stopped yet (on
    ``port`` only, when given): at exit, and when a multi-GPU sweep is cancelled (the
    worker serving on ``port`` then sees its server die and unwinds)."""
    with _LIVE_LOCK:
        servers = [s for s in _LIVE.values() if port is None or s.port == port]
    for server in servers:
        server.stop(grace_s=grace_s)


atexit.register(stop_live_servers)


class ServerProcess:
    """One server process group.

    Args:
        command: the launch command (see :func:`~specband.engines.serverconfig.build_launch_command`).
        host, port: where it will listen.
        log_path: its stdout and stderr go here (appended).
        env: the full environment (``None``: this process's plus :data:`SGLANG_ENV`).
        clock: the time base for the launch timeout and health polling.
        port_wait_s: real seconds to wait for a busy port to free before refusing it
            (a previous server may still be exiting).

    Use as a context manager: the group is stopped on success, error, timeout and
    Ctrl-C.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        host: str,
        port: int,
        log_path: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        port_wait_s: float = 10.0,
    ) -> None:
        self.command = list(command)
        self.host = host
        self.port = port
        self.log_path = Path(log_path)
        self.env = dict(env) if env is not None else {**os.environ, **SGLANG_ENV}
        self.clock = clock or Clock()
        self.port_wait_s = port_wait_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        #: :func:`time.monotonic` when the process was spawned (real seconds).
        self.started_monotonic: float | None = None
        self._log_offset = 0

    @property
    def base_url(self) -> str:
        """``http://host:port``."""
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Spawn the server in a new session.

        Raises:
            PortInUseError: the port still answers after ``port_wait_s``.
            HarnessError: the log file cannot be opened
                (``"<log>: cannot write the server log (<reason>)"``).
            LauncherError: the command cannot be executed.
        """
        wait_port_free(self.host, self.port, self.port_wait_s)
        argv = self.command
        if sys.platform.startswith("linux"):
            argv = [sys.executable, "-I", str(_SHIM), str(os.getpid()), "--", *self.command]
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log_path, "ab")  # noqa: SIM115 (the with below holds it, after the error check)
        except OSError as exc:
            raise HarnessError(f"{self.log_path}: cannot write the server log ({exc.strerror or exc})") from None
        # Ctrl-C / SIGTERM wait until the process is started and registered (else it would
        # run with nobody to stop it)
        with log, deferred():
            self._log_offset = log.tell()
            header = f"\n=== specband launch {time.strftime('%Y-%m-%dT%H:%M:%S')}: {shlex.join(self.command)}\n"
            log.write(header.encode())
            log.flush()
            self.started_monotonic = time.monotonic()
            try:
                self.proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise LauncherError(
                    f"--server-command cannot be run: cannot execute {self.command[0]!r}: {exc.strerror or exc}"
                ) from None
            self.pgid = self.proc.pid
            with _LIVE_LOCK:
                _LIVE[self.pgid] = self

    def log_tail(self, max_bytes: int = 16384) -> str:
        """The end of this launch's log output."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                end = fh.tell()
                start = max(self._log_offset, end - max_bytes)
                fh.seek(start)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        """True while the server's main process runs."""
        return self.proc is not None and self.proc.poll() is None

    def wait_healthy(self, timeout_s: float, poll_s: float = 1.0) -> float:
        """Poll ``GET /health`` until it answers 200.

        Args:
            timeout_s: launch timeout in (emulated) seconds. Under a compressed clock the
                real wait is never shorter than ``min(timeout_s, 10)`` real seconds: a
                process start costs real time that the time scale does not shrink.
            poll_s: (emulated) seconds between polls (at least 20 ms real).

        Returns:
            the (emulated) seconds the launch took.

        Raises:
            LauncherError: the command could not be run (see :func:`launcher_failure`).
            ServerArgsError: sglang refused the command line (its ``error:``).
            LaunchError: the process exited (classified from its log), logged an
                out-of-memory during CUDA-graph capture (at the next poll, even while it
                keeps running) or the timeout passed.
            KeyboardInterrupt: the clock's :meth:`~specband.devices.base.Clock.sleep` between
                two polls raised it (a cancelled worker's
                :class:`~specband.harness.fleet.CancellableClock`).
        """
        import httpx

        if self.proc is None:
            raise RuntimeError("wait_healthy() before start()")
        t0 = self.clock.now()
        real_start = time.monotonic()
        real_timeout = max(self.clock.to_real(timeout_s), min(timeout_s, 10.0))
        real_poll = max(0.02, self.clock.to_real(poll_s))
        with httpx.Client(timeout=max(2.0, real_poll * 5), trust_env=False) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    tail = self.log_tail()
                    cannot_run = launcher_failure(self.command, code, tail)
                    if cannot_run is not None:
                        raise LauncherError(f"--server-command cannot be run: {cannot_run} (exit {code})")
                    reason, detail = classify_failure(tail)
                    if reason == "bad_arguments":
                        raise ServerArgsError(f"sglang refused the command line: {detail} (exit {code})")
                    if reason == "port_in_use":  # the machine, not the configuration: stop, no row
                        raise PortInUseError(
                            f"port {self.port} on {self.host}: the server could not bind it ({detail}); another "
                            "process holds it (stop it or pass another --port)"
                        )
                    raise LaunchError(reason, detail, code)
                capture_oom_line = capture_oom(self.log_tail())
                if capture_oom_line is not None and not self._exits_within(self.OOM_EXIT_WAIT_S):
                    # sglang may log it and hang: no need to wait for the launch timeout
                    raise LaunchError("out_of_memory_cuda_graph_capture", capture_oom_line)
                if capture_oom_line is not None:
                    continue  # it exited: classified with its exit status above
                try:
                    healthy = client.get(self.base_url + "/health").status_code == 200
                except httpx.HTTPError:
                    healthy = False
                if healthy:
                    self.check_own_listener()
                    return self.clock.now() - t0
                if time.monotonic() - real_start >= real_timeout:
                    raise LaunchError("launch_timeout", f"no healthy /health within {timeout_s:g} s")
                # through the clock: a cancelled pool worker's clock raises KeyboardInterrupt
                # here, so a server it registered after the pool's stop ran is stopped now
                # (by the caller), not when the launch timeout passes
                self.clock.sleep(real_poll / self.clock.time_scale)

    def check_own_listener(self) -> None:
        """Prove that what answers on the port is this server: every socket listening on
        ``port`` (``/proc/net/tcp`` and ``tcp6``) must be held by a process of this
        server's process group (Linux; elsewhere nothing is checked).

        Raises:
            PortInUseError: a socket on the port belongs to another process (the rows would
                measure someone else's server), or this group holds none while something
                answers.
        """
        if self.pgid is None:
            return
        listeners = listening_socket_inodes(self.port)
        if listeners is None:
            return  # no /proc/net: cannot tell
        ours = socket_inodes_of(group_members(self.pgid))
        foreign = listeners - ours
        if foreign or not listeners & ours:
            raise PortInUseError(
                f"port {self.port} on {self.host} is answered by a process specband did not start (its server, "
                f"process group {self.pgid}, does not hold the listening socket); refusing to measure it (stop "
                "the other server or pass another --port)"
            )

    #: Real seconds a server that logged an out-of-memory during CUDA-graph capture gets
    #: to exit before it is classified as hung in that state.
    OOM_EXIT_WAIT_S = 3.0

    def _exits_within(self, wait_s: float) -> bool:
        """True when the process exits within ``wait_s`` real seconds."""
        assert self.proc is not None
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the whole process group: SIGTERM, then SIGKILL after ``grace_s`` real
        seconds; return once no process of the group is left. Idempotent. Ctrl-C and
        SIGTERM received meanwhile take effect once it returns."""
        if self.pgid is None or self.proc is None:
            return
        with deferred():  # a second Ctrl-C waits until the group is gone
            self._stop(grace_s)

    def _stop(self, grace_s: float) -> None:
        pgid, proc = self.pgid, self.proc
        assert pgid is not None and proc is not None
        try:
            if process_group_alive(pgid):
                try:
                    os.killpg(pgid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + grace_s
                while time.monotonic() < deadline:
                    proc.poll()  # reap the leader so that it does not linger as a zombie
                    if not process_group_alive(pgid):
                        break
                    time.sleep(0.02)
                else:
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait()
                    deadline = time.monotonic() + grace_s
                    while process_group_alive(pgid) and time.monotonic() < deadline:
                        time.sleep(0.02)
            proc.wait()
        finally:
            with _LIVE_LOCK:
                _LIVE.pop(pgid, None)
            self.pgid = None

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

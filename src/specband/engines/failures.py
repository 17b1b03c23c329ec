"""Why a server launch failed: the error classes, and the reading of a failed launch's log.

:func:`classify_failure` turns the end of the server's log into a :class:`LaunchError`
reason (out of memory, CUDA-graph capture, port in use, bad arguments, any other exit);
:func:`launcher_failure` tells a command that could not be run at all (not found, not
executable, ``python -m`` of a module that is not installed: :class:`LauncherError`)
from one that ran and failed.

Exit statuses (:data:`specband.core.exitcodes.EXIT_CODES`): a :class:`LaunchError` and a
:class:`PortInUseError` are the engine's failure (:class:`~specband.core.errors.EngineError`,
3); a :class:`LauncherError` and a :class:`ServerArgsError` are the command line's (the same
for every launch: bad input, 2).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from specband.core.errors import EngineError, HarnessError

__all__ = [
    "LaunchError",
    "LauncherError",
    "PortInUseError",
    "ServerArgsError",
    "capture_oom",
    "classify_failure",
    "launcher_failure",
]


class LaunchError(EngineError):
    """The server did not become healthy (exit 3).

    Attributes:
        reason: a short class: ``out_of_memory_cuda_graph_capture``, ``out_of_memory``,
            ``cuda_graph_capture_failed``, ``port_in_use``, ``bad_arguments``,
            ``exited`` (any other exit), ``launch_timeout``.
        detail: the most telling log line, or the timeout.
        returncode: the server's exit status (``None`` on a timeout).
    """

    def __init__(self, reason: str, detail: str, returncode: int | None = None) -> None:
        self.reason = reason
        self.detail = detail
        self.returncode = returncode
        code = "" if returncode is None else f" (exit {returncode})"
        super().__init__(f"launch_failed: {reason}{code}: {detail}")


class LauncherError(HarnessError):
    """The server command cannot be run at all: the executable is missing or not
    executable (``OSError`` on exec, or exit status 127 / 126 before ``/health``, the
    shells' "command not found" / "cannot execute"), or ``python -m MODULE`` names a
    module that is not installed. A configuration error, not a failure of one action:
    every launch would fail the same way, so the sweep stops instead of writing an error
    row per run (and the launch is not retried). Exit 2, as bad input."""


class ServerArgsError(LauncherError):
    """sglang refused its command line (its argument parser's ``error:``, exit status 2):
    every launch would be refused alike, so the sweep stops at once (no error rows, no
    retry at another mem fraction)."""


class PortInUseError(EngineError):
    """Something already answers on the server port, or the server could not bind it; the
    sweep refuses to use it (its measurements would go to a foreign server). The machine's
    state, not the configuration: exit 3, as a failed launch."""


# A failed launch's log tail -> reason. Order matters: the first match wins.
_FAILURE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("port_in_use", re.compile(r"address already in use|\[Errno 98\]", re.I)),
    ("bad_arguments", re.compile(r"unrecognized arguments|error: argument|invalid choice|ambiguous option", re.I)),
    ("out_of_memory", re.compile(r"out of memory|OutOfMemoryError|Not enough memory|CUDA error: out of memory", re.I)),
    ("cuda_graph_capture_failed", re.compile(r"Capture cuda graph failed", re.I)),
)


def classify_failure(log_tail: str) -> tuple[str, str]:
    """Classify a failed launch from the end of its log.

    Returns:
        ``(reason, detail)``: the reason (see :class:`LaunchError`; out-of-memory during
        CUDA-graph capture is ``out_of_memory_cuda_graph_capture``) and the log line that
        shows it (or the last non-empty line).
    """
    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip()]
    text = "\n".join(lines)
    for reason, pattern in _FAILURE_PATTERNS:
        if pattern.search(text):
            detail = next((ln for ln in reversed(lines) if pattern.search(ln)), lines[-1] if lines else "")
            if reason == "out_of_memory" and _FAILURE_PATTERNS[3][1].search(text):
                reason = "out_of_memory_cuda_graph_capture"
            return reason, detail[:300]
    return "exited", (lines[-1][:300] if lines else "no output")


def capture_oom(log_tail: str) -> str | None:
    """The out-of-memory line when the log shows an out-of-memory during CUDA-graph
    capture, else ``None``."""
    oom, capture = _FAILURE_PATTERNS[2][1], _FAILURE_PATTERNS[3][1]
    if not (oom.search(log_tail) and capture.search(log_tail)):
        return None
    lines = [ln.strip() for ln in log_tail.splitlines() if oom.search(ln)]
    return lines[-1][:300] if lines else None


#: Exit statuses of a command that could not be run (POSIX shells; the exec shim).
_CANNOT_RUN_STATUSES = (126, 127)


def _python_target(command: Sequence[str]) -> tuple[str, str] | None:
    """``("module", M)`` for ``python [options] -m M ...``, ``("script", S)`` for
    ``python [options] S ...``, else ``None`` (not a Python interpreter)."""
    if not command or not Path(command[0]).name.startswith("python"):
        return None
    for i, arg in enumerate(command[1:], start=1):
        if arg == "-m":
            return ("module", command[i + 1]) if i + 1 < len(command) else None
        if not arg.startswith("-"):
            return "script", arg
    return None


def _cannot_run_pattern(command: Sequence[str]) -> re.Pattern[str] | None:
    """What Python prints when the module or script of ``command`` does not exist."""
    target = _python_target(command)
    if target is None:
        return None
    kind, name = target
    if kind == "module":
        name = re.escape(name)
        return re.compile(rf"No module named '?{name}'?$|Error while finding module specification for '{name}'")
    return re.compile(rf"can't open file '?{re.escape(name)}'?|can't open file .*{re.escape(Path(name).name)}")


def launcher_failure(command: Sequence[str], returncode: int | None, log_tail: str) -> str | None:
    """Why a server that exited before ``/health`` could not be run at all, or ``None``
    when it ran and failed (an out-of-memory, a bad flag: one action's failure).

    Args:
        command: the launch command.
        returncode: its exit status.
        log_tail: the end of its log.

    Returns:
        the telling log line (or the status) when the exit status is 126 or 127, or when
        the command is ``python -m MODULE`` and Python says that module is not installed,
        or ``python SCRIPT`` and Python cannot open that script.
    """
    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip() and not ln.startswith("=== specband launch")]
    if returncode in _CANNOT_RUN_STATUSES:
        return lines[-1][:300] if lines else f"exit status {returncode}"
    pattern = _cannot_run_pattern(command)
    if pattern is not None:
        for line in reversed(lines):
            if pattern.search(line):
                return line[:300]
    return None

"""Exec shim: ``python _pdeathsig.py PARENT_PID -- COMMAND...``.

Sets ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` so that the server gets SIGTERM if the sweep
process dies without cleaning up (e.g. SIGKILL), then ``exec``s the server command (exit
status 127 when it is not found, 126 when it cannot be executed, as shells do). The
setting survives ``execve``; sglang's own subprocesses already die with their parent.
Linux only; elsewhere the command is exec'ed unchanged. Standard library only (it runs
before every server launch).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    """Set the parent-death signal, check the parent is still there, exec the command."""
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: _pdeathsig.py PARENT_PID -- COMMAND...\n")
        raise SystemExit(2)
    parent = int(argv[0])
    command = argv[2:]
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the parent died before prctl took effect
            raise SystemExit(143)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        # the shells' convention: 127 when the command is not found, 126 when it cannot be run
        sys.stderr.write(f"cannot execute {command[0]!r}: {exc.strerror}\n")
        raise SystemExit(127 if isinstance(exc, FileNotFoundError) else 126) from None


if __name__ == "__main__":
    main(sys.argv[1:])

"""Running ``specband launch`` in the foreground as a user does, until its ready line."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


@contextmanager
def launched(
    args: Sequence[str], ready: str, timeout_s: float, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``python -m specband launch ARGS`` until a stdout line contains ``ready`` (asserted, with
    its stderr when it exited); killed at the end if it is still running."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specband", "launch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        out = ""
        deadline = time.monotonic() + timeout_s
        while ready not in out and time.monotonic() < deadline and proc.poll() is None:
            if selector.select(timeout=0.5):
                out += proc.stdout.readline()
        assert ready in out, (out, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        yield proc, out
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

"""The governor's JSONL log: every reading and every decision, one JSON object a line.

Each line is one ``os.write`` of the whole line to a file opened for appending (``O_APPEND``:
a line is never interleaved with another writer's, and a crash leaves whole lines before a
possibly cut last one), then flushed to the disk (``fsync``) so that a kill -9 loses at most
the line being written. The log is bounded: once it holds :attr:`GovernLog.max_bytes`, readings
are no longer written (one ``log_cap`` line says so, and the terminal is told); decisions,
notes and the summary still are, up to twice the bound, after which nothing more is written.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError

__all__ = ["DEFAULT_LOG_MAX_BYTES", "GovernLog"]

#: Default bound on the log: 64 MiB. Basis: one reading line of a server on 8 GPUs is under
#: 1.5 KB; at one per second that is a day of readings in ~130 MB, so a bound of 64 MiB holds
#: about half a day before readings stop being logged (the decisions go on being logged).
DEFAULT_LOG_MAX_BYTES = 64 << 20


class GovernLog:
    """Appends JSON lines to ``path`` (see the module docstring).

    Args:
        path: the log file (created; an existing log is appended to).
        max_bytes: the bound on readings; decisions and notes stop at twice it.
        on_cap: called once with the line to print when readings stop being logged.

    Raises:
        ConfigError: the file cannot be opened for appending (one line naming ``--log``).
    """

    def __init__(self, path: Path, max_bytes: int = DEFAULT_LOG_MAX_BYTES, on_cap: Any = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._on_cap = on_cap
        self.readings_capped = False
        self._closed = False
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            self.size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise ConfigError(f"--log {path}: cannot write ({exc.strerror or exc})") from None

    def write(self, event: str, /, **fields: Any) -> bool:
        """Append one line ``{"event": event, "unix": now, **fields}``; False when the bound
        kept it out (a ``reading`` past :attr:`max_bytes`, anything past twice it)."""
        if self._closed:
            return False
        if event == "reading" and self.size >= self.max_bytes:
            if not self.readings_capped:
                self.readings_capped = True
                why = f"the log reached {self.max_bytes} bytes: readings are no longer logged"
                self._append("log_cap", {"message": why + " (decisions, notes and the summary still are)"})
                if self._on_cap is not None:
                    self._on_cap(f"{self.path} reached {self.max_bytes} bytes: readings are no longer logged")
            return False
        if self.size >= 2 * self.max_bytes:
            return False
        self._append(event, fields)
        return True

    def _append(self, event: str, fields: dict[str, Any]) -> None:
        record = {"event": event, "unix": round(time.time(), 3), **fields}
        try:
            line = json.dumps(record, allow_nan=False, default=str)
        except ValueError:  # a non-finite number read from a hostile source: written as text
            line = json.dumps(_finite(record), allow_nan=False, default=str)
        data = (line + "\n").encode()
        try:
            os.write(self._fd, data)
            os.fsync(self._fd)
        except OSError:
            return  # a full disk must not stop the governor from restoring the limits
        self.size += len(data)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self._closed:
            self._closed = True
            os.close(self._fd)


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its text (``"nan"``, ``"inf"``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value

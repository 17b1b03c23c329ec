"""Ctrl-C and SIGTERM as :class:`KeyboardInterrupt`, raised only where that is safe.

Python runs a signal handler in the main thread between two bytecodes, wherever the
thread happens to be. A handler that simply raises ``KeyboardInterrupt`` (Python's
default for SIGINT, and what the sweep used to install for SIGTERM) can therefore raise
it:

1. while a module is being imported (the harness imports httpx and others lazily, on
   the first launch): the module is left half-initialised, later imports fail with odd
   errors, or an import lock stays held and the clean-up hangs;
2. inside code run by ``exec``/``eval`` of a string (``dataclasses`` and
   ``collections.namedtuple`` do this while a module is imported): CPython then records
   an "unhandled" ``KeyboardInterrupt`` even though specband catches it, and a process
   started with ``python -m`` kills itself with SIGINT at exit, so the exit status is
   -2 instead of 130 (CPython ``Python/pythonrun.c`` ``run_eval_code_obj`` sets
   ``unhandled_keyboard_interrupt``; ``Modules/main.c`` ``Py_RunMain`` then calls
   ``exit_sigint``);
3. between the ``fork`` of :class:`subprocess.Popen` and its return: the server runs but
   nobody holds its ``Popen``, so nobody stops it.

:func:`interrupts_as_keyboard_interrupt` installs one handler for SIGINT and SIGTERM
that raises ``KeyboardInterrupt`` at once, except

* while the main thread imports, runs string-``exec``'d code or a ``__del__``: the
  signal is handed to the handler again 20 ms later (:func:`_thread.interrupt_main`),
  until the main thread is out of there;
* inside :func:`deferred` blocks (starting a server and registering it, appending a
  row): ``KeyboardInterrupt`` is raised when the block ends.

Only the standard library is imported here.
"""

from __future__ import annotations

import _thread
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["deferred", "interrupts_as_keyboard_interrupt", "received_signal"]

#: The signals turned into KeyboardInterrupt.
SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
#: Real seconds before a signal that arrived at an unsafe point is handled again.
RETRY_S = 0.02


class _State:
    """What the handler needs: the nesting depth of :func:`deferred` blocks in the main
    thread and the signal waiting for the end of one."""

    def __init__(self) -> None:
        self.depth = 0
        self.pending: int | None = None
        #: the last signal turned into KeyboardInterrupt (for the exit status)
        self.received: int | None = None


_STATE = _State()


def _unsafe(frame: FrameType | None) -> bool:
    """True when ``frame`` or a caller is the import machinery, code ``exec``'d from a
    string, or a ``__del__`` (where an exception is lost)."""
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        if name.startswith("<frozen importlib") or name == "<string>" or code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _retry_later(signum: int) -> None:
    """Hand ``signum`` to its Python handler again after :data:`RETRY_S` (nothing happens
    if, by then, no Python handler is installed for it)."""
    timer = threading.Timer(RETRY_S, _thread.interrupt_main, args=(signum,))
    timer.daemon = True
    timer.start()


def _handler(signum: int, frame: FrameType | None) -> None:
    _STATE.received = signum
    if _STATE.depth > 0:
        _STATE.pending = signum
        return
    if _unsafe(frame):
        _retry_later(signum)
        return
    raise KeyboardInterrupt


@contextmanager
def interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """Within the block, SIGINT (Ctrl-C) and SIGTERM raise ``KeyboardInterrupt`` in the
    main thread, at safe points only (see the module docstring); the previous handlers
    are restored afterwards. Outside the main thread (where Python cannot install signal
    handlers) the block runs unchanged.

    Raises:
        KeyboardInterrupt: on SIGINT or SIGTERM.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in SIGNALS:
            previous[sig] = signal.signal(sig, _handler)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def deferred() -> Iterator[None]:
    """A block that SIGINT/SIGTERM do not interrupt (under
    :func:`interrupts_as_keyboard_interrupt`): a signal that arrives inside it raises
    ``KeyboardInterrupt`` when the block ends, unless an exception already leaves the
    block (a ``KeyboardInterrupt`` then stands for it; any other exception is replaced
    by ``KeyboardInterrupt``). Blocks nest. Outside the main thread it does nothing.

    Raises:
        KeyboardInterrupt: a signal arrived inside the block.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _STATE.depth += 1
    try:
        yield
    except KeyboardInterrupt:
        _STATE.depth -= 1
        if _STATE.depth == 0:
            _STATE.pending = None
        raise
    except BaseException as exc:
        _STATE.depth -= 1
        if _STATE.depth == 0 and _STATE.pending is not None:
            _STATE.pending = None
            raise KeyboardInterrupt from exc
        raise
    else:
        _STATE.depth -= 1
        if _STATE.depth == 0 and _STATE.pending is not None:
            _STATE.pending = None
            raise KeyboardInterrupt


def note_received(signum: int) -> None:
    """Record ``signum`` as received (a library's own handler caught it: Ray's), so that
    the CLI exits 143 for SIGTERM and 130 for Ctrl-C."""
    _STATE.received = signum


def received_signal() -> int | None:
    """The last SIGINT/SIGTERM a :func:`interrupts_as_keyboard_interrupt` block turned
    into ``KeyboardInterrupt`` (``None``: none yet), so that the CLI exits 130 for
    Ctrl-C and 143 for SIGTERM alike for every command."""
    return _STATE.received

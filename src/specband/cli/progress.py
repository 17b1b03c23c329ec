"""Progress on stderr for commands that can run long (``train``, ``simulate``): a spinner with
the step and the elapsed time, drawn by rich, only when stderr is a terminal and only once
the work has run :data:`DELAY_S` (nothing on a pipe or in a file, nothing for quick work), and
cleared when the work ends, so that the command's own output is what stays on screen."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO

__all__ = ["DELAY_S", "progress"]

#: Seconds of work before the spinner appears (issue 30: "longer than a second on a terminal").
DELAY_S = 1.0


@contextmanager
def progress(
    description: str, *, stream: IO[str] | None = None, delay_s: float | None = None
) -> Iterator[Callable[[str], None]]:
    """Show ``description`` with a spinner and the elapsed time on ``stream`` (default:
    stderr) from ``delay_s`` seconds on, while the block runs; yields a function that
    replaces the description (the step being done). On a stream that is not a terminal
    nothing is drawn and the function does nothing. ``delay_s`` ``None``: :data:`DELAY_S`, read
    at the call (so that setting the module's value takes effect)."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        yield lambda _text: None
        return
    from rich.console import Console  # lazy: only on a terminal
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(file=stream, stderr=stream is sys.stderr),
        transient=True,
        redirect_stdout=False,  # the command's own output stays on stdout
        redirect_stderr=False,
    )
    task = bar.add_task(description)
    lock = threading.Lock()
    state = {"done": False}

    def start() -> None:
        with lock:
            if not state["done"]:
                bar.start()
                bar.refresh()  # the first frame now, not at the next refresh tick

    timer = threading.Timer(DELAY_S if delay_s is None else delay_s, start)
    timer.daemon = True
    timer.start()
    try:
        yield lambda text: bar.update(task, description=text)
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            bar.stop()

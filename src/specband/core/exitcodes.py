"""specband's exit statuses, in one place (README "Every command exits ...").

Only the standard library is imported (cold commands stay fast).
"""

from __future__ import annotations

import enum

__all__ = ["ExitCode"]


class ExitCode(enum.IntEnum):
    """The status a ``specband`` command exits with.

    ``INTERRUPTED`` and ``TERMINATED`` follow the shell's ``128 + signal number``
    convention (SIGINT 2, SIGTERM 15). ``launch`` returns the server's own status when the
    server exits by itself.
    """

    OK = 0
    #: ``doctor`` found a warning (and no error).
    WARNINGS = 1
    #: bad input: one ``error: ...`` line, nothing written half-way (also ``doctor`` errors).
    BAD_INPUT = 2
    #: Ctrl-C (SIGINT).
    INTERRUPTED = 130
    #: SIGTERM.
    TERMINATED = 143

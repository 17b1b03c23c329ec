"""specband's exit statuses, and which error exits with which, in one place (README "Every
command exits ...").

A script can tell bad input (2: fix the command line, a file or the permissions; running it
again as it is fails again) from a failed operation, each with its own status: the
inference engine (3), the GPU (4), a download (5). The split follows pip's
``cli/status_codes.py`` (named statuses, one module) and huggingface_hub's
``cli/_errors.py`` (an ordered table from exception class to what the CLI says, the first
``isinstance`` match winning).

Only the standard library and :mod:`specband.core.errors` are imported (cold commands stay
fast).
"""

from __future__ import annotations

import enum

from specband.core.errors import (
    ArtifactError,
    ConfigError,
    DataError,
    DeviceError,
    DownloadError,
    EngineError,
    HarnessError,
    InvalidActionError,
    MissingExtraError,
    PermissionDeniedError,
    SpecbandError,
)

__all__ = ["EXIT_CODES", "ExitCode", "exit_code_for"]


class ExitCode(enum.IntEnum):
    """The status a ``specband`` command exits with.

    ``INTERRUPTED`` and ``TERMINATED`` follow the shell's ``128 + signal number``
    convention (SIGINT 2, SIGTERM 15). ``launch`` returns the server's own status when the
    server exits by itself. 3, 4 and 5 are failed operations: the command was well formed
    and may succeed when run again once the engine, the GPU or the network is fixed.
    """

    OK = 0
    #: ``doctor`` found a warning (and no error).
    WARNINGS = 1
    #: bad input: one ``error: ...`` line, nothing written half-way (also ``doctor`` errors,
    #: usage errors and a permission the command lacks).
    BAD_INPUT = 2
    #: the inference engine failed: its server exited or never became healthy, another
    #: process holds its port, a request to it failed, or a sweep measured no run.
    ENGINE_FAILED = 3
    #: the GPU or its telemetry failed: NVML or Zeus missing or failing, a power limit the
    #: GPU cannot set, a broken emulated GPU state.
    DEVICE_FAILED = 4
    #: a download failed: the Hugging Face hub unreachable (or ``HF_HUB_OFFLINE=1``) and the
    #: id not in the local cache (also ``doctor`` when its only errors are such configs).
    DOWNLOAD_FAILED = 5
    #: Ctrl-C (SIGINT).
    INTERRUPTED = 130
    #: SIGTERM.
    TERMINATED = 143


#: Error class -> exit status, in the order they are tried: the first class the error is an
#: instance of decides, so a subclass that exits otherwise than its parent comes before it
#: (:class:`PermissionDeniedError` before :class:`DeviceError`: a power limit that needs
#: root is a :class:`~specband.devices.power_limit.PowerLimitError` too; :class:`EngineError`
#: before :class:`HarnessError`). Every other class of specband derives from one of these
#: (``tests/core/test_exitcodes.py`` lists each with its status); :class:`SpecbandError`
#: last, bad input.
EXIT_CODES: tuple[tuple[type[SpecbandError], ExitCode], ...] = (
    (PermissionDeniedError, ExitCode.BAD_INPUT),
    (EngineError, ExitCode.ENGINE_FAILED),
    (DeviceError, ExitCode.DEVICE_FAILED),
    (DownloadError, ExitCode.DOWNLOAD_FAILED),
    (ConfigError, ExitCode.BAD_INPUT),
    (DataError, ExitCode.BAD_INPUT),
    (InvalidActionError, ExitCode.BAD_INPUT),
    (ArtifactError, ExitCode.BAD_INPUT),
    (MissingExtraError, ExitCode.BAD_INPUT),
    (HarnessError, ExitCode.BAD_INPUT),
    (SpecbandError, ExitCode.BAD_INPUT),
)


def exit_code_for(error: SpecbandError) -> ExitCode:
    """The status a command that raised ``error`` exits with: the first class of
    :data:`EXIT_CODES` that ``error`` is an instance of."""
    return next(code for cls, code in EXIT_CODES if isinstance(error, cls))

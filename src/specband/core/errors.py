"""The exceptions specband raises on bad input or a failed operation.

Every error a user can cause derives from :class:`SpecbandError`. The CLI catches
``SpecbandError``, prints ``error: <message>`` on one line to stderr and exits, without a
traceback, with the status of its cause (:data:`specband.core.exitcodes.EXIT_CODES`): 2 for
bad input, 3 when the inference engine failed (:class:`EngineError`), 4 when the GPU or its
telemetry failed (:class:`DeviceError`), 5 when a download failed (:class:`DownloadError`).
Messages name where the problem is: a file, a line and a field when the input came from a
file.
"""

from __future__ import annotations

from os import PathLike


def one_line(text: str) -> str:
    """``text`` with every unprintable character escaped (a newline becomes ``\\n``, an
    escape character ``\\x1b``), so that a file name or value quoted in a message stays on
    its line and cannot pose as a second message. The CLI passes every error and note
    line through it."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class SpecbandError(Exception):
    """Base class of every error specband raises for bad input or a failed operation."""


class InvalidActionError(SpecbandError, ValueError):
    """A ``(speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens)``
    triple breaks one of sglang's rules, or is not one of the 19 contract actions.

    The message names the rule that was broken (see :mod:`specband.contract.actions`).
    """


class ConfigError(SpecbandError, ValueError):
    """A configuration value (reward constants, policy hyper-parameters, CLI option,
    hardware profile) is out of its valid range."""


class DataError(SpecbandError, ValueError):
    """A sweep data file is malformed.

    Args:
        path: the file that holds the bad input (``None`` for in-memory data).
        line: 1-based line number in that file (``None`` when the problem is not on one line).
        field: the JSON field at fault (``None`` when not about one field).
        message: what is wrong, in one sentence.

    The string form is ``"<path>:<line>: field '<field>': <message>"`` with the parts
    that are known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | PathLike[str] | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.message = message
        where = self.path or "<data>"
        if line is not None:
            where = f"{where}:{line}"
        text = f"{where}: "
        if field is not None:
            text += f"field '{field}': "
        super().__init__(text + message)


class PermissionDeniedError(SpecbandError):
    """The command needs a permission this process lacks (setting a GPU's power limit
    needs root). Exit 2, like bad input: the command as run cannot succeed, run it with
    the permission (or change what it asks for)."""


class ArtifactError(SpecbandError):
    """A policy artifact folder or file is missing, unreadable or has the wrong
    keys/shapes for the model card's format."""


class DeviceError(SpecbandError):
    """A GPU telemetry backend (NVML, Zeus, emulated) failed in a way the caller must handle:
    NVML or Zeus missing or failing, no GPU at the index, a power limit the GPU cannot set,
    an emulated GPU whose state file is broken. Exit 4."""


class HarnessError(SpecbandError):
    """The sweep or launch could not go on for a reason of its own set-up: an output,
    server-log or log-folder path that cannot be written, a server command that cannot be
    run, a Ray cluster that cannot be reached. Exit 2; its subclass :class:`EngineError`
    (the server itself failed) exits 3."""


class EngineError(HarnessError):
    """The inference engine (sglang, vLLM or the emulator) failed: its server exited or
    never answered ``/health`` (:class:`~specband.engines.failures.LaunchError`), another
    process holds its port, a request, ``/server_info`` or ``/metrics`` failed, or a sweep
    measured nothing because every run failed. Exit 3: the input was fine, the operation
    was not."""


class DownloadError(SpecbandError):
    """A download failed: the Hugging Face hub could not be reached (or ``HF_HUB_OFFLINE=1``)
    and what was asked for is not in the local cache. Exit 5. A hub id that names no repo,
    revision or file is bad input (:class:`specband.files.hub.HubError`, exit 2)."""


class MissingExtraError(SpecbandError):
    """An optional dependency is not installed; the message names what needed it and the
    extra that installs it (e.g. ``pip install 'specband[torch]'``).

    Args:
        package: the import name that is missing (``"torch"``).
        extra: the specband extra that installs it (``"torch"``).
        needed_for: what needed it, e.g. ``"specband-models/mlp_bandit/policy.pth"``.
    """

    def __init__(self, package: str, extra: str, needed_for: str) -> None:
        self.package = package
        self.extra = extra
        self.needed_for = needed_for
        super().__init__(f"{needed_for} needs {package}, which is not installed: pip install 'specband[{extra}]'")

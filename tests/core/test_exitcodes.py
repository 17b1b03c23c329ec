"""specband.core.exitcodes: every error class of specband exits with the status of its
cause (issue 27 item 9): bad input 2, the engine 3, the GPU 4, a download 5."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import specband
from specband.core.errors import SpecbandError
from specband.core.exitcodes import EXIT_CODES, ExitCode, exit_code_for

#: Every error class of specband with the status it exits with: a new class fails
#: test_every_error_class_exits_with_the_status_of_its_cause until its cause is decided here.
EXPECTED: dict[str, ExitCode] = {
    "specband.core.errors.SpecbandError": ExitCode.BAD_INPUT,
    "specband.core.errors.ConfigError": ExitCode.BAD_INPUT,
    "specband.core.errors.DataError": ExitCode.BAD_INPUT,
    "specband.core.errors.InvalidActionError": ExitCode.BAD_INPUT,
    "specband.core.errors.ArtifactError": ExitCode.BAD_INPUT,
    "specband.core.errors.MissingExtraError": ExitCode.BAD_INPUT,
    "specband.core.errors.PermissionDeniedError": ExitCode.BAD_INPUT,
    "specband.core.errors.HarnessError": ExitCode.BAD_INPUT,  # an output or log that cannot be written
    "specband.files.bounded.BoundedError": ExitCode.BAD_INPUT,
    "specband.files.safeload.UntrustedPickleError": ExitCode.BAD_INPUT,
    "specband.files.pathlock.PathBusyError": ExitCode.BAD_INPUT,  # another train or sweep holds the path
    "specband.files.hub.HubError": ExitCode.BAD_INPUT,  # no such repo, revision or file
    "specband.deploy.transfer.TransferError": ExitCode.BAD_INPUT,
    "specband.harness.sweeplock.SweepBusyError": ExitCode.BAD_INPUT,
    "specband.devices.power_limit.PowerLimitBusyError": ExitCode.BAD_INPUT,  # another run sets this GPU's limit
    "specband.sim.profile._ProfileChainError": ExitCode.BAD_INPUT,  # profiles' hardware.base in a loop
    "specband.engines.failures.LauncherError": ExitCode.BAD_INPUT,  # --server-command cannot be run
    "specband.engines.failures.ServerArgsError": ExitCode.BAD_INPUT,  # sglang refused the flags
    "specband.devices.power_limit.PowerLimitPermissionError": ExitCode.BAD_INPUT,  # needs root
    "specband.core.errors.EngineError": ExitCode.ENGINE_FAILED,
    "specband.engines.failures.LaunchError": ExitCode.ENGINE_FAILED,
    "specband.harness.runner.RetriedLaunchError": ExitCode.ENGINE_FAILED,
    "specband.engines.failures.PortInUseError": ExitCode.ENGINE_FAILED,
    "specband.engines.client.RequestError": ExitCode.ENGINE_FAILED,
    "specband.core.errors.DeviceError": ExitCode.DEVICE_FAILED,
    "specband.devices.power_limit.PowerLimitError": ExitCode.DEVICE_FAILED,
    "specband.core.errors.DownloadError": ExitCode.DOWNLOAD_FAILED,
    "specband.files.hub.HubUnreachableError": ExitCode.DOWNLOAD_FAILED,
}


def _error_classes() -> dict[str, type[SpecbandError]]:
    """Every subclass of SpecbandError in specband's modules (all imported), by dotted name."""
    for module in pkgutil.walk_packages(specband.__path__, "specband."):
        importlib.import_module(module.name)
    found: dict[str, type[SpecbandError]] = {}
    todo: list[type[SpecbandError]] = [SpecbandError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("specband."):
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        todo += cls.__subclasses__()
    return found


def _instance(cls: type[SpecbandError]) -> SpecbandError:
    """An instance without running the constructor (some take more than a message)."""
    error = cls.__new__(cls)
    Exception.__init__(error, "x")
    return error


def test_every_error_class_exits_with_the_status_of_its_cause() -> None:
    classes = _error_classes()
    assert sorted(classes) == sorted(EXPECTED)
    got = {name: exit_code_for(_instance(cls)) for name, cls in classes.items()}
    assert got == EXPECTED


def test_a_subclass_comes_before_its_parent_in_the_table() -> None:
    """The first match decides: an entry after one of its parents would never be reached."""
    order = [cls for cls, _ in EXIT_CODES]
    for i, cls in enumerate(order):
        assert not any(issubclass(cls, earlier) for earlier in order[:i]), cls
    assert order[-1] is SpecbandError  # the catch-all, bad input


def test_the_statuses_are_stable_numbers() -> None:
    """Scripts test these numbers: changing one is a breaking change."""
    assert {code.name: int(code) for code in ExitCode} == {
        "OK": 0,
        "WARNINGS": 1,
        "BAD_INPUT": 2,
        "ENGINE_FAILED": 3,
        "DEVICE_FAILED": 4,
        "DOWNLOAD_FAILED": 5,
        "INTERRUPTED": 130,
        "TERMINATED": 143,
    }


@pytest.mark.parametrize("doc", ["README.md", "docs/index.md", "docs/cli.md"])
def test_the_docs_name_every_failure_status(doc: str) -> None:
    text = " ".join((Path(__file__).parents[2] / doc).read_text(encoding="utf-8").split())
    sentence = re.search(r"Every command exits .*?SIGTERM[^.]*\.", text)
    assert sentence is not None, doc
    for code in (2, 3, 4, 5, 130, 143):
        assert re.search(rf"\b{code}\b", sentence.group(0)), (doc, code, sentence.group(0))

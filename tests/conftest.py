"""Shared fixtures. Tests run offline on CPU: no GPU, no model download, no hub access."""

from __future__ import annotations

import importlib
import json
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# the emulator parses launch flags with the strict copy of sglang's parser (held to sglang's
# own by tests/engines/test_sglang_conformance.py) instead of importing sglang (seconds) per launch
os.environ.setdefault("SPECBAND_EMULATOR_SGLANG_PARSER", "0")
# A token that every process this test session starts inherits (sweeps, servers, Ray's
# raylet and workers): the harness tests look for leftover servers only among processes
# holding it (``tests/servers.py`` ``processes_with``). Other developers run the
# same tests on this machine at the same time, with servers whose command lines can name
# the same port: those are neither counted, nor waited for, nor killed. A fresh token per
# session, even inside another session's process.
os.environ["SPECBAND_TEST_SESSION"] = f"{os.getpid()}-{os.urandom(8).hex()}"

from specband.sweeps.dataset import bundled_data_path

PUBLISHED_DATA = bundled_data_path()


#: Set by ``.ci/run``, which installs sglang (and transformers/tokenizers with it): a test
#: needing one of them then fails instead of skipping when it is missing.
# A job that a non-interactive shell starts in the background (a CI runner may) inherits
# SIGINT ignored, and Python then leaves it ignored: the tests that press Ctrl-C, in this
# process or in the commands it starts, need a terminal job's disposition. (A handler, unlike
# SIG_IGN, is reset to the default in a child by exec.)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: the server fixtures (port, sweep_args, python, local_ray) for every package's tests
pytest_plugins = ["tests.servers"]

REQUIRE_SGLANG_ENV = "SPECBAND_REQUIRE_SGLANG"
REQUIRE_RAY_ENV = "SPECBAND_REQUIRE_RAY"


def import_or_skip(
    name: str, hint: str = "see docs/real-engines.md", require_env: str = REQUIRE_SGLANG_ENV
) -> ModuleType:
    """``name`` imported; without it the test skips, or fails when ``require_env`` is ``1``
    (CI sets ``SPECBAND_REQUIRE_SGLANG=1``: it installs sglang, transformers and tokenizers;
    and ``SPECBAND_REQUIRE_RAY=1``: it installs the ``ray`` extra)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get(require_env) == "1":
            pytest.fail(f"{require_env}=1 but {name} is not installed (see docs/real-engines.md)")
        pytest.skip(f"{name} is not installed ({hint})")


@pytest.fixture(scope="session")
def require_module() -> Callable[..., ModuleType]:
    """:func:`import_or_skip`, for test modules (which cannot import this conftest)."""
    return import_or_skip


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Any:
    """The root logger as each test found it: importing sglang calls ``logging.basicConfig(level=INFO)``
    with a handler on the test's captured stderr, which pytest closes after the test; every later
    test that logs (httpx logs each request at INFO) would then print "--- Logging error ---" and a
    traceback into its own stderr."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in an empty working folder, so that files a user's `specband train`
    left in the checkout (./specband-models) or relative outputs never mix with a test."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@dataclass
class CliResult:
    """What one in-process ``specband`` call did."""

    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run ``specband ARGS...`` in-process through :func:`specband.cli.main` (the real
    entry point, with its error handling) and capture exit code, stdout and stderr."""
    from specband.cli import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


@pytest.fixture
def published_records() -> list[dict[str, Any]]:
    """The 29 bundled published live measurements as dicts."""
    return [json.loads(line) for line in PUBLISHED_DATA.read_text().splitlines() if line.strip()]


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[..., Path]:
    """Write rows (dicts, or raw strings written as-is) to a JSONL file under tmp_path."""

    def write(rows: list[Any], name: str = "data.jsonl") -> Path:
        path = tmp_path / name
        lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
        path.write_text("\n".join(lines) + ("\n" if lines else ""))
        return path

    return write

"""The `specband` entry point: every bad input is one `error:` line with exit status 2, a
failed operation one line with its own status (3 the engine, 4 the GPU, 5 the hub)."""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMANDS = ["actions", "train", "recommend", "evaluate", "sweep", "emulate", "import-bench", "simulate", "launch"]


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if c != "emulate"]
)  # emulate passes unknown flags on to sglang's parser
def test_unknown_option_is_one_line(run_cli, command: str) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(command, "--no-such-option")
    assert res.exit_code == 2
    line = _one_error_line(res.stderr)
    assert "--no-such-option" in line and f"specband {command} --help" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--seed", "-1"], "Invalid value for '--seed'"),
        (["train", "--power-limit", "abc"], "Invalid value for '--power-limit'"),
        (["recommend", "--state", "50", "0"], "'--state' requires 3 arguments"),
        (["recommend"], "--batch-size is required"),
        (["sweep"], "Missing option '--target'"),
        (["no-such-command"], "No such command 'no-such-command'"),
    ],
)
def test_usage_errors_are_one_line(run_cli, args: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(*args)
    assert res.exit_code == 2
    assert message in _one_error_line(res.stderr)
    assert res.stdout == ""


def test_help_and_no_arguments(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("--help")
    assert res.exit_code == 0 and "launch" in res.stdout
    # commands grouped by stage, in the order of the work
    panels = [res.stdout.index(f"─ {stage} ") for stage in ("Measure", "Learn", "Deploy", "Tools")]
    assert panels == sorted(panels)
    at = {name: res.stdout.index(f"│ {name} ") for name in ("sweep", "train", "launch")}
    assert at["sweep"] < panels[1] < at["train"] < panels[2] < at["launch"] < panels[3]
    assert run_cli("-h").stdout == res.stdout
    version = run_cli("--version")
    assert version.exit_code == 0 and version.stdout.startswith("specband 0.")
    bare = run_cli()
    assert bare.exit_code == 2 and "Usage: specband" in bare.stderr and "error:" not in bare.stderr
    sub = run_cli("train", "--help")
    assert sub.exit_code == 0 and "--features" in sub.stdout
    sweep = run_cli("sweep", "-h")  # option panels, declared on SweepRequest's fields
    titles = ["Grid", "Server", "Telemetry", "Fleet", "Emulator"]
    assert sweep.exit_code == 0 and all(f"─ {t} (" in sweep.stdout for t in titles)


def test_ctrl_c_is_exit_130_with_one_line(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import os
    import signal
    import time

    import specband.sweeps.dataset

    def interrupted(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered to the running command
        # Python runs the handler at the next bytecode, or (when the handler in place
        # retries a signal that arrived at an unsafe point) a moment later: wait for it
        # instead of assuming which, so that the command never continues past this call
        time.sleep(60)
        raise AssertionError("the Ctrl-C never reached the command")

    monkeypatch.setattr(specband.sweeps.dataset, "load_sweep", interrupted)  # train imports it when it runs
    res = run_cli("train", "--out", "unused-by-this-test")  # SIGINT as in a terminal: tests/conftest.py
    assert res.exit_code == 130
    assert _one_error_line(res.stderr) == "error: interrupted"


def test_python_dash_m_is_the_same_command(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = subprocess.run(
        [sys.executable, "-m", "specband", "recommend", "-b", "0"], capture_output=True, text=True, cwd=tmp_path
    )
    assert res.returncode == 2
    assert _one_error_line(res.stderr) == "error: --batch-size: batch sizes must be in [1, 1048576], got 0"


def test_sigterm_unwinds_and_leaves_no_temporary_file(run_cli, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import os
    import signal

    import specband.sim.run

    real = specband.sim.run.simulate_sweep

    def terminated_mid_write(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        rows = real(*args, **kwargs)
        yield from rows[:50]
        assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())  # the writer's temporary file
        os.kill(os.getpid(), signal.SIGTERM)  # a real SIGTERM, delivered while the file is being written
        yield from rows[50:]

    monkeypatch.setattr(specband.sim.run, "simulate_sweep", terminated_mid_write)  # where simulate calls it
    res = run_cli("simulate", "--out", tmp_path / "s.jsonl")
    assert res.exit_code == 143
    assert _one_error_line(res.stderr) == "error: terminated"
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ("specband.core.errors.ConfigError", 2),
        ("specband.deploy.transfer.TransferError", 2),
        ("specband.devices.power_limit.PowerLimitPermissionError", 2),
        ("specband.engines.client.RequestError", 3),
        ("specband.devices.power_limit.PowerLimitError", 4),
        ("specband.files.hub.HubUnreachableError", 5),
    ],
)
def test_an_error_exits_with_the_status_of_its_cause(run_cli, monkeypatch, error: str, status: int) -> None:  # type: ignore[no-untyped-def]
    """The entry point maps every SpecbandError through specband.core.exitcodes.EXIT_CODES:
    still one `error:` line, no traceback, nothing on stdout."""
    import importlib

    import specband.cli

    module, name = error.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)

    def failing(args: list[str]) -> None:
        raise cls("what went wrong\nsecond line")

    monkeypatch.setattr(specband.cli, "_run", failing)
    res = run_cli("actions")
    assert res.exit_code == status
    assert _one_error_line(res.stderr) == "error: what went wrong\\nsecond line" and res.stdout == ""

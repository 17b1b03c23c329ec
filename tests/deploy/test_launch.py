"""``specband launch``: the pick goes to the server's command line; Ctrl-C stops everything."""

from __future__ import annotations

import itertools
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from tests.servers import TIME_SCALE, emulator_command, one_error_line, processes_with

from specband.core.exitcodes import ExitCode
from specband.engines.sglang_flags import NEWEST_VERSION


def test_dry_run_prints_the_full_command(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "launch",
        "--allow-transfer",
        "--target",
        "unsloth/Llama-3.2-1B-Instruct",
        "--draft",
        "drafts/eagle3",
        "-b",
        "16",
        "--device",
        "none",
        "--port",
        "31234",
        "--server-arg",
        "--log-level warning",
        "--server-arg=--trust-remote-code",
        "--dry-run",
        "--explain",
    )
    assert res.exit_code == 0, res.stderr
    version, line = res.stdout.strip().splitlines()
    assert version.startswith(f"# sglang {NEWEST_VERSION} (")  # the installed release, or the newest when none is
    assert line.startswith("SGLANG_RECORD_STEP_TIME=1 SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 ")
    assert "-m sglang.launch_server --model-path unsloth/Llama-3.2-1B-Instruct" in line
    # the bundled data's recipe at bs 16 and the docs/FACTS.md §1 extras
    assert "--speculative-num-steps 3 --speculative-eagle-topk 2 --speculative-num-draft-tokens 4" in line
    for flag in (
        "--mem-fraction-static 0.65",
        "--dtype float16",
        "--cuda-graph-max-bs-decode 16",
        "--max-running-requests 16",
        "--port 31234",
        "--speculative-draft-model-path drafts/eagle3",
    ):
        assert flag in line
    assert line.endswith("--log-level warning --trust-remote-code")
    assert "lookup_table picks (3,2,4) for batch size 16" in res.stderr


@pytest.mark.parametrize(
    ("version", "flag"),
    [
        ("0.5.4", "--cuda-graph-max-bs 4"),
        ("0.5.13", "--cuda-graph-max-bs 4"),
        ("0.5.14", "--cuda-graph-max-bs-decode 4"),
        ("0.5.20", "--cuda-graph-max-bs-decode 4"),
        ("0.5.23", "--cuda-graph-max-bs-decode 4"),
    ],
)
def test_dry_run_spells_the_flags_for_the_sglang_version(run_cli, version, flag) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "launch",
        "--allow-transfer",
        "--target",
        "m",
        "--draft",
        "d",
        "-b",
        "4",
        "--device",
        "none",
        "--dry-run",
        "--sglang-version",
        version,
    )
    assert res.exit_code == 0, res.stderr
    comment, line = res.stdout.strip().splitlines()
    assert comment == f"# sglang {version} (--sglang-version)"
    assert f" {flag} " in line and line.count("--cuda-graph-max-bs") == 1


def test_an_unsupported_sglang_version_is_one_error_line(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "launch",
        "--allow-transfer",
        "--target",
        "m",
        "-b",
        "4",
        "--device",
        "none",
        "--dry-run",
        "--sglang-version",
        "0.4.9",
    )
    assert res.exit_code == 2
    assert "sglang releases before 0.5.4 are not supported" in one_error_line(res.stderr)


def test_dry_run_bs4_picks_the_reference_and_state_is_used(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "launch",
        "--allow-transfer",
        "--target",
        "m",
        "--draft",
        "d",
        "-b",
        "4",
        "--state",
        "55",
        "900",
        "3",
        "--dry-run",
        "--explain",
    )
    assert res.exit_code == 0, res.stderr
    assert "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8" in res.stdout
    assert "state=[0.5, 0.55, 0.1099, 0.03]" in res.stderr


def test_launch_bad_input_is_one_line_exit_2(run_cli) -> None:  # type: ignore[no-untyped-def]
    for args, message in [
        (["-b", "0"], "Invalid value for '--batch-size' / '-b': Input should be greater than or equal to 1"),
        (["-b", "4", "--device", "gpu7"], "'gpu7' is not one of 'auto', 'nvml', 'none'"),
        (["-b", "4", "--state", "nan", "0", "0"], "--state: TEMP_C must be a number"),
        (["-b", "4", "--state", "50", "0", "500"], "--state: UTIL_PCT must be a number in [0, 100]"),
        (["-b", "4", "--algo", "dqn"], "unknown algorithm 'dqn'"),
        (["-b", "4", "--mem-fraction-static", "1.5"], "--mem-fraction-static must be in (0, 1), got 1.5"),
    ]:
        res = run_cli(
            "launch", "--allow-transfer", "--target", "m", "--draft", "d", "--device", "none", "--dry-run", *args
        )
        assert res.exit_code == 2, (args, res.stderr)
        errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and message in errors[0], res.stderr
        assert "Traceback" not in res.stderr
    res = run_cli("launch", "--allow-transfer", "--target", "m", "-b", "4", "--device", "none", "--dry-run")
    assert res.exit_code == 2 and "needs --draft" in res.stderr


def test_an_unbalanced_server_arg_is_one_error_line(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "launch",
        "--allow-transfer",
        "--target",
        "m",
        "--draft",
        "d",
        "-b",
        "4",
        "--device",
        "none",
        "--server-arg",
        "--log-level warning",
        "--server-arg",
        '"oops',
        "--dry-run",
    )
    assert res.exit_code == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: --server-arg '\"oops' cannot be parsed: No closing quotation"], res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_a_server_arg_that_moves_the_port_or_the_pick_is_refused(run_cli, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    for value, message in [
        (
            "--port 31561",
            "error: --server-arg '--port 31561': --port is set by specband launch; use its --port instead",
        ),
        (
            "--speculative-num-draft-tokens=16",
            "error: --server-arg '--speculative-num-draft-tokens=16': "
            "--speculative-num-draft-tokens is set by specband launch; use its --algo and --models (the policy picks "
            "the speculative flags) instead",
        ),
    ]:
        for dry_run in (["--dry-run"], []):
            res = run_cli(
                "launch",
                "--allow-transfer",
                "--target",
                "m",
                "--draft",
                "d",
                "-b",
                "4",
                "--device",
                "none",
                "--server-arg",
                value,
                *dry_run,
            )
            assert res.exit_code == 2
            assert one_error_line(res.stderr) == message
            assert res.stdout == ""
            assert list(tmp_path.iterdir()) == []  # no server log either


def test_launch_serves_the_pick_and_ctrl_c_stops_the_group(tmp_path: Path, port: int) -> None:
    state = tmp_path / "gpu.json"
    log = tmp_path / "server.log"
    server_command = emulator_command("--time-scale", str(TIME_SCALE), "--state-file", str(state))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specband",
            "launch",
            "--allow-transfer",
            "--target",
            "m",
            "--draft",
            "d",
            "-b",
            "16",
            "--device",
            "none",
            "--port",
            str(port),
            "--server-command",
            server_command,
            "--log",
            str(log),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        ready = ""
        deadline = time.monotonic() + 300  # a busy machine may take a while
        while "ready" not in ready and time.monotonic() < deadline and proc.poll() is None:
            if selector.select(timeout=0.5):
                ready += proc.stdout.readline()
        assert f"sglang ready at http://127.0.0.1:{port} with (3,2,4) for batch size 16" in ready, (
            ready,
            proc.stderr.read() if proc.poll() is not None else "",
        )
        info = httpx.get(f"http://127.0.0.1:{port}/get_server_info", timeout=10).json()
        assert (
            info["speculative_num_steps"],
            info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"],
        ) == (3, 2, 4)
        assert info["max_running_requests"] == 16
        assert processes_with(f"--port {port}")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "stopping the server" in err
        assert "Traceback" not in err
        assert not processes_with(f"--port {port}")
        assert "specband launch" in log.read_text()
        assert json.loads(state.read_text())  # the emulated GPU was driven
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_an_unwritable_log_is_one_error_line_before_anything_runs(run_cli, tmp_path, port) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    server_command = emulator_command("--time-scale", str(TIME_SCALE))
    for (log, reason), dry_run in itertools.product(
        [
            (tmp_path / "adir", "Is a directory"),
            (tmp_path / "afile" / "s.log", "Not a directory"),
            (Path("/proc/specband.log"), ""),
        ],
        ([], ["--dry-run"]),  # a dry run checks --log too, and creates nothing
    ):
        res = run_cli(
            "launch",
            "--allow-transfer",
            "--target",
            "m",
            "--draft",
            "d",
            "-b",
            "4",
            "--device",
            "none",
            "--port",
            port,
            "--server-command",
            server_command,
            "--log",
            log,
            *dry_run,
        )
        assert res.exit_code == 2
        assert one_error_line(res.stderr).startswith(f"error: --log {log}: cannot write ({reason}"), res.stderr
        assert res.stdout == "" and not processes_with(f"--port {port}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]


def test_a_server_command_that_cannot_run_is_one_error_line(run_cli, tmp_path, port) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "server.log"
    res = run_cli(
        "launch",
        "--allow-transfer",
        "--target",
        "m",
        "--draft",
        "d",
        "-b",
        "4",
        "--device",
        "none",
        "--port",
        port,
        "--server-command",
        "/nonexistent/sglang",
        "--log",
        log,
    )
    assert res.exit_code == 2
    assert one_error_line(res.stderr) == (
        "error: --server-command cannot be run: cannot execute '/nonexistent/sglang': not an executable file "
        "(nor one on PATH)"
    )
    assert not log.exists()  # refused with the other options: nothing launched, nothing written


def _nvml_must_not_be_probed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pynvml

    def probed() -> None:
        raise AssertionError("NVML was probed before the options were checked")

    monkeypatch.setattr(pynvml, "nvmlInit", probed)


def test_every_option_is_checked_before_nvml_and_the_error_is_the_only_line(run_cli, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _nvml_must_not_be_probed(monkeypatch)
    log = tmp_path / "server.log"
    for args, message in [
        (["--port", "0"], "Invalid value for '--port': Input should be greater than or equal to 1"),
        (["--port", "70000"], "Invalid value for '--port': Input should be less than or equal to 65535"),
        (["--mem-fraction-static", "nan"], "--mem-fraction-static must be in (0, 1), got nan"),
        (["--mem-fraction-static", "0"], "--mem-fraction-static must be in (0, 1), got 0.0"),
        (["--retry-mem-fraction", "1.2"], "--retry-mem-fraction must be in (0, 1), got 1.2"),
        (["--gpu-index", "-1"], "Invalid value for '--gpu-index': Input should be greater than or equal to 0"),
        (["--launch-timeout", "0"], "--launch-timeout must be > 0 s, got 0.0"),
        (["--algo", "dqn"], "unknown algorithm 'dqn'"),
        (["--server-command", ""], "--server-command: empty; give the server launcher"),
        (["--target", ""], "--target: empty; give a model path or hub id"),
    ]:
        res = run_cli(
            "launch",
            "--allow-transfer",
            "--target",
            "m",
            "--draft",
            "d",
            "-b",
            "4",
            "--device",
            "nvml",
            "--log",
            log,
            *args,
        )
        assert res.exit_code == 2, (args, res.stderr)
        assert res.stderr.splitlines() == [one_error_line(res.stderr)] and message in res.stderr, res.stderr
        assert res.stdout == "" and not log.exists()


def test_a_speculative_pick_without_draft_is_the_only_line(run_cli, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pynvml

    def no_nvml() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_nvml)
    log = tmp_path / "server.log"
    no_sglang = ["--server-command", "/bin/sh -c true"]  # sglang not found: the warning waits too
    for extra in (
        ["--device", "auto"],
        ["--device", "auto", "--dry-run"],
        ["--state", "55", "900", "3"],
        ["--device", "auto", "--dry-run", *no_sglang],
    ):
        res = run_cli("launch", "--allow-transfer", "--target", "m", "-b", "4", "--log", log, *extra)
        assert res.exit_code == 2
        # the NVML note and the pick note are not printed: the error is the only line
        assert res.stderr.splitlines() == [
            "error: lookup_table picks (3,4,8) for batch size 4, a speculative action that needs --draft "
            "(the EAGLE3 draft model path)"
        ], res.stderr
        assert res.stdout == "" and not log.exists()  # the log checked for writing is not left behind


def test_device_nvml_without_nvml_is_an_error_and_auto_goes_on_with_a_note(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import pynvml

    def no_nvml() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_nvml)
    res = run_cli(
        "launch", "--allow-transfer", "--target", "m", "--draft", "d", "-b", "4", "--device", "nvml", "--dry-run"
    )
    assert res.exit_code == ExitCode.DEVICE_FAILED == 4 and res.stdout == ""  # the GPU's failure, not bad input
    assert res.stderr.splitlines() == [one_error_line(res.stderr)]
    assert res.stderr.startswith("error: --device nvml: NVML is not available: nvmlInit failed")
    res = run_cli(
        "launch", "--allow-transfer", "--target", "m", "--draft", "d", "-b", "4", "--device", "auto", "--dry-run"
    )
    assert res.exit_code == 0, res.stderr
    assert "note: NVML is not available" in res.stderr and "telemetry is off" in res.stderr
    assert "--speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8" in res.stdout


def test_help_says_ctrl_c_stops_the_server_with_exit_status_0(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("launch", "--allow-transfer", "--help")
    assert res.exit_code == 0
    text = " ".join(res.stdout.split())
    assert "Ctrl-C (or SIGTERM) stops the server and everything it started; exit status 0" in text


def test_help_gives_the_default_models_folder_as_recommend_uses_it(run_cli) -> None:  # type: ignore[no-untyped-def]
    from specband.artifacts.folder import DEFAULT_MODELS_DIR

    res = run_cli("launch", "--allow-transfer", "--help")
    assert res.exit_code == 0
    text = " ".join(res.stdout.replace("│", " ").split())
    assert (
        f"Default: ./{DEFAULT_MODELS_DIR} when it exists and holds the --algo algorithm, else the embedded policy "
        "trained on the bundled published measurements" in text
    ), text
    assert "default: the embedded policy" not in text


def test_without_sglang_a_good_dry_run_warns_after_the_checks(run_cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "launch", "--allow-transfer", "--target", "m", "--draft", "d", "-b", "4", "--device", "none", "--dry-run",
        "--server-command", "/bin/sh -c true", "--log", tmp_path / "s.log",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert res.stderr.splitlines()[0] == (
        "warning: cannot find sglang in --server-command's interpreter; spelling flags for sglang "
        f"{NEWEST_VERSION} (pass --sglang-version)"
    )
    assert list(tmp_path.iterdir()) == []

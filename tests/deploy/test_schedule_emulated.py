"""Adaptive speculation end to end: the emulator switches step counts by running batch size
as sglang 0.5.23 does, and ``launch --schedule`` starts it without pinning the batch size."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from tests.servers import TIME_SCALE, emulator_command, processes_with

from specband.core.errors import ConfigError
from specband.devices.base import Clock
from specband.emulator.env import MODEL_ENV, STATE_ENV, TIME_SCALE_ENV
from specband.emulator.launchargs import parse_launch_args
from specband.engines.base import get_engine
from specband.engines.serverconfig import SGLANG_ENV, ServerConfig, build_launch_command
from specband.harness.process import ServerProcess

SPEC = ["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "1"]


def _steps(n: int) -> list[str]:
    return ["--speculative-num-steps", str(n), "--speculative-num-draft-tokens", str(n + 1)]


def test_parse_adaptive_flags_as_sglang_resolves_them(tmp_path):
    cfg = tmp_path / "s.json"
    cfg.write_text(
        json.dumps({"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}})
    )
    launch = parse_launch_args([*SPEC, *_steps(3), "--speculative-adaptive", "--speculative-adaptive-config", str(cfg)])
    assert sorted(launch.adaptive) == [1, 4, 8]  # (the emulator ignores no flag: sglang refuses unknown ones)
    assert launch.server_args()["speculative_adaptive"] is True
    assert launch.server_args()["speculative_adaptive_config"] == str(cfg)
    # sglang's default schedule without a file
    assert sorted(parse_launch_args([*SPEC, *_steps(3), "--speculative-adaptive"]).adaptive) == [1, 8, 32, 64]
    # sglang: steps must be a candidate
    with pytest.raises(
        ConfigError, match=r"--speculative-num-steps=5 is not in the adaptive config candidate_steps \[0, 1, 3\]"
    ):
        parse_launch_args([*SPEC, *_steps(5), "--speculative-adaptive", "--speculative-adaptive-config", str(cfg)])
    # sglang falls back to static parameters for topk != 1
    tree = [
        "--model-path",
        "m",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "4",
        "--speculative-num-draft-tokens",
        "8",
        "--speculative-adaptive",
    ]
    assert parse_launch_args(tree).adaptive is None
    cfg.write_text('{"1": {"candidate_steps": []}}')
    with pytest.raises(ConfigError, match="candidate_steps must be a non-empty list"):
        parse_launch_args([*SPEC, *_steps(3), "--speculative-adaptive", "--speculative-adaptive-config", str(cfg)])


def test_emulator_switches_step_counts_by_running_batch_size(tmp_path, port):
    cfg = tmp_path / "s.json"
    cfg.write_text(
        json.dumps({"1": {"candidate_steps": [3]}, "4": {"candidate_steps": [1]}, "8": {"candidate_steps": [0]}})
    )
    config = ServerConfig(
        model_path="m",
        draft_model_path="d",
        port=port,
        server_command=emulator_command("--hardware", "h200"),
        extra_args=("--speculative-adaptive", "--speculative-adaptive-config", str(cfg)),
    )
    command = build_launch_command(config, (3, 1, 4), None, 0.65)
    assert "--max-running-requests" not in command and "--cuda-graph-max-bs" not in command
    env = {
        **os.environ,
        **SGLANG_ENV,
        STATE_ENV: str(tmp_path / "gpu.json"),
        TIME_SCALE_ENV: str(TIME_SCALE),
        MODEL_ENV: "calibrated",
    }
    server = ServerProcess(
        command, host="127.0.0.1", port=port, log_path=tmp_path / "server.log", env=env, clock=Clock(TIME_SCALE)
    )
    server.start()
    try:
        server.wait_healthy(60, 0.5)
        url = server.base_url
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 64}}
        assert httpx.post(f"{url}/generate", json=body, timeout=60).status_code == 200  # batch size 1
        batch = {"text": ["hi"] * 8, "sampling_params": {"max_new_tokens": 1024}}  # long: all 8 run together
        assert httpx.post(f"{url}/generate", json=batch, timeout=60).status_code == 200  # batch size 8
        info = httpx.get(f"{url}/get_server_info", timeout=10).json()
    finally:
        server.stop()
    # unpinned: the emulator's default 256 (fits in the H200 profile's memory)
    assert info["speculative_adaptive"] is True and info["max_running_requests"] == 256
    steps = info["internal_states"][0]["adaptive_steps_by_batch_size"]
    assert steps["1"] == [3] and steps["8"] == [0]
    assert all(v == ([3] if int(k) < 4 else [1] if int(k) < 8 else [0]) for k, v in steps.items())


def test_launch_schedule_dry_run_and_errors(run_cli, tmp_path):
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}}))
    res = run_cli(
        "launch",
        "--allow-transfer",
        "--target",
        "m",
        "--draft",
        "d",
        "--schedule",
        cfg,
        "--device",
        "none",
        "--dry-run",
    )
    assert res.exit_code == 0, res.stderr
    line = res.stdout.strip()
    assert "--max-running-requests" not in line and "--cuda-graph-max-bs" not in line
    assert line.endswith(
        "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2 "
        f"--speculative-adaptive --speculative-adaptive-config {cfg}"
    )  # sglang: union [0,1,3] -> middle element 1
    res = run_cli(
        "launch",
        "--allow-transfer",
        "--target",
        "m",
        "--draft",
        "d",
        "--schedule",
        cfg,
        "--max-running-requests",
        "48",
        "--dry-run",
    )
    assert res.exit_code == 0 and "--max-running-requests 48" in res.stdout and "--cuda-graph-max-bs" not in res.stdout
    Path("specband-schedule.json").write_text("a user's file")
    res = run_cli("launch", "--allow-transfer", "--target", "m", "--draft", "d", "--schedule", "auto", "--dry-run")
    assert res.exit_code == 0, res.stderr
    (note,) = [line for line in res.stderr.splitlines() if line.startswith("note: --schedule auto")]
    assert json.loads(note.split("schedule ", 2)[2].partition(" (tiers")[0]) == {
        "1": {"candidate_steps": [0]},
        "3": {"candidate_steps": [3]},
        "6": {"candidate_steps": [1]},
        "12": {"candidate_steps": [0]},
    }
    assert "--speculative-adaptive-config specband-server.log.schedule-XXXXXXXX.json" in res.stdout
    assert sorted(p.name for p in Path().iterdir()) == ["specband-schedule.json"]  # a dry run writes nothing
    assert Path("specband-schedule.json").read_text() == "a user's file"
    for args, message in [
        ([], "--batch-size is required (or --schedule FILE|auto"),
        (
            ["--schedule", cfg, "--max-running-requests", "0"],
            "Invalid value for '--max-running-requests': Input should be greater than or equal to 1",
        ),
        (["-b", "4", "--max-running-requests", "8"], "--max-running-requests goes with --schedule"),
        (["--schedule", tmp_path / "missing.json"], "cannot read"),
    ]:
        res = run_cli(
            "launch", "--allow-transfer", "--target", "m", "--draft", "d", "--device", "none", "--dry-run", *args
        )
        assert res.exit_code == 2 and message in res.stderr, (args, res.stderr)
        assert [x for x in res.stderr.splitlines() if x.startswith("error: ")] == res.stderr.splitlines()[-1:]
    res = run_cli("launch", "--allow-transfer", "--target", "m", "--schedule", cfg, "--dry-run")
    assert res.exit_code == 2 and "needs --draft" in res.stderr


def test_sglangs_own_parser_takes_the_schedule_command_line(run_cli, tmp_path, require_module):
    """The flags `launch --schedule` writes are sglang 0.5.23's own spellings and types."""
    import argparse
    import shlex

    server_args = require_module("sglang.srt.server_args")
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}}))
    res = run_cli(
        "launch",
        "--allow-transfer",
        "--target",
        "m",
        "--draft",
        "d",
        "--schedule",
        cfg,
        "--max-running-requests",
        "48",
        "--device",
        "none",
        "--dry-run",
    )
    argv = shlex.split(res.stdout, comments=True)  # the first line is a "# sglang X.Y.Z" comment
    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(argv[argv.index("--model-path") :])
    assert (ns.speculative_adaptive, ns.speculative_adaptive_config, ns.max_running_requests) == (True, str(cfg), 48)
    assert (ns.speculative_num_steps, ns.speculative_eagle_topk, ns.speculative_num_draft_tokens) == (1, 1, 2)


def test_launch_schedule_starts_the_emulator_with_it(tmp_path: Path, port: int) -> None:
    cfg = tmp_path / "s.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]}}))
    state = tmp_path / "gpu.json"
    server_command = emulator_command("--hardware", "h200", "--time-scale", str(TIME_SCALE), "--state-file", str(state))
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
            "--schedule",
            str(cfg),
            "--device",
            "none",
            "--port",
            str(port),
            "--server-command",
            server_command,
            "--log",
            str(tmp_path / "log"),
            "--launch-timeout",
            "600",  # real seconds (launch runs at time scale 1): a busy machine starts Python slowly
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        assert proc.stdout is not None
        line = proc.stdout.readline()  # launch's first stdout line, once healthy ("" if it exited)
        assert f"sglang ready at {url} with the schedule {cfg}" in line, (line, proc.poll())
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 32}}
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(lambda _: httpx.post(f"{url}/generate", json=body, timeout=60).status_code, range(8)))
        assert codes == [200] * 8
        info = httpx.get(f"{url}/get_server_info", timeout=10).json()
        assert info["speculative_adaptive"] is True and info["speculative_adaptive_config"] == str(cfg)
        assert info["max_running_requests"] == 256  # not pinned
        steps = info["internal_states"][0]["adaptive_steps_by_batch_size"]
        assert steps and all(v == ([3] if int(k) < 8 else [1]) for k, v in steps.items())
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert not processes_with(f"--port {port}")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_launch_schedule_auto_writes_a_new_file_of_its_own_beside_the_log(tmp_path):
    from specband.deploy.schedule import auto_schedule, launch_schedule, new_auto_schedule_file

    log = tmp_path / "server.log"
    (tmp_path / "specband-schedule.json").write_text("a user's file")
    first, second = new_auto_schedule_file(log), new_auto_schedule_file(log)
    assert first != second and first.parent == tmp_path and first.name.startswith("server.log.schedule-")
    notes: list[str] = []
    auto = auto_schedule(get_engine("sglang"), "lookup_table", None, None, notes=notes)
    pick = launch_schedule(get_engine("sglang"), "auto", auto, notes=notes, auto_file=first, log=log)
    assert pick.path == first and pick.extra_args[-1] == str(first) and pick.engine is get_engine("sglang")
    assert sorted(json.loads(first.read_text())) == ["1", "12", "3", "6"]
    assert notes == [
        # the bundled data has no chain config at bs 1 and 16 (issue 18: say why speculation is off)
        "batch size 1: speculation off: no chain config (topk 1) was measured at batch size 1, and sglang's "
        "adaptive tiers run chains only",
        "batch size 16: speculation off: no chain config (topk 1) was measured at batch size 16, and sglang's "
        "adaptive tiers run chains only",
        f"--schedule auto: wrote lookup_table's schedule to {first} (tiers 1, 3, 6, 12; removed at the end)",
        "the auto schedule is written for sglang 0.5.23",
        # the bundled data's largest batch size is 16, in the last tier (12 and up)
        "batch sizes above 16 were not scheduled from data: sglang 0.5.23 runs every batch size from 12 up with "
        "the last tier's candidate_steps [0]",
    ]
    assert (tmp_path / "specband-schedule.json").read_text() == "a user's file"

"""``specband launch --engine vllm``: the pick or the per-batch-size schedule on vLLM's command
line, served by the emulator answering as vLLM; Ctrl-C stops everything."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import httpx
from tests.harness.launching import launched
from tests.servers import emulator_command, one_error_line, processes_with

from specband.engines.vllm_server import fetch_spec_decode_counters

SCHEDULE = {
    "method": "eagle3",
    "model": "d",
    "num_speculative_tokens": 3,
    "num_speculative_tokens_per_batch_size": [[1, 1, 1], [2, 8, 3]],
}


def test_dry_run_puts_the_schedule_in_speculative_config(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(SCHEDULE))
    res = run_cli(
        "launch", "--engine", "vllm", "--target", "m", "--draft", "/d2", "--schedule", str(path),
        "--max-running-requests", "8", "--dry-run", "--server-command", emulator_command(),
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "# vLLM 0.32.0 (the emulator's)"
    spec = {**SCHEDULE, "model": "/d2"}  # --draft names the draft
    assert f"--speculative-config '{json.dumps(spec, separators=(',', ':'))}'" in lines[1]
    assert " --max-num-seqs 8" in lines[1] and "--max-running-requests" not in lines[1]
    assert "SGLANG_" not in lines[1]


def test_the_pick_is_one_vllm_runs_and_a_bad_schedule_is_one_error_line(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the embedded policy (published sglang data) picks (3,2,4) at batch size 16 for sglang, a tree:
    # for vLLM it picks among the configs vLLM runs (the published rows hold no chain there)
    res = run_cli(
        "launch", "--engine", "vllm", "--target", "m", "--draft", "d", "-b", "16", "--device", "none", "--dry-run",
        "--allow-transfer", "--server-command", emulator_command(),
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert "note: picked among the 1 config(s) vLLM runs (4 left out)" in res.stderr
    assert re.search(r"^  16  \(0,0,0\) ", res.stderr, re.M), res.stderr  # the table's row: the baseline
    assert "--speculative-config" not in res.stdout and " --max-num-seqs 16" in res.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**SCHEDULE, "num_speculative_tokens_per_batch_size": [[4, 2, 1]]}))
    res = run_cli("launch", "--engine", "vllm", "--target", "m", "--draft", "d", "--schedule", str(bad), "--dry-run",
                  "--server-command", emulator_command())  # fmt: skip
    assert res.exit_code == 2 and one_error_line(res.stderr).startswith(f"error: --schedule {bad}: ")


def test_launch_serves_the_schedule_on_the_emulated_vllm_and_ctrl_c_stops_it(tmp_path: Path, port: int) -> None:
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(SCHEDULE))
    args = [
        "--engine", "vllm", "--target", "m", "--draft", "d", "--schedule", str(path), "--port", str(port),
        "--max-running-requests", "8",
        "--server-command", emulator_command("--time-scale", "0.01"), "--log", str(tmp_path / "server.log"),
    ]  # fmt: skip
    with launched(args, "ready at", 90) as (proc, out):
        assert f"vLLM ready at http://127.0.0.1:{port} with the schedule {path}" in out
        url = f"http://127.0.0.1:{port}"
        before = fetch_spec_decode_counters(url)
        body = {"model": "m", "prompt": "Hello", "max_tokens": 64, "temperature": 0, "ignore_eos": True}
        answer = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
        assert answer["usage"]["completion_tokens"] == 64
        counted = fetch_spec_decode_counters(url)
        assert before is not None and counted is not None
        window = counted.minus(before)
        assert window.num_drafts > 0 and window.num_draft_tokens == window.num_drafts  # K = 1 at batch size 1
        assert processes_with(f"--port {port}")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopping the server" in err and "Traceback" not in err
    assert not processes_with(f"--port {port}")

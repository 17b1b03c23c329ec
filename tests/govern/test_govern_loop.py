"""``specband govern`` end to end through the CLI, on the patched NVML of ``conftest.py`` and an
sglang-looking server written there: the limit moves into the band, the lock is held, and the
limit found is put back on every exit (duration, SIGTERM, an exception, the server's death)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from pathlib import Path

import httpx
import pynvml
import pytest
from tests.govern.plans import plan_file
from tests.servers import free_port, one_error_line

from specband.devices.nvml import NvmlDevice
from specband.devices.power_limit import PowerLimitLock

FAST = ["--interval", "0.05", "--window", "0.3", "--dwell", "0.3", "--quiet"]


def govern_args(url: str, plan: Path, log: Path, *extra: str) -> list[str]:
    return ["govern", "--url", url, "--plan", str(plan), "--device", "nvml", "--log", str(log), *FAST, *extra]


def events(log: Path, kind: str) -> list[dict]:
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == kind]


def test_the_limit_moves_into_the_band_and_the_original_comes_back(fake_gpus, fake_server, run_cli, tmp_path):
    """300 W drawn at batch size 8: the tier's 400 W (utilisation 0.75) is lowered in steps of at
    most 70 W (10 % of 700 W) to 300 / 0.965 = 310.9 W, in the band; 700 W is back at the end."""
    log = tmp_path / "govern.jsonl"
    result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), log, "--duration", "3"))
    assert result.exit_code == 0, result.stderr
    gpu = fake_gpus.gpus[0]
    assert gpu.limits_set[0] == 700_000  # the lock taken at the limit found
    assert 400_000 in gpu.limits_set  # the tier's limit from the plan
    assert gpu.limits_set[-1] == 700_000 and gpu.management_mw == 700_000  # restored
    moves = [e for e in events(log, "decision") if e["kind"] == "lower"]
    assert moves and all(e["previous_w"] - e["limit_w"] <= 70.0 + 1e-6 for e in moves)
    assert moves[-1]["limit_w"] == pytest.approx(300.0 / 0.965, abs=0.5)
    last = events(log, "reading")[-1]["gpus"][0]
    assert 0.95 <= last["utilization"] <= 0.98
    assert "time in band" in result.stdout and "GPU 0: power limit restored to 700 W" in result.stdout
    summary = events(log, "summary")[0]
    assert summary["total"]["output_tokens"] > 0 and summary["total"]["energy_j"] > 0


def test_every_gpu_of_a_tensor_parallel_server_is_governed(fake_gpus, fake_server, run_cli, tmp_path):
    fake_server.info["tp_size"] = 2
    fake_gpus.gpus[1].power_mw = 350_000
    log = tmp_path / "govern.jsonl"
    result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), log, "--duration", "3"))
    assert result.exit_code == 0, result.stderr
    finals = {}
    for e in events(log, "decision"):
        finals[e["gpu"]] = e["limit_w"]
    assert finals[0] == pytest.approx(300 / 0.965, abs=0.5) and finals[1] == pytest.approx(350 / 0.965, abs=0.5)
    assert all(g.limits_set[-1] == 700_000 for g in fake_gpus.gpus.values())


def test_a_gpu_held_by_another_process_is_refused_before_anything_is_set(fake_gpus, fake_server, run_cli, tmp_path):
    with NvmlDevice(0) as device:
        held = PowerLimitLock(device.power_limit_lock_path(), device.name)
    try:
        result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), tmp_path / "g.jsonl", "--duration", "2"))
    finally:
        held.release()
    assert result.exit_code == 2
    assert "another specband process" in one_error_line(result.stderr)
    assert fake_gpus.gpus[0].limits_set == []


def test_sigterm_stops_the_loop_and_restores(fake_gpus, fake_server, run_cli, tmp_path):
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), tmp_path / "g.jsonl", "--duration", "60"))
    finally:
        timer.cancel()
    assert result.exit_code == 0, result.stderr
    assert "stopped by signal" in result.stdout
    assert fake_gpus.gpus[0].limits_set[-1] == 700_000 and len(fake_gpus.gpus[0].limits_set) >= 3


def test_an_nvml_failure_mid_run_is_one_error_line_after_the_restore(
    fake_gpus, fake_server, run_cli, tmp_path, monkeypatch
):
    gpu = fake_gpus.gpus[0]
    calls = {"n": 0}

    def flaky(handle: int, mw: int) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # the first feedback move fails
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        gpu.set_limit(mw)

    monkeypatch.setattr(pynvml, "nvmlDeviceSetPowerManagementLimit", flaky)
    result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), tmp_path / "g.jsonl", "--duration", "20"))
    assert result.exit_code == 4, result.stderr
    assert "NVML error" in one_error_line(result.stderr)
    assert gpu.limits_set == [700_000, 400_000, 700_000]  # the failed move, then the restore


def when_governing(fake_gpus, then) -> threading.Thread:
    """Run ``then`` once the governor has set the tier's 400 W (its loop is running)."""

    def wait() -> None:
        for _ in range(2000):
            if 400_000 in fake_gpus.gpus[0].limits_set:
                then()
                return
            threading.Event().wait(0.01)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def test_a_server_that_dies_leaves_the_gpu_at_its_original_limit(fake_gpus, fake_server, run_cli, tmp_path):
    when_governing(fake_gpus, fake_server.stop)
    log = tmp_path / "g.jsonl"
    result = run_cli(
        *govern_args(fake_server.url, plan_file(tmp_path), log, "--duration", "60", "--server-timeout", "1")
    )
    assert result.exit_code == 3
    assert "no usable reading" in one_error_line(result.stderr)
    assert fake_gpus.gpus[0].limits_set[-1] == 700_000
    assert events(log, "restore") and events(log, "skipped")


def test_a_server_that_drips_its_answer_is_a_dead_server_in_bounded_time(fake_gpus, fake_server, run_cli, tmp_path):
    """A slow-loris /metrics (one byte every 0.3 s, never done): each read waits at most
    --timeout, nothing is acted on, and after --server-timeout the limit is restored (exit 3)."""

    def drip() -> None:
        fake_server.mode = "drip"

    when_governing(fake_gpus, drip)
    args = ["--duration", "60", "--server-timeout", "2", "--timeout", "0.5"]
    result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), tmp_path / "g.jsonl", *args))
    assert result.exit_code == 3, result.stderr
    assert fake_gpus.gpus[0].limits_set[-1] == 700_000


@pytest.mark.parametrize(
    ("page", "reason"),
    [
        ("sglang:num_running_reqs nan\n", "is nan"),
        ("sglang:num_running_reqs 1e308\n", "outside 0..64"),
        ("sglang:num_running_reqs -5\n", "outside 0..64"),
        ("sglang:num_queue_reqs 3\n", "no sglang:num_running_reqs"),
        ('sglang:num_running_reqs 8\nsglang:generation_tokens_total{model_name="m"} inf\n', "is inf"),
    ],
)
def test_hostile_metrics_are_logged_and_never_obeyed(fake_gpus, fake_server, run_cli, tmp_path, page, reason):
    fake_server.page = page
    log = tmp_path / "g.jsonl"
    args = ["--duration", "1.5", "--server-timeout", "30"]
    result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), log, *args))
    assert result.exit_code == 0, result.stderr
    assert fake_gpus.gpus[0].limits_set == [700_000, 700_000]  # the lock's own write and the restore
    skipped = events(log, "skipped")
    assert skipped and all(reason in e["reason"] for e in skipped if e["source"] == "server")
    assert not events(log, "decision")


def test_an_absurd_power_reading_is_skipped(fake_gpus, fake_server, run_cli, tmp_path, monkeypatch):
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", lambda h: 5_000_000)  # 5 kW on a 700 W board
    log = tmp_path / "g.jsonl"
    result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), log, "--duration", "1.5"))
    assert result.exit_code == 0, result.stderr
    reasons = [e["reason"] for e in events(log, "skipped") if e["source"].startswith("gpu")]
    assert reasons and all("over 1.5x the board's highest limit" in r for r in reasons)
    assert not [e for e in events(log, "decision") if e["kind"] in ("raise", "lower")]


def test_a_dry_run_sets_nothing_and_says_what_it_would_set(fake_gpus, fake_server, run_cli, tmp_path):
    result = run_cli(
        *govern_args(fake_server.url, plan_file(tmp_path), tmp_path / "g.jsonl", "--duration", "2", "--dry-run")
    )
    assert result.exit_code == 0, result.stderr
    assert fake_gpus.gpus[0].limits_set == []
    assert "GPU 0: would set 400 W (was 700 W), tier 5-16" in result.stdout
    last = re.findall(r"would set ([\d.]+) W \(was 330 W\)", result.stdout)
    assert last and float(last[0]) == pytest.approx(300 / 0.965, abs=0.5), result.stdout


def test_a_dry_run_without_nvml_follows_the_tiers(fake_server, run_cli, tmp_path):
    result = run_cli(
        "govern", "--url", fake_server.url, "--plan", str(plan_file(tmp_path)), "--device", "none", "--dry-run",
        "--duration", "1", *FAST,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "would set 400 W" in result.stdout


def test_without_dry_run_no_nvml_is_one_error(fake_server, run_cli, tmp_path, monkeypatch):
    monkeypatch.setattr(
        pynvml, "nvmlInit", lambda: (_ for _ in ()).throw(pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    )
    result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), tmp_path / "g.jsonl", "--duration", "1"))
    assert result.exit_code == 4
    assert "--dry-run watches without it" in one_error_line(result.stderr)


def test_the_metrics_port_serves_the_governors_state(fake_gpus, fake_server, run_cli, tmp_path):
    port = free_port()
    seen: dict[str, str] = {}

    def scrape() -> None:
        seen["page"] = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text

    timer = threading.Timer(1.5, scrape)
    timer.start()
    result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), tmp_path / "g.jsonl", "--duration", "3",
                                  "--metrics-port", str(port)))  # fmt: skip
    timer.join()
    assert result.exit_code == 0, result.stderr
    page = seen["page"]
    assert 'specband_govern_power_limit_watts{gpu="0"}' in page
    assert "specband_govern_batch_size 8.0" in page
    assert "specband_govern_tier 8.0" in page  # the tier planned at batch size 8
    assert 'specband_govern_in_band_seconds_total{gpu="0"}' in page and "specband_govern_drift 0.0" in page


def test_the_log_stops_readings_at_its_bound_and_keeps_decisions(fake_gpus, fake_server, run_cli, tmp_path):
    log = tmp_path / "g.jsonl"
    result = run_cli(*govern_args(fake_server.url, plan_file(tmp_path), log, "--duration", "3", "--log-max-mb", "0.01"))
    assert result.exit_code == 0, result.stderr
    kinds = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert kinds.count("log_cap") == 1 and kinds[-1] == "summary"
    cap = kinds.index("log_cap")
    assert "reading" not in kinds[cap:]
    assert "readings are no longer logged" in result.stdout


def test_drift_prints_the_measured_acceptance_and_writes_it(fake_gpus, fake_server, run_cli, tmp_path, monkeypatch):
    """The plan expects (3,1,4) to accept 3.0 +-3 %; the server shows 2.0 for a whole window:
    drift once, the measured windows written where --acceptance-from reads them."""
    monkeypatch.setattr("specband.govern.run.DRIFT_WINDOW_S", 0.5)
    out = tmp_path / "measured.jsonl"
    plan = plan_file(tmp_path, acceptance=3.0)
    result = run_cli(
        *govern_args(fake_server.url, plan, tmp_path / "g.jsonl", "--duration", "2", "--drift-out", str(out))
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("drift: accept length 2.500 measured") == 1
    from specband.sim.acceptance_fit import read_acceptance_file

    source = read_acceptance_file(out)
    assert source.observations[0].action == (3, 1, 4) and source.observations[0].accept_length == pytest.approx(2.5)
    assert "the plan names no simulator profile" in result.stdout  # a hand-made plan: nothing to re-plan

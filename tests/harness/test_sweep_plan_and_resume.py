"""``sweep --dry-run`` (every launch line, nothing touched), version-aware flags in the
rows, and ``--resume`` refusing a file measured with other settings."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from tests.servers import emulator_command, one_error_line

from specband.contract.actions import ACTIONS
from specband.contract.record import EXTRA_COLUMNS
from specband.core.errors import ConfigError
from specband.engines.serverconfig import ServerConfig, build_launch_command, check_sglang_env, split_server_args
from specband.engines.sglang_flags import NEWEST_VERSION, detect_sglang_version, parse_version, strict_parser


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_dry_run_prints_every_launch_in_order_and_touches_nothing(run_cli, tmp_path):
    before = sorted(tmp_path.iterdir())
    res = run_cli(
        "sweep",
        "--target",
        "m",
        "--draft",
        "d",
        "--batch-sizes",
        "1,16",
        "--actions",
        "0 3,1,4",
        "--repeats",
        "2",
        "--out",
        tmp_path / "s.jsonl",
        "--dry-run",
        "--sglang-version",
        "0.5.13",
    )
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "# sglang 0.5.13 (--sglang-version)"
    commands = [shlex.split(line) for line in lines[1:]]
    assert len(commands) == 2 * 2 * 2  # repeats x batch sizes x actions, bs-major
    for cmd in commands:
        assert cmd[:2] == ["SGLANG_RECORD_STEP_TIME=1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"]
        assert "--cuda-graph-max-bs" in cmd  # 0.5.13's spelling
    got = [(c[c.index("--cuda-graph-max-bs") + 1], "--speculative-num-steps" in c) for c in commands]
    assert got == [("1", False), ("1", True), ("16", False), ("16", True)] * 2
    assert sorted(tmp_path.iterdir()) == before  # no output, lock, log folder or GPU state


def test_dry_run_one_launch_per_config_and_resume_skip_what_is_done(run_cli, tmp_path):
    out = tmp_path / "s.jsonl"
    res = run_cli(
        "sweep",
        "--target",
        "m",
        "--draft",
        "d",
        "--batch-sizes",
        "1,4,16",
        "--actions",
        "0 10",
        "--repeats",
        "1",
        "--out",
        out,
        "--dry-run",
        "--one-launch-per-config",
    )
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.strip().splitlines()[1:]
    assert len(lines) == 2 and all("--cuda-graph-max-bs-decode 16 --max-running-requests 16" in ln for ln in lines)
    # the file's row 0: bs 1, the baseline (a dry run checks the rows as the sweep does)
    done = {"index": 0, "repeat": 0, "batch_size": 1, "steps": 0, "topk": 0, "num_draft_tokens": 0}
    out.write_text(json.dumps(done) + "\n")
    res = run_cli(
        "sweep",
        "--target",
        "m",
        "--batch-sizes",
        "1",
        "--actions",
        "0 10",
        "--repeats",
        "1",
        "--out",
        out,
        "--dry-run",
        "--resume",
        "--draft",
        "d",
    )
    assert res.exit_code == 0, res.stderr
    assert len(res.stdout.strip().splitlines()) == 2  # the comment and the one launch left
    assert out.read_text() == json.dumps(done) + "\n"


@pytest.mark.parametrize("version", ["0.5.4", "0.5.13", "0.5.14", "0.5.19", "0.5.20", "0.5.23", "0.6.0"])
def test_every_action_line_uses_one_spelling_per_version(version):
    config = ServerConfig(model_path="m", draft_model_path="d", engine_version=version)
    expected = "--cuda-graph-max-bs" if parse_version(version) < (0, 5, 14) else "--cuda-graph-max-bs-decode"
    for action in ACTIONS:
        cmd = build_launch_command(config, action, 8, 0.65)
        assert cmd[cmd.index(expected) + 1] == "8"
        assert [a for a in cmd if a.startswith("--cuda-graph")] == [expected]


def test_newest_lines_pass_the_strict_parser_and_the_old_flag_does_not():
    config = ServerConfig(model_path="m", draft_model_path="d")
    for action in ACTIONS:
        cmd = build_launch_command(config, action, 16, 0.55)
        ns = strict_parser().parse_args(cmd[cmd.index("--model-path") :])
        assert ns.cuda_graph_max_bs_decode == 16 and ns.max_running_requests == 16
    old = build_launch_command(ServerConfig(model_path="m", engine_version="0.5.13"), (0, 0, 0), 16, 0.65)
    with pytest.raises(SystemExit):
        strict_parser().parse_args(old[old.index("--model-path") :])


def test_version_detection_asks_the_server_commands_interpreter(python):
    import importlib.metadata

    try:
        installed = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    assert detect_sglang_version([python, "-m", "sglang.launch_server"]) == installed
    assert detect_sglang_version(["/nonexistent/python3"]) is None
    assert detect_sglang_version(["no-such-launcher-anywhere", "serve"]) is None


def test_version_detection_follows_an_entry_scripts_shebang(python, tmp_path):
    import importlib.metadata

    try:
        installed = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    script = tmp_path / "sglang"
    script.write_text(f"#!{python}\nimport sys\n")
    script.chmod(0o755)
    assert detect_sglang_version([str(script), "serve"]) == installed
    plain = tmp_path / "launcher.sh"
    plain.write_text("#!/bin/sh\nexit 0\n")
    plain.chmod(0o755)
    assert detect_sglang_version([str(plain)]) is None


def test_sweep_rows_record_the_settings_a_resume_must_share(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    res = run_cli(*sweep_args, "--batch-sizes", "1", "--actions", "0", "--repeats", "1", "--out", out)
    assert res.exit_code == 0, res.stderr
    (row,) = _rows(out)
    # the emulated GPU's state stays (it persists like a real GPU); its lock leaves no file
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("s.jsonl.gpu")) == ["s.jsonl.gpu-state.json"]
    for column in (
        "engine",
        "engine_version",
        "dtype",
        "attention_backend",
        "max_new_tokens",
        "num_prompts",
        "workload",
        "workload_sha256",
        "time_scale",
        "draft_flag",
    ):
        assert column in EXTRA_COLUMNS and column in row
    assert row["time_scale"] == float(sweep_args[sweep_args.index("--time-scale") + 1])
    assert row["engine"] == "sglang" and "sglang_version" not in row and "vllm_version" not in row
    assert row["engine_version"] == NEWEST_VERSION or row["engine_version"].startswith("0.5.")
    assert (row["dtype"], row["attention_backend"], row["max_new_tokens"], row["num_prompts"]) == (
        "float16",
        "flashinfer",
        512,
        4,
    )
    assert row["workload"] == "builtin" and len(row["workload_sha256"]) == 64 and row["draft_flag"] is None


@pytest.mark.parametrize(
    ("extra", "column"),
    [
        (["--dtype", "bfloat16"], "dtype"),
        (["--attention-backend", "auto"], "attention_backend"),
        (["--max-new-tokens", "256"], "max_new_tokens"),
        (["--num-prompts", "8"], "num_prompts"),
        (["--mem-fraction-static", "0.7"], "mem_fraction_static"),
        (["--sglang-version", "0.5.20"], "engine_version"),
        (["--time-scale", "0.01"], "time_scale"),  # rows measured in real time (1.0), not emulated faster
    ],
)
def test_resume_refuses_other_settings_naming_the_difference(run_cli, tmp_path, extra, column):
    out = tmp_path / "s.jsonl"
    row = {
        "index": 0,
        "repeat": 0,
        "batch_size": 1,
        "steps": 0,
        "topk": 0,
        "num_draft_tokens": 0,
        "target_model": "m",
        "draft_model": "d",
        "engine": "sglang",
        "engine_version": NEWEST_VERSION,
        "dtype": "float16",
        "attention_backend": "flashinfer",
        "max_new_tokens": 512,
        "num_prompts": 16,
        "workload": "builtin",
        "mem_fraction_static": 0.65,
        "retry_mem_fraction": None,
        "time_scale": 1.0,
    }
    from specband.harness.runner import MeasureSettings

    row["workload_sha256"] = MeasureSettings(server=ServerConfig(model_path="m")).workload_sha256
    out.write_text(json.dumps(row) + "\n")
    res = run_cli(
        "sweep",
        "--target",
        "m",
        "--draft",
        "d",
        "--batch-sizes",
        "1",
        "--actions",
        "0,0,0 3,1,4",
        "--out",
        out,
        "--resume",
        "--sglang-version",
        NEWEST_VERSION,
        "--server-command",
        emulator_command(),
        *extra,
    )
    assert res.exit_code == 2, res.stderr
    line = one_error_line(res.stderr)
    assert f"{out}: cannot resume: its rows have {column}=" in line
    assert out.read_text() == json.dumps(row) + "\n"


def test_server_args_refuse_every_cuda_graph_flag_and_step_time_off():
    for value in (
        "--cuda-graph-max-bs 8",
        "--cuda-graph-max-bs-decode=8",
        "--cuda-graph-max-bs-prefill 4",
        "--cuda-graph-bs 1 2",
        "--cuda-graph-bs-decode 1",
        "--cuda-graph-config x",
        "--cuda-graph-max 8",
    ):
        with pytest.raises(ConfigError, match="is set by specband sweep; use its --batch-sizes instead"):
            split_server_args([value])
    assert split_server_args(["--disable-cuda-graph-padding"]) == ("--disable-cuda-graph-padding",)
    with pytest.raises(ConfigError, match="SGLANG_RECORD_STEP_TIME=0: specband sets SGLANG_RECORD_STEP_TIME=1"):
        check_sglang_env({"SGLANG_RECORD_STEP_TIME": "0"})
    check_sglang_env({"SGLANG_RECORD_STEP_TIME": "1", "OTHER": "0"})


def test_env_step_time_off_is_one_error_line(run_cli, sweep_args, tmp_path):
    res = run_cli(*sweep_args, "--out", tmp_path / "s.jsonl", "--env", "SGLANG_RECORD_STEP_TIME=0")
    assert res.exit_code == 2
    assert "SGLANG_RECORD_STEP_TIME=0" in one_error_line(res.stderr)
    assert not (tmp_path / "s.jsonl").exists()


def test_a_real_shaped_timed_batch_at_bs16_gives_the_models_speed_or_the_labelled_wall_clock(
    run_cli, sweep_args, tmp_path
):
    """sglang records one step-time value per 40 decode iterations: at bs 16 a handful."""
    from specband.emulator.models import load_performance_model

    model = load_performance_model("calibrated", "rtx4060-laptop")
    out = tmp_path / "s.jsonl"
    res = run_cli(*sweep_args, "--batch-sizes", "16", "--actions", "3,4,8", "--repeats", "1", "--out", out)
    assert res.exit_code == 0, res.stderr
    (row,) = _rows(out)
    assert row["speed_source"] == "step_time" and 1 <= row["step_time_count"] <= 10
    pred = model.predict(16, (3, 4, 8), row["gpu_temp_c_before"])
    assert row["speed_tok_s"] == pytest.approx(pred.speed_tok_s, rel=0.1)
    short = tmp_path / "short.jsonl"  # 64 new tokens: too few iterations for a value inside the batch
    res = run_cli(
        *sweep_args,
        "--batch-sizes",
        "16",
        "--actions",
        "3,4,8",
        "--repeats",
        "1",
        "--out",
        short,
        "--max-new-tokens",
        "64",
    )
    assert res.exit_code == 0, res.stderr
    (row,) = _rows(short)
    assert row["speed_source"] == "wall_clock" and row["step_time_s"] is None and row["step_time_count"] == 0
    assert row["speed_tok_s"] == pytest.approx(row["wall_clock_tok_s"])


def test_timed_batch_step_times_drop_the_value_spanning_the_idle_gap():
    from specband.engines.sglang_serving import timed_batch_step_times

    assert timed_batch_step_times([0.5, 0.02], [0.5, 0.02, 0.9, 0.021, 0.019]) == [0.021, 0.019]
    assert timed_batch_step_times([], [0.9]) == []
    assert timed_batch_step_times([0.3], [0.7, 0.02, 0.02]) == [0.02, 0.02]  # flushed meanwhile: all new

"""Flags that bring other flags, and environment variables that retarget the device, are
refused (issue 16 item 7)."""

from __future__ import annotations

import pytest

from specband.core.errors import ConfigError
from specband.engines.serverconfig import split_server_args
from specband.harness.workers import check_pool_env


@pytest.mark.parametrize(
    "value",
    [
        "--config evil.yaml",
        "--config=evil.yaml",
        "--conf evil.yaml",
        "--confi=x.yaml",
        "--log-level info --config x",
        "@flags.txt",
    ],
)
@pytest.mark.parametrize("command", ["sweep", "launch"])
def test_server_arg_refuses_flags_read_from_a_file(value: str, command: str) -> None:
    with pytest.raises(ConfigError, match="reads server flags from a file") as exc:
        split_server_args([value], command=command)
    assert "\n" not in str(exc.value) and repr(value) in str(exc.value)


def test_other_server_args_pass() -> None:
    assert split_server_args(["--log-level warning", "--context-length 4096"]) == (
        "--log-level",
        "warning",
        "--context-length",
        "4096",
    )


def test_sglang_reads_flags_from_config() -> None:
    """The refusal follows sglang: its parser has --config and merges the file's flags."""
    import inspect

    pytest.importorskip("sglang")
    from sglang.srt import server_args

    source = inspect.getsource(server_args)
    assert '"--config"' in source and "ConfigArgumentMerger" in source


@pytest.mark.parametrize("key", ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"])
def test_pool_env_refuses_retargeting_the_gpu(key: str) -> None:
    with pytest.raises(ConfigError, match=f"--env {key}=1: specband sets {key}"):
        check_pool_env({key: "1"})
    check_pool_env({"HF_HOME": "/tmp/x"})


def test_sweep_with_gpus_refuses_cuda_visible_devices(run_cli, tmp_path) -> None:
    result = run_cli(
        "sweep",
        "--target",
        "m",
        "--draft",
        "d",
        "--gpus",
        "0,1",
        "--env",
        "CUDA_VISIBLE_DEVICES=3",
        "--server-command",
        "false",
        "--device",
        "none",
        "--out",
        tmp_path / "s.jsonl",
    )
    assert result.exit_code == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --env CUDA_VISIBLE_DEVICES=3: specband sets")
    assert not (tmp_path / "s.jsonl").exists()


def test_dry_run_shows_env_and_imports_no_factory(run_cli, tmp_path) -> None:
    marker = tmp_path / "imported"
    module = tmp_path / "evil_factory.py"
    module.write_text(f"open({str(marker)!r}, 'w').close()\ndef make(hardware):\n    raise SystemExit(9)\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        result = run_cli(
            "sweep", "--target", "m", "--draft", "d", "--batch-sizes", "1", "--actions", "0",
            "--device", "emulated", "--emulator-model", "evil_factory:make", "--server-command",
            "python -m specband emulate", "--env", "HF_HOME=/tmp/my hub", "--dry-run", "--out", tmp_path / "s.jsonl",
        )  # fmt: skip
    finally:
        sys.path.remove(str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert not marker.exists()
    launches = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    assert launches and all("HF_HOME='/tmp/my hub'" in line for line in launches)


def _one_gpu_dry_run(run_cli, tmp_path, device: str, *env: str):
    pairs = [arg for value in env for arg in ("--env", value)]
    return run_cli(
        "sweep", "--target", "m", "--draft", "d", "--batch-sizes", "1", "--actions", "0",
        "--server-command", "python -m sglang.launch_server", "--sglang-version", "0.5.23",
        "--device", device, *pairs, "--dry-run", "--out", tmp_path / "y.jsonl",
    )  # fmt: skip


@pytest.mark.parametrize("device", ["nvml", "zeus", "auto"])
@pytest.mark.parametrize(
    "env",
    [
        ("CUDA_VISIBLE_DEVICES=3",),
        ("CUDA_VISIBLE_DEVICES=0",),
        ("CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=3"),
    ],
)
def test_a_one_gpu_sweep_refuses_a_server_gpu_other_than_the_one_it_reads(run_cli, tmp_path, device, env) -> None:
    """S39: --env CUDA_VISIBLE_DEVICES=3 on a one-GPU sweep passed its dry run, and the server line
    carried it while the telemetry read NVML index 0 (the power of another GPU than the server's)."""
    result = _one_gpu_dry_run(run_cli, tmp_path, device, *env)
    assert result.exit_code == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: --env CUDA_") and "the telemetry reads NVML GPU 0 (--gpu-index)" in line
    assert not (tmp_path / "y.jsonl").exists()


def test_a_one_gpu_sweep_takes_the_variables_that_name_the_gpu_it_reads(run_cli, tmp_path) -> None:
    result = _one_gpu_dry_run(run_cli, tmp_path, "nvml", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0")
    assert result.exit_code == 0, result.stderr
    assert "CUDA_VISIBLE_DEVICES=0" in result.stdout
    # nothing is read from a GPU: the server's GPU is the user's to choose
    assert _one_gpu_dry_run(run_cli, tmp_path, "none", "CUDA_VISIBLE_DEVICES=3").exit_code == 0

"""``specband sweep --cpu``: sglang's CPU engine as a serving target (flags, dtype, attention
backend, environment, ``--device none``), checked on the launch lines a dry run prints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.servers import one_error_line

from specband.core.errors import ConfigError
from specband.engines.cpu import (
    SGLANG_ASSUME_AMX_ENV,
    SGLANG_CPU_FLAGS,
    ServingOptions,
    apply_cpu_preset,
    cpu_has_amx,
    cpu_has_avx512_bf16,
    cpu_name,
    sglang_cpu_preset,
)

AMD = "processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu avx512f avx512_bf16\n"
INTEL = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C\nflags\t\t: fpu avx512_bf16 amx_bf16 amx_tile\n"


def test_amx_is_read_from_the_cpu_flags() -> None:
    assert cpu_has_amx(INTEL) and not cpu_has_amx(AMD)
    assert cpu_name(AMD) == "cpu: AMD EPYC 9B14" and cpu_name("") == "cpu"


def test_the_preset_keeps_an_inductor_cache_the_environment_names(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SGLANG_CACHE_DIR", str(tmp_path / "shared"))
    preset = sglang_cpu_preset("python -m sglang.launch_server", tmp_path / "cache", cpuinfo=INTEL)
    assert preset.env["SGLANG_CACHE_DIR"] == str(tmp_path / "shared")


def test_the_preset_takes_intel_openmp_from_the_server_venv(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SGLANG_CACHE_DIR", raising=False)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib").mkdir()
    (venv / "pyvenv.cfg").write_text("home = /usr\n")
    (venv / "lib" / "libiomp5.so").write_bytes(b"")
    preset = sglang_cpu_preset(f"{venv}/bin/python -m sglang.launch_server", tmp_path / "cache", cpuinfo=INTEL)
    assert preset.env["LD_PRELOAD"].split(":")[0] == str(venv / "lib" / "libiomp5.so")
    assert preset.env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert preset.env["SGLANG_CACHE_DIR"] == str((tmp_path / "cache").resolve())
    assert "libiomp5.so" not in preset.missing
    assert (preset.dtype, preset.attention_backend, preset.extra_args) == ("bfloat16", "intel_amx", SGLANG_CPU_FLAGS)
    assert preset.hardware == "cpu: Intel(R) Xeon(R) Platinum 8481C"


def test_apply_keeps_the_users_flags_after_the_presets_and_their_env_wins(tmp_path: Path) -> None:
    given = ServingOptions(
        dtype="float16", attention_backend="flashinfer", extra_args=("--log-level", "warning"),
        env={"SGLANG_USE_CPU_ENGINE": "1", "X": "y"}, device_kind="auto", hardware=None,
    )  # fmt: skip
    s = apply_cpu_preset("python -m sglang.launch_server", given, tmp_path, cpuinfo=AMD)
    assert s.extra_args == (*SGLANG_CPU_FLAGS, "--log-level", "warning")
    assert s.env["X"] == "y" and s.device_kind == "none" and s.hardware == "cpu: AMD EPYC 9B14"
    assert "energy_method none" in s.note and "throughput-only" in s.note


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [("dtype", "float32", "--dtype bfloat16"), ("attention_backend", "torch_native", "intel_amx"),
     ("device_kind", "nvml", "--device none")],
)  # fmt: skip
def test_apply_refuses_what_the_cpu_engine_cannot_use(tmp_path: Path, option: str, value: str, says: str) -> None:
    kwargs = {"dtype": "float16", "attention_backend": "flashinfer", "device_kind": "auto", option: value}
    given = ServingOptions(extra_args=(), env={}, hardware=None, **kwargs)
    with pytest.raises(ConfigError, match=says):
        apply_cpu_preset("python -m sglang.launch_server", given, tmp_path)


def test_sweep_cpu_dry_run_prints_cpu_launch_lines(run_cli, tmp_path: Path) -> None:
    result = run_cli(
        "sweep", "--target", "t", "--draft", "d", "--cpu",
        "--server-command", f"{sys.executable} -m sglang.launch_server", "--sglang-version", "0.5.18",
        "--batch-sizes", "1", "--actions", "0 5", "--repeats", "1", "--dry-run",
        "--out", str(tmp_path / "s.jsonl"),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    lines = [ln for ln in result.stdout.splitlines() if "sglang.launch_server" in ln]
    assert len(lines) == 2
    for line in lines:
        assert "--dtype bfloat16" in line and "--attention-backend intel_amx" in line
        assert line.endswith(" ".join(SGLANG_CPU_FLAGS))
    assert result.stderr.count("throughput-only") == 1
    assert not (tmp_path / "s.jsonl").exists()


def test_sweep_cpu_refuses_a_gpu_device(run_cli, tmp_path: Path) -> None:
    result = run_cli(
        "sweep", "--target", "t", "--cpu", "--device", "nvml", "--dry-run", "--out", str(tmp_path / "s.jsonl"),
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--cpu measures no energy (--device none); got --device nvml" in one_error_line(result.stderr)


ZEN4 = "processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu avx512f avx512_bf16 avx512_vnni\n"


def test_a_cpu_without_amx_gets_the_assume_amx_variable_and_one_note_that_says_so(tmp_path: Path) -> None:
    given = ServingOptions("float16", "flashinfer", (), {}, "auto", None)
    s = apply_cpu_preset("python -m sglang.launch_server", given, tmp_path, cpuinfo=ZEN4)
    assert s.env[SGLANG_ASSUME_AMX_ENV] == "1"
    assert len(s.notes) == 1 and f"{SGLANG_ASSUME_AMX_ENV}=1" in s.notes[0] and "no amx_tile" in s.notes[0]
    assert "lacks avx512_bf16" not in s.notes[0]
    # a CPU without AVX-512 BF16/VNNI is named as such (sglang's kernel dies there with SIGILL)
    bare = apply_cpu_preset("python -m sglang.launch_server", given, tmp_path, cpuinfo=AMD)
    assert "lacks avx512_bf16/avx512_vnni" in bare.notes[0]
    assert cpu_has_avx512_bf16(ZEN4) and not cpu_has_avx512_bf16(AMD)


def test_an_amx_cpu_gets_no_assume_amx_variable_and_no_note(tmp_path: Path) -> None:
    given = ServingOptions("float16", "flashinfer", (), {}, "auto", None)
    s = apply_cpu_preset("python -m sglang.launch_server", given, tmp_path, cpuinfo=INTEL)
    assert SGLANG_ASSUME_AMX_ENV not in s.env and s.notes == ()
    assert set(s.env) <= {"SGLANG_USE_CPU_ENGINE", "SGLANG_CACHE_DIR", "LD_PRELOAD"}


def test_the_ci_install_edits_sglang_to_read_the_variable_the_preset_sets() -> None:
    script = (Path(__file__).parents[2] / ".ci" / "install-engines").read_text()
    assert f'environ.get("{SGLANG_ASSUME_AMX_ENV}") == "1"' in script
    assert "is_amx_tile_supported = torch.cpu._is_amx_tile_supported()" in script


def test_launch_cpu_dry_run_sets_the_cpu_engine_and_reads_no_gpu(run_cli, tmp_path: Path) -> None:
    result = run_cli(
        "launch", "--target", "t", "--draft", "d", "--cpu", "--batch-size", "1", "--allow-transfer",
        "--server-command", f"{sys.executable} -m sglang.launch_server", "--sglang-version", "0.5.18",
        "--log", str(tmp_path / "server.log"), "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    line = next(ln for ln in result.stdout.splitlines() if "sglang.launch_server" in ln)
    assert "--dtype bfloat16" in line and "--attention-backend intel_amx" in line
    assert line.endswith(" ".join(SGLANG_CPU_FLAGS))
    assert "SGLANG_USE_CPU_ENGINE=1" in line
    assert ("SPECBAND_SGLANG_ASSUME_AMX=1" in line) == (not cpu_has_amx())
    assert result.stderr.count("no AMX") == (0 if cpu_has_amx() else 1)
    assert "no GPU state is read" in result.stderr
    assert not (tmp_path / "server.log").exists()


def test_launch_cpu_refuses_a_gpu_dtype_it_cannot_serve(run_cli, tmp_path: Path) -> None:
    result = run_cli(
        "launch", "--target", "t", "--cpu", "--batch-size", "1", "--dtype", "float32", "--dry-run",
        "--log", str(tmp_path / "server.log"),
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--cpu sets --dtype bfloat16" in one_error_line(result.stderr)

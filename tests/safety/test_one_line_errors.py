"""Every hostile input of issue 16 item 9 is one ``error:`` line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DEEP = "[" * 200_000 + "]" * 200_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000


def _one_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("deep", [DEEP, DEEP_OBJECT])
def test_deeply_nested_json_in_every_reader(run_cli, tmp_path: Path, deep: str) -> None:
    data = tmp_path / "deep.jsonl"
    data.write_text(deep + "\n")
    assert "nested too deeply" in _one_line(run_cli("train", data, "--out", tmp_path / "m"))
    assert not (tmp_path / "m").exists()
    assert "deep.jsonl" in _one_line(run_cli("merge", tmp_path / "all.jsonl", data))
    assert not (tmp_path / "all.jsonl").exists()
    assert "deep.jsonl" in _one_line(run_cli("import-bench", data, "--out", tmp_path / "b.jsonl"))
    assert not (tmp_path / "b.jsonl").exists()
    sharegpt = tmp_path / "deep.json"
    sharegpt.write_text(deep if deep.startswith("[") else "[" + deep + "]")
    from specband.core.errors import SpecbandError
    from specband.harness.workload import load_prompts

    for prompts in (sharegpt, data):
        with pytest.raises(SpecbandError, match=r"nested too deeply|expected"):
            load_prompts(prompts, "m")
    models = tmp_path / "models"
    models.mkdir()
    (models / "specband.json").write_text(deep)
    assert "specband.json" in _one_line(run_cli("recommend", "--models", models, "-b", "4"))
    config = tmp_path / "target"
    config.mkdir()
    (config / "config.json").write_text(deep)
    line = _one_line(run_cli("simulate", "--target-config", config / "config.json", "--out", tmp_path / "sim.jsonl"))
    assert "config.json" in line and not (tmp_path / "sim.jsonl").exists()
    doctor = run_cli("doctor", "--target", config, "--draft", config)
    assert doctor.exit_code == 2 and "Traceback" not in doctor.stderr
    assert "config.json" in doctor.stdout + doctor.stderr


def test_a_file_name_over_255_bytes_is_one_line(run_cli, tmp_path: Path) -> None:
    long = tmp_path / ("x" * 300 + ".jsonl")
    line = _one_line(run_cli("simulate", "--out", long))
    assert "File name too long" in line or "name" in line
    line = _one_line(run_cli("train", "--out", tmp_path / ("m" * 300)))
    assert "too long" in line.lower()


def test_a_profile_whose_base_names_itself_is_one_line(run_cli, tmp_path: Path) -> None:
    profile = tmp_path / "loop.toml"
    profile.write_text(f'base = "{profile}"\n')
    line = _one_line(run_cli("simulate", "--profile", profile, "--out", tmp_path / "s.jsonl"))
    assert "loop.toml" in line


def test_prometheus_inf_sample_is_one_line(run_cli, tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.txt"
    metrics.write_text('sglang:num_running_reqs{model_name="m"} +Inf\n')
    line = _one_line(run_cli("recommend", "--batch-mix-from", metrics))
    assert "metrics.txt" in line


@pytest.mark.parametrize("mix", ["1:1e308,4:1e308", "1:inf,4:1", "1:nan"])
def test_batch_mix_weights_that_overflow_are_refused(run_cli, mix: str) -> None:
    line = _one_line(run_cli("recommend", "--batch-mix", mix))
    assert "--batch-mix" in line


def test_nested_manifest_json_via_python(tmp_path: Path) -> None:
    from specband.artifacts.folder import load_manifest
    from specband.core.errors import ArtifactError

    (tmp_path / "specband.json").write_text(json.dumps({"features": "pre"})[:-1] + ', "x": ' + DEEP + "}")
    with pytest.raises(ArtifactError, match="nested too deeply"):
        load_manifest(tmp_path)

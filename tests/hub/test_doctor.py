"""``specband doctor`` and the pre-launch RoPE refusal of sweep and launch (issue 9 item 4),
and the config robustness of ``simulate`` (item 5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specband.core.errors import ConfigError, DeviceError
from specband.doctor.machine import (
    Check,
    check_pair_before_launch,
    config_checks,
    environment_checks,
    exit_status,
)
from specband.engines.base import get_engine
from specband.engines.sglang_serving import sglang_version_check as _installed_check
from specband.sim.hfconfig import bundled_model_config_path, load_model_spec, rope_settings

from .conftest import add_snapshot, config_bytes


def sglang_version_check(version: str) -> Check:
    """The doctor's line for sglang ``version``, as :func:`specband.doctor.machine.engine_check` makes it."""
    found = _installed_check(version, get_engine("sglang"))
    return Check("sglang", found.level, found.message, found.fix)


LLAMA3_SCALING = {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}


def _bundled(name: str) -> dict[str, Any]:
    return json.loads(bundled_model_config_path(name).read_text())


@pytest.fixture
def target() -> dict[str, Any]:
    return _bundled("llama-3.2-1b-instruct")


@pytest.fixture
def draft() -> dict[str, Any]:
    """The bundled head (RoPE already copied from the target)."""
    return _bundled("eagle3-llama-3.2-1b-instruct")


def published_head(draft: dict[str, Any]) -> dict[str, Any]:
    """The SpecForge head as published: rope_theta 10000, no scaling (docs/FACTS.md §6)."""
    return {**draft, "rope_theta": 10000.0, "rope_scaling": None}


def transformers5(config: dict[str, Any]) -> dict[str, Any]:
    """The same config in transformers 5's layout: ``rope_parameters`` holds theta and
    scaling, ``dtype`` replaces ``torch_dtype``."""
    out = {k: v for k, v in config.items() if k not in ("rope_theta", "rope_scaling", "torch_dtype")}
    out["rope_parameters"] = {
        "rope_theta": config["rope_theta"],
        **(config["rope_scaling"] or {"rope_type": "default"}),
    }
    out["dtype"] = config["torch_dtype"]
    return out


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_the_bundled_pair_passes_the_config_checks(target, draft) -> None:
    checks = by_name(config_checks(target, draft))
    assert {n: c.level for n, c in checks.items()} == {
        "rope": "ok",
        "dtype": "warn",
        "vocab": "ok",
        "hidden": "ok",
        "architecture": "ok",
        "positions": "ok",
    }
    assert "--dtype float16" in checks["dtype"].fix and "CUDA-graph capture" in checks["dtype"].message
    assert "EAGLE3" in checks["architecture"].message


@pytest.mark.parametrize("layout", ["classic", "transformers5", "mixed"])
def test_the_studys_rope_mismatch_is_caught_in_both_layouts(target, draft, layout: str) -> None:
    head = published_head(draft)
    t, d = {
        "classic": (target, head),
        "transformers5": (transformers5(target), transformers5(head)),
        "mixed": (transformers5(target), head),
    }[layout]
    rope = by_name(config_checks(t, d, target_source="t/config.json", draft_source="d/config.json"))["rope"]
    assert rope.level == "error"
    assert "10000" in rope.message and "500000" in rope.message and "about 1.0" in rope.message
    assert rope.fix == "copy the target's rope_theta (500000) and rope_scaling into d/config.json"


def test_the_same_rope_in_two_layouts_matches(target, draft) -> None:
    assert rope_settings(target) == rope_settings(transformers5(target)) == (500000.0, LLAMA3_SCALING)
    assert by_name(config_checks(transformers5(target), draft))["rope"].level == "ok"
    nested = {
        "rope_parameters": {
            "full_attention": {"rope_theta": 1e6, "type": "linear", "factor": 2.0},
            "sliding_attention": {"rope_theta": 1e4},
        }
    }
    assert rope_settings(nested) == (1e6, {"rope_type": "linear", "factor": 2.0})
    assert rope_settings({"rope_theta": 10000, "rope_parameters": {"rope_type": "default"}}) == (10000.0, None)


@pytest.mark.parametrize(
    "change, name, level, words",
    [
        ({"vocab_size": 32000}, "vocab", "error", "target 128256, draft 32000"),
        ({"hidden_size": 4096}, "hidden", "error", "target 2048, draft 4096"),
        ({"architectures": ["EagleLlamaForCausalLM"]}, "architecture", "warn", "--speculative-algorithm EAGLE"),
        ({"architectures": ["LlamaForCausalLM"]}, "architecture", "error", "not an EAGLE/EAGLE3 head"),
        ({"max_position_embeddings": 2048}, "positions", "warn", "draft 2048 < target 131072"),
        ({"torch_dtype": "bfloat16"}, "dtype", "ok", "--dtype bfloat16"),
    ],
)
def test_each_config_check(target, draft, change, name: str, level: str, words: str) -> None:
    check = by_name(config_checks(target, {**draft, **change}))[name]
    assert check.level == level and words in check.message
    assert (check.fix is None) == (level == "ok")


@pytest.mark.parametrize(
    "key, value",
    [
        ("vocab_size", "abc"),
        ("rope_theta", "abc"),
        ("rope_theta", [1]),
        ("rope_scaling", "llama3"),
        ("torch_dtype", "float99"),
    ],
)
def test_a_wrong_type_is_one_error_naming_file_and_key(target, draft, key: str, value) -> None:
    with pytest.raises(ConfigError, match=rf"^d/config.json: field '{key}'"):
        config_checks(target, {**draft, key: value}, draft_source="d/config.json")


def test_exit_status() -> None:
    assert exit_status([Check("a", "ok", "")]) == 0
    assert exit_status([Check("a", "ok", ""), Check("b", "warn", "", "x")]) == 1
    assert exit_status([Check("a", "warn", "", "x"), Check("b", "error", "", "y")]) == 2
    # by cause: a config the hub could not deliver is a failed download (5), unless bad input is there too
    assert exit_status([Check("a", "warn", "", "x"), Check("b", "error", "", "y", 5)]) == 5
    assert exit_status([Check("a", "error", "", "x", 5), Check("b", "error", "", "y")]) == 2


class _FakeDevice:
    def __init__(self, energy_method: str, power_limit_w: float | None) -> None:
        self.name, self.energy_method, self.power_limit_w, self.power_limit_source = (
            "Fake GPU",
            energy_method,
            power_limit_w,
            "enforced",
        )

    def __enter__(self) -> _FakeDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_environment_checks() -> None:
    from importlib import metadata

    checks = by_name(environment_checks(lambda: _FakeDevice("counter", 80.0)))
    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:  # the README's set-up installs no sglang
        assert checks["sglang"].level == "error" and checks["sglang"].message == "sglang is not installed"
        assert checks["sglang"].fix == "pip install sglang (on the GPU machine)"
    else:
        assert checks["sglang"] == sglang_version_check(version)
        assert f"sglang {version}" in checks["sglang"].message
        assert "--speculative-num-draft-tokens 8" in checks["sglang"].message
    assert checks["nvml"].message == "NVML sees Fake GPU"
    assert checks["energy"].level == "ok" and checks["power-limit"].message == "80 W (enforced)"
    checks = by_name(environment_checks(lambda: _FakeDevice("power_integration", None)))
    assert checks["energy"].level == "warn" and checks["power-limit"].fix == "pass --power-limit W"

    def no_nvml() -> Any:
        raise DeviceError("NVML is not available: nvmlInit failed")

    checks = by_name(environment_checks(no_nvml))
    assert checks["nvml"].level == "warn" and "energy" not in checks
    assert checks["flashinfer"].level in ("ok", "warn")


def _write_pair(tmp_path: Path, target: dict, draft: dict) -> tuple[Path, Path]:
    for name, config in (("target", target), ("draft", draft)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    return tmp_path / "target", tmp_path / "draft"


def test_doctor_cli_exit_statuses(run_cli, tmp_path: Path, target, draft, monkeypatch) -> None:
    monkeypatch.setattr("specband.doctor.machine.environment_checks", lambda open_nvml=None, engine=None: [])
    t, d = _write_pair(tmp_path, target, {**draft, "torch_dtype": "bfloat16"})
    res = run_cli("doctor", "--target", t, "--draft", d)
    assert res.exit_code == 0, res.stdout
    assert [line.split()[0] for line in res.stdout.splitlines()] == ["ok"] * 6
    (d / "config.json").write_text(json.dumps(draft))  # float16 head: a warning
    assert run_cli("doctor", "--target", t, "--draft", d).exit_code == 1
    (d / "config.json").write_text(json.dumps(transformers5(published_head(draft))))
    res = run_cli("doctor", "--target", t, "--draft", d)
    assert res.exit_code == 2
    assert res.stdout.splitlines()[0].startswith("error rope: draft 10000/None differs from target 500000/")


def test_doctor_with_hub_ids(run_cli, hub_cache: Path, target, draft, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr("specband.doctor.machine.environment_checks", lambda open_nvml=None, engine=None: [])
    add_snapshot(hub_cache, "unsloth/Llama-3.2-1B-Instruct", {"config.json": config_bytes(target)})
    add_snapshot(
        hub_cache,
        "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct",
        {"config.json": config_bytes(published_head(draft))},
    )
    res = run_cli(
        "doctor",
        "--target",
        "unsloth/Llama-3.2-1B-Instruct",
        "--draft",
        "hf://rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct",
    )
    assert res.exit_code == 2 and res.stdout.startswith("error rope:")
    res = run_cli("doctor", "--target", "org/missing", "--draft", "org/missing-draft")
    lines = res.stdout.splitlines()
    # the hub is offline (HF_HUB_OFFLINE=1) and the ids are not in the cache: a failed download, exit 5
    assert res.exit_code == 5 and lines[0].startswith("error target-config: org/missing/config.json: not in the local")
    assert lines[1].startswith("error draft-config: org/missing-draft/config.json")
    # a hub id was given: the fix is the hub's, not "give ... a hub id"
    assert lines[0].endswith(
        "fix: the hub was not reached (offline or unreachable) and org/missing is not in its cache: run "
        "`hf download org/missing` where the hub is reachable (the same HF_HOME), or give a local model folder "
        "or its config.json"
    ), lines[0]
    assert "give a model folder, its config.json or a hub id" not in res.stdout
    # with a bad input beside it (a folder that does not exist), bad input decides: 2
    res = run_cli("doctor", "--target", "org/missing", "--draft", str(tmp_path / "no-such-draft"))
    assert res.exit_code == 2 and res.stdout.splitlines()[1].startswith("error draft-config:")


def test_launch_refuses_a_rope_mismatch_unless_allowed(run_cli, tmp_path: Path, target, draft) -> None:
    t, d = _write_pair(tmp_path, target, published_head(draft))
    args = ("launch", "--target", str(t), "--draft", str(d), "-b", "4", "--device", "none", "--dry-run")
    res = run_cli(*args)
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith("error: rope: draft 10000/None") and "--allow-rope-mismatch" in lines[0]
    )
    res = run_cli(*args, "--allow-rope-mismatch")
    assert res.exit_code == 0 and f"--model-path {t}" in res.stdout


def test_sweep_refuses_a_rope_mismatch_before_touching_anything(run_cli, tmp_path: Path, target, draft) -> None:
    t, d = _write_pair(tmp_path, target, published_head(draft))
    out = tmp_path / "runs" / "sweep.jsonl"
    res = run_cli(
        "sweep",
        "--target",
        str(t),
        "--draft",
        str(d),
        "--out",
        str(out),
        "--device",
        "none",
        "--server-command",
        "false",
        "--quiet",
    )
    assert res.exit_code == 2 and "error: rope:" in res.stderr and "--allow-rope-mismatch" in res.stderr
    assert not (tmp_path / "runs").exists()


def test_sweep_dry_run_refuses_a_rope_mismatch_as_the_sweep_does(run_cli, tmp_path: Path, target, draft) -> None:
    t, d = _write_pair(tmp_path, target, published_head(draft))
    args = ("sweep", "--target", t, "--draft", d, "--out", tmp_path / "s.jsonl", "--device", "none", "--dry-run")
    res = run_cli(*args)
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: rope: draft 10000/None"), res.stderr
    res = run_cli(*args, "--allow-rope-mismatch")
    assert res.exit_code == 0 and f"--model-path {t}" in res.stdout and "RoPE" not in res.stderr


def test_check_pair_before_launch_skips_what_it_cannot_read(tmp_path: Path) -> None:
    check_pair_before_launch("m", "d")  # a fake pair (tests, or a model not cached): nothing to check
    check_pair_before_launch("m", None)


@pytest.mark.parametrize(
    "change, key",
    [
        ({"rope_theta": "abc"}, "rope_theta"),
        ({"rope_theta": [500000]}, "rope_theta"),
        ({"rope_parameters": 3}, "rope_parameters"),
        ({"torch_dtype": 16}, "torch_dtype"),
        ({"hidden_size": "2048"}, "hidden_size"),
    ],
)
def test_simulate_config_with_a_wrong_type_is_one_error_line(run_cli, tmp_path: Path, target, change, key) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**target, **change}))
    with pytest.raises(ConfigError, match=rf"^{path}: field '{key}'"):
        load_model_spec(path, draft=False)
    res = run_cli("simulate", "--target-config", path, "--out", "s.jsonl")
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert f"{path}: field '{key}'" in res.stderr and not Path("s.jsonl").exists()


def test_simulate_reads_the_rope_parameters_layout(target, draft) -> None:
    classic_t, classic_d = load_model_spec(target, draft=False), load_model_spec(draft, draft=True)
    new_t = load_model_spec(transformers5(target), draft=False)
    new_d = load_model_spec(transformers5(published_head(draft)), draft=True)
    assert (new_t.rope_theta, dict(new_t.rope_scaling)) == (classic_t.rope_theta, dict(classic_t.rope_scaling))
    assert new_t.weight_bytes == classic_t.weight_bytes  # bfloat16 from 'dtype'
    assert new_d.rope_theta == 10000.0 and new_d.rope_scaling is None and classic_d.rope_theta == 500000.0
    from specband.sim.hfconfig import rope_mismatch

    assert rope_mismatch(new_t, new_d) is not None and rope_mismatch(new_t, classic_d) is None


@pytest.mark.parametrize(
    ("version", "level", "spelling"),
    [
        ("0.5.23", "ok", "--cuda-graph-max-bs-decode"),
        ("0.5.14", "ok", "--cuda-graph-max-bs-decode"),
        ("0.5.13", "ok", "--cuda-graph-max-bs"),
        ("0.5.4", "ok", "--cuda-graph-max-bs"),
        ("0.6.0", "warn", "--cuda-graph-max-bs-decode"),
    ],
)
def test_the_sglang_check_prints_the_spellings_of_its_version(version: str, level: str, spelling: str) -> None:
    check = sglang_version_check(version)
    assert check.level == level
    assert check.message.startswith(f"sglang {version}; specband emits: --speculative-algorithm EAGLE3")
    assert check.message.split("; ")[2] == f"version-dependent spellings: {spelling}"
    if level == "warn":
        assert "newer than 0.5.23 (supported: 0.5.4 .. 0.5.23)" in check.message


def test_the_sglang_check_warns_for_a_release_older_than_supported() -> None:
    check = sglang_version_check("0.4.9")
    assert check.level == "warn"
    assert check.message == "sglang 0.4.9: sglang releases before 0.5.4 are not supported (supported: 0.5.4 .. 0.5.23)"


@pytest.mark.parametrize(("value", "shown"), [(10**400, "10000000000000000000... (401 digits)"), (-5, "-5"), (0, "0")])
def test_a_context_window_no_model_has_is_one_error_line(
    run_cli, tmp_path: Path, target, draft, monkeypatch, value, shown
) -> None:
    """B28: a draft max_position_embeddings of 10**400 was printed whole in an ok line, and -5 put
    in a fix (--context-length -5)."""
    monkeypatch.setattr("specband.doctor.machine.environment_checks", lambda open_nvml=None, engine=None: [])
    t, d = _write_pair(tmp_path, target, {**draft, "max_position_embeddings": value})
    res = run_cli("doctor", "--target", t, "--draft", d)
    assert res.exit_code == 2
    text = res.stdout + res.stderr
    assert "Traceback" not in text and "--context-length -5" not in text and str(10**400) not in text
    (line,) = [ln for ln in text.splitlines() if "max_position_embeddings" in ln]
    assert "must be an integer in [1, 1073741824]" in line and f"got {shown}; fix: fix that field" in line, line

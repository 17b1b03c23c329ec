"""Choosing the emulator's performance model: ``calibrated`` or a ``module:function`` factory."""

from __future__ import annotations

import pytest

from specband.core.errors import ConfigError
from specband.emulator.models import DEFAULT_MODEL, MODEL_CHOICES, load_performance_model
from specband.sim import build_model
from specband.sim.base import PerformanceModel


def test_default_is_the_calibrated_simulator_model():
    model = load_performance_model()
    assert DEFAULT_MODEL == "calibrated" and isinstance(model, PerformanceModel)
    ref = build_model("rtx4060-laptop")
    assert type(model) is type(ref)
    assert model.predict(4, (3, 4, 8), 50.0) == ref.predict(4, (3, 4, 8), 50.0)
    assert model.power_limit_w == 80.0 and model.vram_mb == ref.vram_mb


def test_calibrated_follows_the_hardware_profile():
    laptop = load_performance_model("calibrated", "rtx4060-laptop")
    h200 = load_performance_model("calibrated", "h200")
    assert h200.power_limit_w > laptop.power_limit_w and h200.vram_mb > laptop.vram_mb
    with pytest.raises(ConfigError, match="cannot build the calibrated model for 'no-such-gpu'"):
        load_performance_model("calibrated", "no-such-gpu")


def test_module_function_factory_gets_the_hardware():
    model = load_performance_model("specband.sim:build_model", "h200")
    assert model.predict(8, (3, 4, 8), 50.0) == build_model("h200").predict(8, (3, 4, 8), 50.0)


@pytest.mark.parametrize("spec", ["toy", "auto", "", "specband.sim:", ":build_model"])
def test_unknown_specs_name_the_valid_choices(spec):
    with pytest.raises(ConfigError) as info:
        load_performance_model(spec)
    assert f"unknown performance model {spec!r}" in str(info.value)
    assert all(choice in str(info.value) for choice in MODEL_CHOICES)


def test_bad_factories_are_config_errors():
    with pytest.raises(ConfigError, match="cannot load performance model 'no_such_module:f'"):
        load_performance_model("no_such_module:f")
    with pytest.raises(ConfigError, match=r"cannot load performance model 'specband\.sim:nope'"):
        load_performance_model("specband.sim:nope")
    with pytest.raises(ConfigError, match="failed for 'no-such-gpu'"):
        load_performance_model("specband.sim:build_model", "no-such-gpu")
    with pytest.raises(ConfigError, match="lacks predict, advance_temperature, power_limit_w"):
        load_performance_model("builtins:str")  # str('rtx4060-laptop') is no performance model


def test_the_toy_model_is_gone(run_cli, tmp_path):
    with pytest.raises(ImportError):
        __import__("specband.harness.toy_model")
    emulate = run_cli("emulate", "--perf-model", "toy", "--model-path", "m", "--load-time", "0")
    assert emulate.exit_code == 2
    assert "error: unknown performance model 'toy'; expected one of: calibrated, module:function" in emulate.stderr
    sweep = run_cli(
        "sweep",
        "--target",
        "m",
        "--draft",
        "d",
        "--out",
        tmp_path / "s.jsonl",
        "--device",
        "emulated",
        "--emulator-model",
        "toy",
        "--batch-sizes",
        "1",
        "--actions",
        "0",
    )
    assert sweep.exit_code == 2 and "unknown performance model 'toy'" in sweep.stderr
    assert not (tmp_path / "s.jsonl").exists()

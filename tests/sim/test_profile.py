"""Hardware profiles: built-ins, user files, errors."""

from __future__ import annotations

import json

import pytest

from specband.errors import ConfigError
from specband.sim import build_model, builtin_profiles, load_profile
from specband.sim.profile import HardwareProfile, profile_to_toml


def test_builtin_profiles_and_calibration_marks() -> None:
    assert builtin_profiles() == ["a100-sxm4-80gb", "h100-sxm", "h200", "rtx4060-laptop"]
    rtx = load_profile("rtx4060-laptop")
    assert rtx.calibrated and rtx.power_limit_w == 80.0 and rtx.vram_mb == pytest.approx(8188)
    for name, limit in (("a100-sxm4-80gb", 400.0), ("h100-sxm", 700.0), ("h200", 700.0)):
        prof = load_profile(name)
        assert not prof.calibrated, name
        assert prof.power_limit_w == limit
        # what a datasheet profile does not set is inherited from the calibrated one
        assert prof.first_token_accept == rtx.first_token_accept
        assert prof.busy_power_frac == rtx.busy_power_frac
    assert load_profile("h200").vram_mb > load_profile("h100-sxm").vram_mb


def test_unknown_profile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown profile 'rtx9090'"):
        build_model("rtx9090")


def test_user_toml_profile_inherits_and_overrides(tmp_path) -> None:
    path = tmp_path / "mygpu.toml"
    path.write_text(
        '[hardware]\nhardware = "MyGPU"\npower_limit_w = 150\nvram_mb = 16384\n'
        "mem_bandwidth_gbs = 448\npeak_tflops = 80\nidle_power_w = 20\n[thermal]\nambient_temp_c = 38\n"
    )
    prof = load_profile(path)
    assert prof.name == "mygpu" and prof.hardware == "MyGPU"
    assert prof.power_limit_w == 150.0 and prof.ambient_temp_c == 38.0
    assert not prof.calibrated
    assert prof.bandwidth_efficiency == load_profile("rtx4060-laptop").bandwidth_efficiency
    model = build_model(path)
    assert model.power_limit_w == 150.0
    assert model.predict(1, (3, 4, 8), 50.0).speed_tok_s > build_model().predict(1, (3, 4, 8), 50.0).speed_tok_s


def test_json_profile_and_round_trip(tmp_path) -> None:
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({"hardware": {"power_limit_w": 100.0, "idle_power_w": 10.0}}))
    assert load_profile(path).power_limit_w == 100.0
    toml = tmp_path / "copy.toml"
    rtx = load_profile("rtx4060-laptop")
    toml.write_text(profile_to_toml(rtx))
    again = load_profile(toml)
    assert again.with_values(name=rtx.name) == rtx


@pytest.mark.parametrize(
    "text,match",
    [
        ("[hardware]\npower_limit_w = -5\n", r"hardware.power_limit_w = -5.0 is outside"),
        ("[hardware]\nwatts = 5\n", r"field 'hardware.watts': unknown parameter"),
        ("[gpu]\nx = 1\n", r"unknown section \[gpu\]"),
        ("[hardware]\npower_limit_w = 'high'\n", r"must be a finite number"),
        ("[hardware\n", r"not a valid TOML profile"),
        ("[hardware]\nidle_power_w = 90\n", r"must be below power_limit_w"),
        ("[hardware]\nbase = 'nothing-like-this'\n", r"unknown profile 'nothing-like-this'"),
    ],
)
def test_bad_profile_files_name_file_and_field(tmp_path, text: str, match: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        load_profile(path)
    assert "bad.toml" in str(info.value)


def test_with_values_rejects_unknown_parameters() -> None:
    with pytest.raises(ConfigError, match="unknown parameter 'nope'"):
        HardwareProfile().with_values(nope=1.0)

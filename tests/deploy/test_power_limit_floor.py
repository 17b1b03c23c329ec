"""Issue 30 item 2: power-limit answers keep to the GPU's range, name the config they speak of,
label data over several limits with its range, and answer a batch-size mix over such data with
one limit and one config (real values from the simulated H100 SXM, 200-700 W)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.devices import conftest as devices_conftest

from specband.deploy.explain import LimitRange, band_note, profile_limit_range

fake_gpu = devices_conftest.fake_gpu  # the patched-NVML fixture of the device tests

_PAIR = ("--target-config", "llama-3.1-8b-instruct", "--draft-config", "eagle3-llama-3.1-8b-instruct")


@pytest.mark.parametrize("bs", [1, 8, 32, 64])
def test_first_guess_picks_its_limit_inside_the_gpu_range_and_the_band(run_cli, bs: int) -> None:
    """Issue 35: the H100 SXM first guess picks the limit with the flags, inside the profile's
    200-700 W, at a utilisation inside the band by the model's own serving power (the note said
    'near 163 W' below the floor before issue 30, and only a note after it)."""
    from specband.sim.model import build_model
    from specband.sim.power import serving_power_w

    res = run_cli("recommend", "--gpu", "h100-sxm", *_PAIR, "-b", bs, "--format", "json")
    assert res.exit_code == 0, res.stderr
    row = json.loads(res.stdout)["table"]
    limit, util = row["power_limit_w"], row["utilization"]["value"]
    assert 200 <= limit <= 700 and row["in_band"] and 0.95 <= util <= 0.98, row
    assert row["nvidia_smi"] == f"sudo nvidia-smi -pl {limit:g}" and row["power_basis"] == "serving"
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct")
    serving = serving_power_w(model, bs, tuple(row["action"]))
    assert util * limit == pytest.approx(serving, rel=1e-3)  # the server's power over the limit picked
    assert row["speed_tok_s"]["lo95"] < row["speed_tok_s"]["value"] < row["speed_tok_s"]["hi95"]


def test_a_first_guess_that_cannot_reach_the_band_says_so(run_cli) -> None:
    """The RTX 4060 Laptop at bs 64 draws more than its highest limit (80 W) with every config: the
    pick is at 80 W, above the band, and the note says the band cannot be reached there."""
    res = run_cli("recommend", "--gpu", "rtx4060-laptop", "--target-config", "llama-3.2-1b-instruct", "-b", "64")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[0] == "sudo nvidia-smi -pl 80"
    (note,) = [x for x in res.stderr.splitlines() if x.startswith("note: bs 64: ")]
    assert "the band cannot be reached: the pick draws more than the GPU's highest limit" in note
    assert "(the GPU's limits: 22.9-80 W, the rtx4060-laptop profile's range" in note


def test_band_note_values() -> None:
    """Each limit from the utilisation (mid-band 0.965) and the range, to 1 W."""
    floor = LimitRange(200.0, 700.0, "test range")
    above = band_note({7: 0.30}, 700.0, 7, floor)  # 0.30 * 700 / 0.965 = 217.6 W: inside the range
    assert "a limit near 218 W (from 700 W) would put (3,2,4) in the band" in above
    below = band_note({7: 0.20, 10: 0.25}, 700.0, 7, floor)  # 145 W and 181 W: below 200 W
    assert "(3,4,8) would need about 181 W, below its lowest limit: at 200 W it would draw about 0.875" in below
    assert "the pick (3,2,4) draws 0.200 of the limit: (3,2,4) would need about 145 W" in below
    assert "near 1" not in below and "(the GPU's limits: 200-700 W, test range)" in below
    unknown = band_note({7: 0.5}, 80.0, 7, None)
    assert "if the GPU accepts it" not in unknown and "unknown here, `nvidia-smi -q -d POWER` shows them" in unknown


def test_profile_range_by_name_and_by_rows_hardware() -> None:
    by_name, by_hardware = profile_limit_range("h100-sxm"), profile_limit_range("H100_SXM5_80GB")
    assert by_name is not None and (by_name.min_w, by_name.max_w) == pytest.approx((200.0, 700.0))
    assert by_hardware == by_name
    assert profile_limit_range("no-such-gpu") is None


def test_nvml_range_is_the_floor(fake_gpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With NVML, its constraints bound the suggestion (a patched NVML: 80 W limit, 30-100 W)."""
    import specband.deploy.usersetup as usersetup
    from specband.deploy.recommend import _gpu_floor
    from specband.deploy.usersetup import user_gpu

    driver = tmp_path / "version"
    driver.write_text("NVIDIA\n")
    monkeypatch.setattr(usersetup, "_NVIDIA_DRIVER_PATHS", (str(driver),))
    fake_gpu.min_limit_mw, fake_gpu.max_limit_mw = 30_000, 100_000
    setup = user_gpu()
    assert setup.gpu_source == "NVML" and setup.power_limit_range_w == (30.0, 100.0)
    floor = _gpu_floor(setup)
    assert floor is not None and (floor.min_w, floor.max_w) == (30.0, 100.0) and "NVML" in floor.source


@pytest.fixture(scope="module")
def h100_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated H100 SXM sweep at 200, 450 and 700 W (bs 1, 8, 16; one repeat)."""
    from specband.cli import main

    out = tmp_path_factory.mktemp("h100") / "h100.jsonl"
    with pytest.raises(SystemExit) as done:
        main(["simulate", "--profile", "h100-sxm", *_PAIR, "--power-limits", "200,450,700",
              "--batch-sizes", "1,8,16", "--repeats", "1", "--out", str(out)])  # fmt: skip
    assert not done.value.code
    return out


def test_multi_limit_file_is_labelled_with_its_range(run_cli, h100_sweep: Path) -> None:
    res = run_cli("recommend", "-b", "16", "--data", h100_sweep)
    assert res.exit_code == 0, res.stderr
    assert "h100.jsonl is from H100_SXM5_80GB over 200-700 W" in res.stderr
    assert " at 450 W" not in res.stderr


def test_batch_mix_over_several_limits_answers_one_limit(run_cli, h100_sweep: Path) -> None:
    """`--batch-mix` with `--data` over several limits: one limit, one config, the mix's
    utilisation per batch size (it ignored --data and refused with the embedded policy's error)."""
    res = run_cli("recommend", "--batch-mix", "1:1,8:1,32:1", "--data", h100_sweep)
    assert res.exit_code == 0, res.stderr
    smi, flags = res.stdout.splitlines()
    assert re.fullmatch(r"sudo nvidia-smi -pl (200|450|700)", smi) and flags.startswith("--speculative-algorithm")
    doc = json.loads(run_cli("recommend", "--batch-mix", "1:1,8:1,32:1", "--data", h100_sweep, "-f", "json").stdout)
    rows = doc["per_batch_size"]
    assert [r["batch_size"] for r in rows] == [1, 8, 32] and rows[2]["measured_batch_size"] == 16
    assert sum(r["weight"] for r in rows) == pytest.approx(1.0)
    # the mix's utilisation is the weighted mean of its batch sizes' (each power / the chosen limit)
    assert doc["utilization"] == pytest.approx(sum(r["weight"] * r["utilization"] for r in rows), rel=1e-9)
    assert {p["power_limit_w"] for p in doc["picks"]} == {200.0, 450.0, 700.0}
    chosen = next(p for p in doc["picks"] if p["power_limit_w"] == doc["power_limit_w"])
    assert chosen["action"] == doc["action"]
    assert "for the whole mix" in res.stderr and "bs 32 (measured at 16), weight 0.33: utilisation " in res.stderr


def test_batch_mix_over_a_folder_trained_on_several_limits(run_cli, h100_sweep: Path, tmp_path: Path) -> None:
    """A --models folder trained over several limits answers the mix with one limit from the
    sweep it was trained on (it answered flags without a limit); without that sweep here,
    one error line names --data."""
    import os
    import shutil

    os.chdir(h100_sweep.parent)
    assert run_cli("train", "h100.jsonl", "--algo", "lookup_table", "--out", "h100-models").exit_code == 0
    by_folder = run_cli("recommend", "--batch-mix", "1:1,8:1,32:1", "--models", "h100-models", "-f", "json")
    by_data = run_cli("recommend", "--batch-mix", "1:1,8:1,32:1", "--data", "h100.jsonl", "-f", "json")
    assert by_folder.exit_code == 0, by_folder.stderr
    got, want = json.loads(by_folder.stdout), json.loads(by_data.stdout)
    assert (got["power_limit_w"], got["action"]) == (want["power_limit_w"], want["action"])
    assert got["per_batch_size"] == want["per_batch_size"]
    shutil.copytree("h100-models", tmp_path / "h100-models")
    os.chdir(tmp_path)
    res = run_cli("recommend", "--batch-mix", "1:1,8:1", "--models", "h100-models")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr == (
        "error: h100-models was trained over several power limits (200-700 W); one limit for a batch-size mix is "
        "chosen from its sweep's rows: give --data SWEEP (the file it was trained on, h100.jsonl, is not here)\n"
    )
    with_data = run_cli("recommend", "--batch-mix", "1:1,8:1", "--models", "h100-models", "--data", h100_sweep)
    assert with_data.exit_code == 0 and with_data.stdout.startswith("sudo nvidia-smi -pl "), with_data.stderr

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


def _note(stderr: str) -> str:
    (line,) = [x for x in stderr.splitlines() if x.startswith("note: no config reaches")]
    return line


@pytest.mark.parametrize("bs", [1, 8])
def test_first_guess_never_suggests_a_limit_below_the_gpu_floor(run_cli, bs: int) -> None:
    """The H100 SXM profile's range is 200-700 W: the note said 'near 163 W' (bs 1) and
    'near 199 W' (bs 8); now no limit below 200 W is suggested, the range and its source are said,
    and the pick is named."""
    res = run_cli("recommend", "--gpu", "h100-sxm", *_PAIR, "-b", bs)
    assert res.exit_code == 0, res.stderr
    note = _note(res.stderr)
    suggested = [float(w) for w in re.findall(r"a limit near (\d+) W", note)]
    assert all(w >= 200 for w in suggested), note
    assert "(the GPU's limits: 200-700 W, the h100-sxm profile's range" in note
    pick = re.search(r"expected \(simulated, bs \d+\): (\(\d,\d,\d+\))", res.stderr).group(1)
    assert f"the pick {pick} draws " in note and f"{pick} would need about " in note
    # what the pick draws at the floor: its utilisation at 700 W times 700/200 (tolerance: both
    # printed to 3 places, the input's rounding error grown 3.5 times, 0.5e-3 * 3.5 + 0.5e-3)
    util = float(re.search(r"the pick \S+ draws (0\.\d+) of the limit", note).group(1))
    at_floor = float(re.search(rf"{re.escape(pick)} would need about \d+ W, below its lowest limit: at 200 W it "
                               r"would draw about (0\.\d+)", note).group(1))  # fmt: skip
    assert at_floor == pytest.approx(util * 700 / 200, abs=2.3e-3)


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

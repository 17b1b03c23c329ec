"""The plan: its tiers, its file (strict reader: one error naming file and field), and the
simulated first guess (serving power at the band's middle, clamped to the GPU's range)."""

from __future__ import annotations

import json

import pytest
from tests.govern.plans import small_plan
from tests.servers import one_error_line

from specband.core.errors import DataError
from specband.devices.power_limit import PowerLimitRange
from specband.govern.firstguess import first_guess_plan
from specband.govern.plan import geometric_tiers, read_plan
from specband.sim.model import build_model
from specband.sim.power import serving_power_w


def test_geometric_tiers_cover_every_batch_size_once():
    tiers = geometric_tiers([1, 2, 4, 8, 32])
    assert tiers == [(1, 1, 1), (2, 2, 2), (3, 5, 4), (6, 16, 8), (17, None, 32)]
    with pytest.raises(ValueError, match="increasing"):
        geometric_tiers([4, 2])


def test_a_plan_file_reads_back_whole(tmp_path):
    plan = small_plan(acceptance=3.0)
    path = tmp_path / "p.json"
    path.write_text(plan.dumps())
    back = read_plan(path)
    assert back.tiers == plan.tiers and back.gpu == plan.gpu and back.acceptance == plan.acceptance
    assert [back.tier_index(b) for b in (0, 1, 4, 5, 16, 17, 10_000)] == [None, 0, 0, 1, 1, 2, 2]


def broken(tmp_path, change) -> str:
    data = small_plan().to_json()
    change(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DataError) as caught:
        read_plan(path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d["tiers"][1].update(batch_sizes=[6, 16]), "tiers[1].batch_sizes"),
        (lambda d: d["tiers"][0].update(power_limit_w=900.0), "tiers[0].power_limit_w"),
        (lambda d: d["tiers"][0].update(power_limit_w=float("nan")), "tiers[0].power_limit_w"),
        (lambda d: d["tiers"][0].update(power_limit_source="guessed"), "tiers[0].power_limit_source"),
        (lambda d: d["tiers"][2].update(action=[3, 1, 9]), "tiers[2].action"),
        (
            lambda d: d["tiers"][0]["expected"]["utilization"].update(value="high"),
            "tiers[0].expected.utilization.value",
        ),
        (lambda d: d["gpu"].pop("min_limit_w"), "gpu.min_limit_w"),
        (lambda d: d.update(tiers=[]), "tiers"),
        (lambda d: d.update(band=[0.98, 0.95]), "band"),
    ],
)
def test_a_bad_field_is_named(tmp_path, change, field):
    message = broken(tmp_path, change)
    assert "p.json" in message and f"field '{field}'" in message


def test_not_json_and_too_large_are_one_line(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("{not json")
    with pytest.raises(DataError, match="not JSON"):
        read_plan(path)
    path.write_text(" " * (5 << 20))
    with pytest.raises(DataError, match="too large"):
        read_plan(path)


def test_the_cli_names_the_bad_plan_file(run_cli, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"format": "specband-govern-plan", "version": 2}))
    result = run_cli("govern", "--write-plan", str(tmp_path / "x.json"), "--plan", str(path))
    assert result.exit_code == 2 and "not with --plan" in one_error_line(result.stderr)
    result = run_cli("govern", "--url", "http://127.0.0.1:9", "--plan", str(path), "--dry-run", "--device", "none")
    assert result.exit_code in (2, 3)  # the server is read first: a closed port answers nothing
    assert result.exit_code == 3 or "version" in one_error_line(result.stderr)


def test_the_first_guess_puts_serving_power_at_the_bands_middle():
    plan = first_guess_plan("h100-sxm", "llama-3.1-8b-instruct", None, batch_sizes=[1, 8, 32])
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct")
    for tier in plan.tiers:
        serving = serving_power_w(model, tier.planned_batch_size, tier.action)
        assert tier.power_limit_w == pytest.approx(serving / 0.965, abs=0.1)
        assert tier.expected["utilization"].value == pytest.approx(0.965, abs=0.001)
        speed = tier.expected["tok_s"]
        assert speed.source == "simulated" and speed.low < speed.value < speed.high
    assert plan.gpu.min_limit_w == 200.0 and plan.gpu.max_limit_w == 700.0
    assert plan.acceptance[plan.tiers[0].action].source == "simulated"


def test_the_first_guess_is_clamped_to_the_gpus_range_and_says_so():
    plan = first_guess_plan(
        "h100-sxm", "llama-3.1-8b-instruct", None, batch_sizes=[1, 32], gpu_range=PowerLimitRange(700.0, 400.0, 450.0)
    )  # the serving power puts bs 1 mid-band near 369 W and bs 32 near 472 W: outside 400-450 W
    assert [t.power_limit_w for t in plan.tiers] == [400.0, 450.0]
    assert any("below the band even at the GPU's lowest limit, 400 W" in n for n in plan.notes)
    assert any("above the band even at the GPU's highest limit, 450 W" in n for n in plan.notes)


def test_a_chains_only_engine_gets_chains():
    plan = first_guess_plan("rtx4060-laptop", None, None, batch_sizes=[1, 16], chains_only=True)
    assert all(t.action[1] == 1 for t in plan.tiers)
    # the laptop GPU has no serving fit of its own: it borrows the nearest measured class's, and says so
    assert all("BORROWED from" in (t.expected["serving_power_w"].basis or "") for t in plan.tiers)


def test_write_plan_writes_what_plan_reads(run_cli, tmp_path):
    out = tmp_path / "plan.json"
    args = [
        "govern",
        "--write-plan",
        str(out),
        "--gpu",
        "h200",
        "--target-config",
        "llama-3.1-8b-instruct",
        "--tiers",
        "1,16",
    ]
    result = run_cli(*args)
    assert result.exit_code == 0, result.stderr
    assert read_plan(out).gpu.profile == "h200" and "(planned at 1)" in result.stdout
    again = run_cli(*args)
    assert again.exit_code == 2 and "--force" in one_error_line(again.stderr)

"""The calibration against the published RTX 4060 rows, and its report."""

from __future__ import annotations

import pytest

from specband.contract.actions import Action
from specband.sim import SpeculativeDecodingModel
from specband.sim.calibrate import (
    FIT_PARAMETERS,
    calibration_report,
    format_fit,
    format_report,
    noise_from_trials,
    refit_profile,
)


def test_report_meets_the_issue_targets_on_held_out_trials(rtx_model) -> None:
    report = calibration_report(rtx_model)
    assert len(report.rows) == 29
    held = report.summary(False)
    fitted = report.summary(True)
    assert sum(not r.fitted for r in report.rows) == 12
    assert held["speed_median"] <= 0.03
    assert held["util_median"] <= 0.02
    assert fitted["speed_median"] <= 0.03
    assert fitted["util_median"] <= 0.02
    assert report.targets["bs16 (3,4,8) above the band, (3,2,4) inside"][2]
    # the ranking is kept at bs 1/4/8; at bs 16 the measured gap between (1,4,2) and
    # (3,4,8) is 0.0026 reward and the model puts (3,4,8) second (reported as missed)
    for bs in (1, 4, 8):
        measured, predicted = report.ranking[bs]
        assert measured == predicted
    measured16, predicted16 = report.ranking[16]
    assert measured16[0] == predicted16[0] == Action(3, 2, 4)
    text = format_report(report)
    assert "held-out" in text and "MISSED" in text and "targets:" in text


def test_noise_from_the_repeated_trials() -> None:
    noise = noise_from_trials()
    assert 0.001 < noise["speed_rel_sd"] < 0.02
    assert 0.001 < noise["accept_sd"] < 0.03
    assert 0.001 < noise["power_rel_sd"] < 0.03


def test_fit_recovers_from_a_perturbed_profile(rtx_model) -> None:
    start = rtx_model.profile.with_values(
        bandwidth_efficiency=0.8, host_overhead_spec_s=0.004, mem_power_frac=0.5, first_token_accept=0.5
    )
    model = SpeculativeDecodingModel(start, rtx_model.target, rtx_model.draft)
    before = calibration_report(model).summary(True)
    result = refit_profile(model, max_nfev=40)
    fitted = result.profile
    after = calibration_report(SpeculativeDecodingModel(fitted, model.target, model.draft)).summary(True)
    assert fitted.calibrated
    assert after["speed_median"] < before["speed_median"]
    assert after["speed_median"] <= 0.03
    assert after["accept_median"] <= 0.02
    assert fitted.bandwidth_efficiency == pytest.approx(rtx_model.profile.bandwidth_efficiency, abs=0.05)
    # what the refit did is kept: the perturbed start, lower costs, every parameter before/after
    assert result.start == start and result.rows == 17 and result.evaluations <= 40
    assert result.accept_cost[1] < result.accept_cost[0]
    assert result.cost[1] < 0.5 * result.cost[0]
    changes = {name: (b, a) for name, b, a in result.changes()}
    assert changes["bandwidth_efficiency"] == (0.8, fitted.bandwidth_efficiency)
    assert changes["first_token_accept"] == (0.5, fitted.first_token_accept)
    assert set(FIT_PARAMETERS) <= set(changes)
    text = format_fit(result)
    assert f"cost {result.cost[0]:.6g} -> {result.cost[1]:.6g}" in text
    line = next(x for x in text.splitlines() if x.split()[0] == "bandwidth_efficiency")
    assert line.split()[1:4] == ["0.8", "->", f"{fitted.bandwidth_efficiency:.6g}"]
    assert line.split()[4] == f"{100 * (fitted.bandwidth_efficiency / 0.8 - 1):+.3g}"

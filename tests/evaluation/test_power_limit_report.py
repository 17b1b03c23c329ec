"""The evaluation report's power-limit figure and table, on a simulated sweep over limits."""

from __future__ import annotations

import json

from specband.evaluation.limit_curves import power_limit_curves, power_limit_markdown
from specband.sim import build_model, simulate_power_limits
from specband.sim.power import unmeasured_power_note
from specband.sweeps.dataset import Sweep

H100_8B = {"target_config": "llama-3.1-8b-instruct", "draft_config": "eagle3-llama-3.1-8b-instruct"}


def _rows() -> list[dict]:
    model = build_model("h100-sxm", **H100_8B)
    return simulate_power_limits(model, [180.0, 185.0, 210.0, 215.0, 700.0], batch_sizes=(8, 16), repeats=1)


def test_curves_and_table_say_the_answer_and_the_source():
    sweep = Sweep.from_records(_rows())
    curves = power_limit_curves(sweep, power_label=unmeasured_power_note(sweep.rows))
    assert sorted(curves.chosen) == [8, 16] and curves.max_speed_loss == 0.02
    assert curves.source.startswith("simulated rows; power SIMULATED from a published fit")
    for bs, chosen in curves.chosen.items():
        assert [p.power_limit_w for p in curves.table.picks[bs]] == [180.0, 185.0, 210.0, 215.0, 700.0]
        assert chosen.power_limit_w < 700.0 and chosen.in_band
    text = power_limit_markdown(curves)
    assert "Source: simulated rows; power SIMULATED from a published fit" in text
    assert "not measured on this setup" in text  # the label in full
    assert "## Batch size 16" in text and "| 700 |" in text and "sudo nvidia-smi -pl" in text


def test_evaluate_writes_the_figure_beside_the_report(run_cli, tmp_path):
    data = tmp_path / "h100.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    out = tmp_path / "report"
    result = run_cli("evaluate", data, "--algo", "lookup_table", "--holdout", "none", "--bootstrap", "10", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "the policies are evaluated on the rows at 700 W" in result.stderr.replace("\n", " ")
    report = json.loads((out / "evaluation.json").read_text())
    assert report["data"]["rows"] == 2 * 19  # the 700 W rows only (bs 8 and 16, one pass)
    png = (out / "power_limits.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert "## Batch size 8" in (out / "power_limits.md").read_text()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no temporary file left

"""Report output: JSON document, tables, report.md and figures."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from specband.core.errors import ConfigError
from specband.evaluation.holdout import EvaluationResult, evaluate
from specband.evaluation.ope import Interval
from specband.evaluation.report import (
    FIGURES,
    JSON_SCHEMA,
    format_interval,
    render_tables,
    report_markdown,
    result_to_json,
    write_report,
)
from specband.sweeps.dataset import load_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def held_out() -> EvaluationResult:
    from .conftest import MeanTablePolicy

    factory = lambda name, seed: MeanTablePolicy(seed, bias_action=10 if name == "bcq" else None)  # noqa: E731
    return evaluate(load_sweep(None), algorithms=["lookup_table", "bcq"], policy_factory=factory, n_bootstrap=100)


@pytest.fixture(scope="module")
def in_sample() -> EvaluationResult:
    from .conftest import MeanTablePolicy

    return evaluate(
        load_sweep(None),
        holdout="none",
        algorithms=["lookup_table"],
        policy_factory=lambda n, s: MeanTablePolicy(s),
        n_bootstrap=100,
    )


def test_json_document(held_out: EvaluationResult) -> None:
    doc = json.loads(json.dumps(result_to_json(held_out)))  # plain JSON types only
    assert doc["schema"] == JSON_SCHEMA
    assert list(doc) == [
        "schema",
        "data",
        "holdout",
        "reward_config",
        "band",
        "intervals",
        "algorithms",
        "features",
        "in_sample_fallback",
        "timing",
    ]
    assert doc["band"] == [0.95, 0.98]
    assert doc["holdout"]["kind"] == "trial" and doc["holdout"]["scored_on"] == "held-out"
    assert [n["batch_size"] for n in doc["holdout"]["not_held_out"]] == [1, 4, 8]
    assert doc["data"]["provenance"] == {"derived": 4, "measured": 25}
    contract = doc["features"]["contract"]
    assert set(contract) == {"note", "identical_to", "batch_sizes", "picks", "summary", "ope"}
    (bs16,) = contract["batch_sizes"]
    assert bs16["oracle"]["action"] == [3, 2, 4] and bs16["reference"]["action"] == [3, 4, 8]
    picks = {(p["algorithm"], p["batch_size"]): p for p in contract["picks"]}
    good = picks[("lookup_table", 16)]
    assert good["pick"] == {"index": 7, "action": [3, 2, 4]} and good["scored_on"] == "held-out"
    assert good["regret"]["estimate"] == 0.0 and good["reaches_oracle"] is True and good["in_band"] is True
    assert set(good["reward"]) == {"estimate", "low", "high", "level", "n"}
    assert len(good["splits"]) == 5
    assert picks[("bcq", 16)]["pick"]["action"] == [3, 4, 8] and picks[("bcq", 16)]["in_band"] is False
    assert [e["algorithm"] for e in contract["ope"]["estimates"]] == ["lookup_table", "bcq"]
    assert set(contract["ope"]["estimates"][0]) == {"algorithm", "dm", "ips", "snips", "dr"}
    assert doc["features"]["pre"]["identical_to"] == "contract"
    fb = doc["in_sample_fallback"]
    assert fb["batch_sizes"] == [1, 4, 8] and fb["scored_on"] == "in-sample"
    fb_picks = fb["features"]["contract"]["picks"]
    assert {p["scored_on"] for p in fb_picks} == {"in-sample"}
    # A single observation has no interval: low/high are null, n says why.
    assert fb_picks[0]["reward"]["low"] is None and fb_picks[0]["reward"]["n"] == 1


def test_in_sample_labelled_everywhere(in_sample: EvaluationResult) -> None:
    doc = result_to_json(in_sample)
    assert doc["holdout"]["scored_on"] == "in-sample" and doc["in_sample_fallback"] is None
    assert {p["scored_on"] for p in doc["features"]["contract"]["picks"]} == {"in-sample"}
    md = report_markdown(in_sample)
    assert "every number below is **in-sample**" in md
    assert "## contract = pre features - IN-SAMPLE" in md  # one section: the two kinds agree on this data
    buf = io.StringIO()
    render_tables(in_sample, Console(file=buf, width=200))
    text = buf.getvalue()
    assert text.count("IN-SAMPLE (trained and scored on the same rows)") == 3  # 3 tables, both kinds in each
    assert "every number is in-sample" in text


def test_tables_say_what_was_not_held_out(held_out: EvaluationResult) -> None:
    buf = io.StringIO()
    render_tables(held_out, Console(file=buf, width=220))
    text = buf.getvalue()
    assert "contract = pre features - held-out by trial (5 splits): picks" in text
    assert "not held out: trial=validate, bs 1" in text
    assert "batch sizes 1, 4, 8 could not be held out in any split" in text
    assert "0.000 [0.000, 0.000]" in text  # lookup_table's regret at bs 16
    assert "mixed: 4 measured, 1 derived" in text
    assert "the pre and contract states are identical" in text


def _last_cells(md: str, header: str) -> list[str]:
    """The last cell of each row of the first markdown table whose header row starts with ``header``."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.strip("|").split("|")[-1].strip())
    return rows


def test_every_row_label_says_where_its_rows_come_from(held_out: EvaluationResult) -> None:
    """Issue 37: the legend of report.md's row labels left out emulated (and published) rows, and
    the published study's rows were labelled measured, as if measured on the user's GPU."""
    from specband.evaluation.report import ROW_LABELS
    from specband.sim import build_model, simulate_sweep
    from specband.sweeps.dataset import Sweep

    from .conftest import MeanTablePolicy

    legend = "- row labels: " + "; ".join(f"{label} = {meaning}" for label, meaning in ROW_LABELS)
    assert [label for label, _ in ROW_LABELS] == ["measured", "emulated", "simulated", "published", "derived", "mixed"]
    md = report_markdown(held_out)
    assert legend in md.splitlines()
    picks = _last_cells(md, "| features | algorithm | bs | pick |")
    assert picks and all(cell.startswith("published") for cell in picks), picks
    assert "published (mixed: 4 measured, 1 derived)" in picks
    assert "successful rows: 4 published (derived), 25 published)" in md
    # rows of a sweep against the emulator are labelled emulated, in the tables and the legend
    records = simulate_sweep(build_model("rtx4060-laptop"), batch_sizes=(1, 16), repeats=2)
    for r in records:
        r["provenance"] = "emulated"
    emulated = evaluate(
        Sweep.from_records(records, path="emulated.jsonl"),
        algorithms=["lookup_table"],
        policy_factory=lambda n, s: MeanTablePolicy(s),
        n_bootstrap=20,
    )
    md = report_markdown(emulated)
    assert legend in md.splitlines()
    assert _last_cells(md, "| features | algorithm | bs | pick |") == ["emulated", "emulated"]
    assert _last_cells(md, "| bs | splits | oracle |") == ["38 (emulated)", "38 (emulated)"]


def test_write_report(held_out: EvaluationResult, tmp_path: Path) -> None:
    out = tmp_path / "report"
    written = write_report(held_out, out)
    # without the data's extras only the utilisation figure has something to show; the others say why
    assert [p.name for p in written.paths] == ["report.md", "evaluation.json", "utilization.png"]
    assert written.skipped() == [
        "no tradeoff.png: no rows with a speed to draw",
        "no baselines.png: no comparison with the engines' defaults was made",
    ]
    data = (out / "utilization.png").read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000
    md = (out / "report.md").read_text()
    assert "## Not held out" in md and "In-sample results for batch sizes 1, 4, 8" in md
    assert "![utilization.png](utilization.png)" in md
    assert "- none for `baselines.png`: no comparison with the engines' defaults was made" in md
    assert json.loads((out / "evaluation.json").read_text())["schema"] == JSON_SCHEMA
    # Writing again into the existing folder replaces the files and leaves no temp folder; a
    # figure of the earlier layout (all-zero regret) is removed, the user's own file kept.
    (out / "keep.txt").write_text("mine")
    (out / "regret.png").write_bytes(PNG_MAGIC)
    write_report(held_out, out)
    assert (out / "keep.txt").read_text() == "mine" and not (out / "regret.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="not a folder"):
        write_report(held_out, blocker)


def test_utilisation_figure_shows_the_band(held_out: EvaluationResult, tmp_path: Path) -> None:
    """The band is drawn: many pixels of the band's green tint in the utilisation figure."""
    import matplotlib.image as mpimg

    write_report(held_out, tmp_path / "r")
    img = mpimg.imread(tmp_path / "r" / "utilization.png")[..., :3]
    # axhspan(color="green", alpha=0.18) over white: about (0.82, 0.91, 0.82).
    tint = (
        (np.abs(img[..., 0] - 0.82) < 0.03) & (np.abs(img[..., 1] - 0.91) < 0.03) & (np.abs(img[..., 2] - 0.82) < 0.03)
    )
    assert tint.mean() > 0.02
    assert set(FIGURES) == {"tradeoff.png", "baselines.png", "utilization.png"}  # no reward.png, no regret.png


@pytest.mark.parametrize(
    "interval, text",
    [
        (None, "-"),
        (Interval(0.5, 0.5, 0.5, 0.95, 1, 0), "0.500 (n=1)"),
        (Interval(0.38899, 0.3856, 0.395, 0.95, 5, 1000), "0.389 [0.386, 0.395]"),
    ],
)
def test_format_interval(interval: Interval | None, text: str) -> None:
    assert format_interval(interval) == text


@pytest.mark.parametrize(
    "interval, text",
    [
        (None, "-"),
        (Interval(0.9805, 0.9805, 0.9805, 0.95, 1, 0), "0.9805 (n=1)"),
        (Interval(0.9700, 0.9581, 0.9779, 0.95, 5, 100), "0.9700 [0.9581, 0.9779]"),
        # 4 decimals would print 0.9800 (in band) for a value above the band: more decimals.
        (Interval(0.98004, 0.97991, 0.98049, 0.95, 5, 100), "0.98004 [0.97991, 0.98049]"),
        (Interval(0.9499996, 0.9499996, 0.9499996, 0.95, 1, 0), "0.9499996 (n=1)"),
        # float noise at an edge (0.97996 + 4e-5 = 0.9800000000000001) stops at 7 decimals
        (Interval(0.97996, 0.96996, 0.97996 + 4e-5, 0.95, 5, 100), "0.9799600 [0.9699600, 0.9800000]"),
    ],
)
def test_format_utilization_never_crosses_the_band(interval: Interval | None, text: str) -> None:
    from specband.evaluation.report import format_utilization

    assert format_utilization(interval, (0.95, 0.98)) == text


def test_out_of_band_utilisation_does_not_print_as_in_band(held_out: EvaluationResult) -> None:
    """A pick at utilisation 0.9805 (above the 0.98 band edge) is printed 0.9805 beside
    "above", in the table and in report.md (it used to print as "0.980 ... out")."""
    import dataclasses

    fr = held_out.features["contract"]
    pick = fr.picks["lookup_table"][16]
    util = Interval(0.9805, 0.9796, 0.9812, 0.95, 5, 100)
    bad_pick = dataclasses.replace(pick, utilization=util, in_band=False)
    picks = dict(fr.picks, lookup_table={16: bad_pick})
    result = dataclasses.replace(
        held_out, features=dict(held_out.features, contract=dataclasses.replace(fr, picks=picks)), in_sample=None
    )
    md = report_markdown(result)
    # the two feature kinds now disagree at bs 16: one row each (they share one row where they agree)
    row = next(line for line in md.splitlines() if line.startswith("| contract | lookup_table | 16 |"))
    assert "| 0.9805 [0.9796, 0.9812] | above |" in row
    assert any(line.startswith("| pre | lookup_table | 16 |") for line in md.splitlines())
    assert any(line.startswith("| contract = pre | bcq | 16 |") for line in md.splitlines())
    assert "0.980 " not in row
    buf = io.StringIO()
    render_tables(result, Console(file=buf, width=240))
    line = next(t for t in buf.getvalue().splitlines() if "lookup_table" in t and "│ 16" in t)
    assert "0.9805 [0.9796, 0.9812]" in line and "│ above " in line


def test_below_band_pick_says_below(held_out: EvaluationResult) -> None:
    """A pick at utilisation 0.90 (under the 0.95 edge) says "below" (not a bare "out")."""
    import dataclasses

    fr = held_out.features["contract"]
    pick = fr.picks["lookup_table"][16]
    bad_pick = dataclasses.replace(pick, utilization=Interval(0.90, 0.89, 0.91, 0.95, 5, 100), in_band=False)
    result = dataclasses.replace(
        held_out,
        features=dict(
            held_out.features, contract=dataclasses.replace(fr, picks=dict(fr.picks, lookup_table={16: bad_pick}))
        ),
        in_sample=None,
    )
    md = report_markdown(result)
    row = next(line for line in md.splitlines() if line.startswith("| contract | lookup_table | 16 |"))
    assert "| 0.9000 [0.8900, 0.9100] | below |" in row


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["umask022", "umask027"])
def test_new_report_folder_gets_mkdirs_mode(held_out: EvaluationResult, tmp_path: Path, umask: int) -> None:
    """A new report folder has the mode ``mkdir`` gives (0777 minus the umask), not mkdtemp's 0700."""
    old = os.umask(umask)
    try:
        write_report(held_out, tmp_path / "new")
        (tmp_path / "by_mkdir").mkdir()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == stat.S_IMODE((tmp_path / "by_mkdir").stat().st_mode)


def test_write_report_refuses_foreign_folders(held_out: EvaluationResult, tmp_path: Path) -> None:
    from specband.evaluation.report import is_report_dir

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "reward.png").write_bytes(b"my figure")
    with pytest.raises(ConfigError, match="is not empty and is not a specband report folder"):
        write_report(held_out, foreign)
    assert (foreign / "reward.png").read_bytes() == b"my figure"
    (foreign / "evaluation.json").write_text("not json")
    assert not is_report_dir(foreign)
    with pytest.raises(ConfigError, match="not a specband report folder"):
        write_report(held_out, foreign)
    with pytest.raises(ConfigError, match="--out: empty"):
        write_report(held_out, "")
    empty = tmp_path / "empty"
    empty.mkdir()
    write_report(held_out, empty)  # an empty folder is fine
    assert is_report_dir(empty)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "foreign"]

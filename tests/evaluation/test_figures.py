"""The report's figures are ones a person learns from (issue 30 item 5): none all zeros, none
all-equal bars (checked on the data behind each figure), each carries its provenance in the
figure (the drawn text, checked before saving) and in the PNG; a figure with nothing to show
is not written and says why in one line; evaluate prints one table where contract and
pre-launch features agree."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from specband.evaluation.extras import report_extras
from specband.evaluation.holdout import evaluate
from specband.evaluation.report import render_tables, write_report
from specband.sim import build_model, simulate_sweep
from specband.sweeps.dataset import Sweep, load_sweep

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def drawn_texts(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Every text drawn in each figure saved (figure texts, titles, labels), by file name."""
    from matplotlib.figure import Figure

    seen: dict[str, list[str]] = {}
    original = Figure.savefig

    def savefig(self, fname, *args, **kwargs):  # type: ignore[no-untyped-def]
        texts = [t.get_text() for t in self.texts]
        if self._suptitle is not None:
            texts.append(self._suptitle.get_text())
        for ax in self.axes:
            texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
        seen[Path(str(fname)).name.split(".png")[0].lstrip(".") + ".png"] = texts
        return original(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return seen


def _figure_name(seen: dict[str, list[str]], name: str) -> list[str]:
    """The texts of the figure saved as ``name`` (temporary names carry a prefix)."""
    return next(v for k, v in seen.items() if k.endswith(name))


def _check(values: dict[str, list[float]]) -> None:
    flat = [v for vs in values.values() for v in vs]
    assert flat, "a figure with no data behind it"
    assert any(abs(v) > 1e-9 for v in flat), "all zeros"
    assert max(flat) - min(flat) > 1e-9, "all equal"


def _png_source(path: Path) -> str:
    from PIL import Image

    with Image.open(path) as im:
        return str(im.text["Source"])


def test_laptop_report_figures(tmp_path: Path, drawn_texts: dict[str, list[str]]) -> None:
    sweep = load_sweep(None)
    result = evaluate(sweep, algorithms=["lookup_table"], n_bootstrap=50)
    written = write_report(result, tmp_path / "r", report_extras(result, sweep))
    names = [f.name for f in written.figures if f.written]
    assert names == ["tradeoff.png", "baselines.png", "utilization.png"] and written.skipped() == []
    for f in written.figures:
        _check(f.values)
        path = tmp_path / "r" / f.name
        assert path.read_bytes()[:8] == PNG_MAGIC
        assert _png_source(path).startswith("source: published measurements (4 derived, 25 measured rows)")
        texts = " ".join(_figure_name(drawn_texts, f.name))
        assert "source: published measurements" in texts and "rtx4060_published_live.jsonl" in texts
    # the data behind the trade-off figure: every config's speed at bs 16 (no two alike)
    tradeoff = written.figures[0].values
    assert sorted(tradeoff["bs16/speed_tok_s"]) == pytest.approx([90.685, 102.643, 107.542, 113.044, 118.135], abs=1e-3)
    # baselines: specband's speed against the engines' defaults per batch size, not all alike
    base = written.figures[1].values
    assert base["speed_tok_s/specband (lookup_table)"] == pytest.approx([156.197, 142.638, 134.214, 118.135], abs=0.01)
    assert "hatched: simulated on profile rtx4060-laptop" in " ".join(_figure_name(drawn_texts, "baselines.png"))
    doc = json.loads((tmp_path / "r" / "evaluation.json").read_text())
    assert [r["who"] for r in doc["engine_defaults"]["rows"][:3]] == [
        "specband (lookup_table)",
        "sglang adaptive (default tiers)",
        "vLLM num_speculative_tokens=3",
    ]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## specband's pick against the engines' defaults (published data)" in md


@pytest.fixture(scope="module")
def h100() -> Sweep:
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct", draft_config="eagle3-llama-3.1-8b-instruct")
    return Sweep.from_records(simulate_sweep(model, batch_sizes=(1, 16), repeats=2), path="h100.jsonl")


def test_simulated_h100_report_figures(tmp_path: Path, h100: Sweep, drawn_texts: dict[str, list[str]]) -> None:
    result = evaluate(h100, algorithms=["lookup_table"], n_bootstrap=50)
    written = write_report(result, tmp_path / "r", report_extras(result, h100))
    assert [f.name for f in written.figures if f.written] == ["tradeoff.png", "baselines.png", "utilization.png"]
    for f in written.figures:
        _check(f.values)
        source = _png_source(tmp_path / "r" / f.name)
        assert source.startswith("source: simulated rows (a simulation, not a measurement) (76 simulated rows)")
        assert "source: simulated rows" in " ".join(_figure_name(drawn_texts, f.name))
    assert "no config in the band at this limit" in " ".join(_figure_name(drawn_texts, "tradeoff.png"))


@pytest.mark.parametrize("batch_sizes", [(16,), (1, 16), (1, 4, 8, 16)])
def test_the_tradeoff_colour_bar_is_labelled_and_nothing_is_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_sizes: tuple[int, ...]
) -> None:
    """Issue 37: with one batch size the figure was 5.8 in wide and its colour bar's label, its
    tick labels, the title and the legend fell outside it. Every text drawn must lie inside."""
    from matplotlib.figure import Figure

    drawn: dict[str, tuple[tuple[float, ...], tuple[float, float]]] = {}
    labels: dict[str, list[str]] = {}
    original = Figure.savefig

    def savefig(self, fname, *args, **kwargs):  # type: ignore[no-untyped-def]
        done = original(self, fname, *args, **kwargs)
        name = Path(str(fname)).name
        # what is drawn (every text, tick label and legend entry), in inches from the lower left
        box = self.get_tightbbox(self.canvas.get_renderer())
        drawn[name] = ((box.x0, box.y0, box.x1, box.y1), (self.get_figwidth(), self.get_figheight()))
        labels[name] = [ax.get_ylabel() for ax in self.axes]
        return done

    monkeypatch.setattr(Figure, "savefig", savefig)
    sweep = load_sweep(None)
    sub = sweep.subset(lambda r: r.batch_size in batch_sizes)
    result = evaluate(sub, algorithms=["lookup_table"], n_bootstrap=20)
    write_report(result, tmp_path / "r", report_extras(result, sub))
    name = next(k for k in drawn if k.endswith("tradeoff.png"))
    (x0, y0, x1, y1), (width, height) = drawn[name]
    assert x0 >= -0.01 and y0 >= -0.01 and x1 <= width + 0.01 and y1 <= height + 0.01, drawn[name]
    # the panels' y axes, then the colour bar's: labelled with what its colour means, in its unit
    assert labels[name] == ["speed, tok/s"] * len(batch_sizes) + ["energy, J/token"]


def test_no_power_no_band_figures(tmp_path: Path, h100: Sweep) -> None:
    """Rows without power: the figures that need utilisation are not written, each says why."""
    records = [
        {
            k: v
            for k, v in r.raw.items()
            if k not in ("avg_power_watts", "energy_joules", "joules_per_token", "gpu_power_w")
        }
        for r in h100.rows
    ]
    sweep = Sweep.from_records(records, path="nopower.jsonl")
    result = evaluate(sweep, algorithms=["lookup_table"], n_bootstrap=20)
    written = write_report(result, tmp_path / "r", report_extras(result, sweep))
    skipped = written.skipped()
    assert "no tradeoff.png: no power in the data: utilisation is unknown, so the band cannot be drawn" in skipped
    assert "no utilization.png: no power in the data: the picks' utilisation is unknown" in skipped
    assert all(line.count("\n") == 0 for line in skipped)
    assert not (tmp_path / "r" / "tradeoff.png").exists()


def test_one_table_where_the_feature_kinds_agree(h100: Sweep) -> None:
    """The published rows have no pre-launch telemetry: contract and pre give identical
    numbers, printed once; simulated rows have it: rows where the kinds agree are merged."""
    for sweep in (load_sweep(None), h100):
        result = evaluate(sweep, algorithms=["lookup_table", "linucb"], n_bootstrap=20)
        buf = io.StringIO()
        render_tables(result, Console(file=buf, width=260))
        text = buf.getvalue()
        assert text.count(": picks") == 1 + (result.in_sample is not None)
        assert text.count(": summary over batch sizes") == text.count(": picks")
        assert not [line for line in text.splitlines() if line.startswith(("pre features", "contract features"))]
        pick_rows = [line for line in text.splitlines() if "│ lookup_table" in line or "│ linucb" in line]
        merged = [line for line in pick_rows if "contract = pre" in line]
        assert merged, "no merged row"
        for line in pick_rows:  # a row of one kind only appears when the two kinds disagree there
            assert "contract = pre" in line or "│ contract " in line or "│ pre " in line

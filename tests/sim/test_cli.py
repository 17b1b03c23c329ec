"""`specband simulate` through the real CLI entry point."""

from __future__ import annotations

import pytest

from specband.sim.profile import load_profile
from specband.sweeps.dataset import load_sweep


def test_simulate_writes_a_loadable_sweep(run_cli, tmp_path) -> None:
    out = tmp_path / "sim.jsonl"
    res = run_cli("simulate", "--profile", "rtx4060-laptop", "--seed", "7", "--out", out)
    assert res.exit_code == 0, res.stderr
    assert "SIMULATED" in res.stdout and "228 rows" in res.stdout
    assert len(load_sweep(out).rows) == 228
    first = out.read_bytes()
    res = run_cli("simulate", "--seed", "7", "--out", out, "--force")
    assert res.exit_code == 0 and out.read_bytes() == first


def test_simulate_refuses_an_existing_out_without_force(run_cli, tmp_path) -> None:
    out = tmp_path / "measured.jsonl"
    out.write_text('{"measured": "hours of GPU time"}\n')
    res = run_cli("simulate", "--repeats", "1", "--out", out)
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"error: {out}: output file exists (pass --force to replace it)"]
    assert res.stdout == ""
    assert out.read_text() == '{"measured": "hours of GPU time"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measured.jsonl"]
    res = run_cli("simulate", "--repeats", "1", "--out", out, "--force")
    assert res.exit_code == 0, res.stderr
    assert len(load_sweep(out).rows) == 76


def test_write_profile_refuses_an_existing_file_without_force(run_cli, tmp_path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text("# my profile\n")
    res = run_cli("simulate", "--calibration-report", "--refit", "--write-profile", mine)
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"error: {mine}: output file exists (pass --force to replace it)"]
    assert mine.read_text() == "# my profile\n"


def test_simulate_options(run_cli, tmp_path) -> None:
    out = tmp_path / "h100.jsonl"
    res = run_cli("simulate", "--profile", "h100-sxm", "--batch-sizes", "1,16", "--repeats", "1", "--out", out)
    assert res.exit_code == 0, res.stderr
    assert "power: published fit" in res.stdout and "UNCALIBRATED" not in res.stdout
    sweep = load_sweep(out)
    assert len(sweep.rows) == 38 and {r.batch_size for r in sweep.rows} == {1, 16}
    assert {r.raw["hardware"] for r in sweep.rows} == {"H100_SXM5_80GB"}


def test_simulate_errors(run_cli, tmp_path) -> None:
    res = run_cli("simulate", "--profile", "nope", "--out", tmp_path / "x.jsonl")
    assert res.exit_code == 2 and res.stderr.startswith("error: unknown profile 'nope'")
    res = run_cli("simulate", "--batch-sizes", "1,x", "--out", tmp_path / "x.jsonl")
    assert res.exit_code == 2 and "--batch-sizes" in res.stderr
    res = run_cli("simulate")
    assert res.exit_code == 2 and "--out" in res.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_calibration_report_and_profiles(run_cli) -> None:
    res = run_cli("simulate", "--calibration-report")
    assert res.exit_code == 0, res.stderr
    assert "held-out" in res.stdout and "seed3" in res.stdout and "targets:" in res.stdout
    res = run_cli("simulate", "--list-profiles")
    assert res.exit_code == 0 and "h200" in res.stdout and "calibrated, power: published fit" in res.stdout
    assert "calibrated, power UNMEASURED" in res.stdout  # the A100


def test_draft_rope_mismatch_warns(run_cli, tmp_path) -> None:
    import json

    from specband.sim.hfconfig import BUNDLED_DRAFT_CONFIG, bundled_model_config_path

    cfg = json.loads(bundled_model_config_path(BUNDLED_DRAFT_CONFIG).read_text())
    cfg.update(rope_theta=10000.0, rope_scaling=None)
    draft = tmp_path / "draft.json"
    draft.write_text(json.dumps(cfg))
    res = run_cli("simulate", "--draft-config", draft, "--repeats", "1", "--out", tmp_path / "o.jsonl")
    assert res.exit_code == 0
    assert "warning:" in res.stderr and "rope_theta" in res.stderr


def test_write_profile_writes_a_loadable_profile_or_one_error_line(run_cli, tmp_path) -> None:
    from specband.sim import load_profile

    out = tmp_path / "refit.toml"
    res = run_cli("simulate", "--calibration-report", "--refit", "--write-profile", out)
    assert res.exit_code == 0, res.stderr
    assert f"wrote {out}" in res.stderr
    assert out.read_text().startswith("# refitted from profile rtx4060-laptop by specband simulate --refit\n")
    assert load_profile(out).power_limit_w == load_profile("rtx4060-laptop").power_limit_w
    assert [p.name for p in tmp_path.iterdir()] == ["refit.toml"]  # no temporary file left

    missing = tmp_path / "no" / "such" / "dir" / "x.toml"
    res = run_cli("simulate", "--calibration-report", "--refit", "--write-profile", missing)
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"error: {missing}: folder {missing.parent} does not exist"]
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "no").exists()


def test_simulate_out_folder_or_empty_path_is_one_error_line(run_cli, tmp_path) -> None:
    below_a_file = tmp_path / "afile" / "x.jsonl"
    cases = [
        (tmp_path, f"error: --out {tmp_path}: is a folder; give a file name"),
        ("", "error: --out: empty"),
        (below_a_file, f"error: {below_a_file}: {tmp_path / 'afile'} is not a folder"),
    ]
    (tmp_path / "afile").write_text("keep\n")
    for out, line in cases:
        res = run_cli("simulate", "--repeats", "1", "--out", out, "--force")
        assert res.exit_code == 2, out
        assert res.stderr.splitlines() == [line]
        assert "Traceback" not in res.stderr and res.stdout == ""
    res = run_cli("simulate", "--calibration-report", "--refit", "--write-profile", "")
    assert res.exit_code == 2
    assert res.stderr.splitlines() == ["error: --write-profile: empty"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    assert (tmp_path / "afile").read_text() == "keep\n"


@pytest.mark.parametrize(
    "value,message",
    [
        ("4,4", "--batch-sizes: batch size 4 is given twice in '4,4'"),
        ("1,8,1", "--batch-sizes: batch size 1 is given twice in '1,8,1'"),
        ("0", "--batch-sizes: batch sizes must be in [1, 1048576], got 0"),
        ("4,-2", "--batch-sizes: batch sizes must be in [1, 1048576], got -2"),
        ("1.5", "--batch-sizes: '1.5' is not a whole number, e.g. '1,4,8,16'"),
        ("1,,4", "--batch-sizes: empty entry in '1,,4', e.g. '1,4,8,16'"),
        (" ", "--batch-sizes: empty"),
    ],
)
def test_simulate_rejects_bad_batch_sizes(run_cli, tmp_path, value: str, message: str) -> None:
    out = tmp_path / "x.jsonl"
    res = run_cli("simulate", "--batch-sizes", value, "--repeats", "1", "--out", out)
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"error: {message}"]
    assert not out.exists()


def test_simulate_batch_sizes_commas_and_spaces(run_cli, tmp_path) -> None:
    out = tmp_path / "x.jsonl"
    res = run_cli("simulate", "--batch-sizes", "8, 1 4", "--repeats", "1", "--out", out)
    assert res.exit_code == 0, res.stderr
    assert [r.batch_size for r in load_sweep(out).rows][::19] == [8, 1, 4]


def test_refit_prints_what_it_refitted(run_cli, tmp_path) -> None:
    from specband.sim import load_profile
    from specband.sim.calibrate import FIT_PARAMETERS

    out = tmp_path / "refit.toml"
    res = run_cli("simulate", "--calibration-report", "--refit", "--write-profile", out)
    assert res.exit_code == 0, res.stderr
    head, _, report = res.stdout.partition("\n\ncalibration report:")
    lines = head.splitlines()
    assert (
        lines[0] == "refit of profile rtx4060-laptop to trial validate (17 published rows), "
        "scipy.optimize.least_squares:"
    )
    assert lines[1].startswith("  stage 1, acceptance (7 parameters): cost ")
    assert lines[2].startswith(f"  stage 2, step time/power/wall clock ({len(FIT_PARAMETERS)} parameters): cost ")
    assert " -> " in lines[1] and " -> " in lines[2]
    assert "targets:" in report
    shipped, written = load_profile("rtx4060-laptop"), load_profile(out)
    rows = {line.split()[0]: line.split() for line in lines[4:-1]}
    assert set(FIT_PARAMETERS) <= set(rows)
    for name in FIT_PARAMETERS:
        # "name before -> after note": before is the shipped profile, after the written one
        assert rows[name][1:4] == [f"{getattr(shipped, name):.6g}", "->", f"{getattr(written, name):.6g}"], name
    assert lines[-1].endswith(f"of {len(rows)} parameters changed")


def test_simulate_help_has_metavars_not_python_types(run_cli) -> None:
    res = run_cli("simulate", "--help")
    assert res.exit_code == 0
    text = " ".join(res.stdout.split())
    for option in (
        "--profile PROFILE",
        "--target-config CONFIG",
        "--draft-config CONFIG",
        "--batch-sizes LIST",
        "--repeats N",
        "--seed N",
        "--out FILE",
        "--write-profile FILE",
        "--force",
    ):
        assert option in text, option
    # typer's ranges of --seed, --repeats and --tp (MAX_SEED, MAX_REPEATS, specband.sim.parallel.MAX_TP)
    without_ranges = res.stdout.replace("x<=4294967295", "").replace("1<=x<=1000", "").replace("1<=x<=64", "")
    assert "<" not in without_ranges and "FACTS" not in res.stdout.replace("docs/FACTS.md", "")


def test_report_cites_sections_of_docs_facts(run_cli) -> None:
    import re
    from pathlib import Path

    import specband.sim

    res = run_cli("simulate", "--calibration-report")
    assert res.exit_code == 0, res.stderr
    assert "(computed / published in docs/FACTS.md §6)" in res.stdout
    assert not re.search(r"FACTS(?!\.md)", res.stdout)
    # every "docs/FACTS.md §N" in the simulator's sources names a section the document has
    facts = Path(__file__).resolve().parents[2] / "docs" / "FACTS.md"
    sections = set(re.findall(r"^## (\d+)\.", facts.read_text(), flags=re.M))
    sources = [*Path(specband.sim.__file__).parent.glob("*.py"), Path(specband.sim.__file__).parents[1] / "cli/sim.py"]
    cited = set()
    for path in sources:
        text = path.read_text()
        assert not re.search(r"FACTS(?!\.md)", text), path
        cited |= set(re.findall(r"docs/FACTS\.md §(\d+)", text))
    assert cited and cited <= sections


def test_simulate_empty_model_config_is_one_error_line(run_cli, tmp_path) -> None:
    res = run_cli("simulate", "--target-config", "", "--out", tmp_path / "o.jsonl")
    assert res.exit_code == 2
    assert res.stderr.splitlines() == ["error: --target-config: empty; give a config.json path or a bundled name"]


@pytest.mark.parametrize("profile", ["h100-sxm", "custom"])
@pytest.mark.parametrize("refit", [False, True])
def test_a_profile_is_never_calibrated_against_another_gpus_rows(run_cli, tmp_path, profile, refit) -> None:
    """The trial's N20/N21: the H100 (or a custom GPU) "calibrated" against the RTX 4060
    Laptop rows, and a refit written as a file still called H100, calibrated, with the
    shipped source text."""
    if profile == "custom":
        custom = tmp_path / "custom.toml"
        custom.write_text(
            '[hardware]\nhardware = "X"\npower_limit_w = 450\nvram_mb = 24564\nmem_bandwidth_gbs = 1008\n'
            "peak_tflops = 165\nidle_power_w = 30\n"
        )
        profile = str(custom)
    written = tmp_path / "refit.toml"
    args = ["simulate", "--calibration-report", "--profile", profile]
    args += ["--refit", "--write-profile", str(written)] if refit else []
    res = run_cli(*args)
    assert res.exit_code == 2 and res.stdout == ""
    line = res.stderr.strip().splitlines()[-1]
    assert "the published live rows are RTX4060_Laptop's, so it cannot be" in line
    assert ("refitted to" if refit else "compared with") in line and "--against published-datacenter" in line
    assert not written.exists()


def test_a_refit_of_its_own_gpu_is_named_after_its_file_and_says_what_it_was_fitted_to(run_cli, tmp_path) -> None:
    written = tmp_path / "laptop-refit.toml"
    report = tmp_path / "report.txt"
    res = run_cli("simulate", "--calibration-report", "--refit", "--write-profile", written, "--out", report)
    assert res.exit_code == 0, res.stderr
    assert res.stdout == ""  # --out: the report went to the file
    assert "calibration report: profile rtx4060-laptop vs the published RTX 4060 Laptop live rows" in report.read_text()
    assert f"wrote the calibration report to {report}" in res.stderr
    prof = load_profile(written)
    assert prof.name == "laptop-refit" and prof.hardware == "RTX4060_Laptop" and prof.calibrated
    assert prof.source.startswith("refitted by specband simulate --refit from profile rtx4060-laptop to 17 published")
    assert prof.source != load_profile("rtx4060-laptop").source


def test_calibration_report_out_refuses_an_existing_file(run_cli, tmp_path) -> None:
    report = tmp_path / "report.txt"
    report.write_text("mine\n")
    res = run_cli("simulate", "--calibration-report", "--out", report)
    assert res.exit_code == 2 and "output file exists" in res.stderr
    assert report.read_text() == "mine\n"

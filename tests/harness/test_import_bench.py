"""``specband import-bench``: sglang bench_speculative.py JSONL -> sweep rows (no energy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.servers import one_error_line

from specband.core.errors import ConfigError, DataError
from specband.harness.import_bench import import_bench
from specband.sweeps.dataset import load_sweep

# What sglang's scripts/playground/bench_speculative.py writes (one line per config).
BENCH = [
    {
        "batch_size": 1,
        "steps": 0,
        "topk": 0,
        "num_draft_tokens": 0,
        "acc_length": 1.0,
        "step_time": 0.01028,
        "speed": 97.254,
        "completion_tokens": 512.0,
    },
    {
        "batch_size": 1,
        "steps": 3,
        "topk": 4,
        "num_draft_tokens": 8,
        "acc_length": 2.397,
        "step_time": 0.01535,
        "speed": 156.197,
        "completion_tokens": 512.0,
    },
    {
        "batch_size": 1,
        "steps": 7,
        "topk": 8,
        "num_draft_tokens": 32,
        "acc_length": 3.1,
        "step_time": 0.03,
        "speed": 103.3,
        "completion_tokens": 512.0,
    },
    {
        "batch_size": 4,
        "steps": 0,
        "topk": 0,
        "num_draft_tokens": 0,
        "acc_length": 1.0,
        "step_time": 0.0105,
        "speed": 95.042,
        "completion_tokens": 512.0,
    },
    {
        "batch_size": 4,
        "steps": 3,
        "topk": 1,
        "num_draft_tokens": 2,
        "acc_length": 2.039,
        "step_time": 0.01574,
        "speed": 129.574,
        "completion_tokens": 512.0,
    },
    {
        "batch_size": 4,
        "steps": 3,
        "topk": 1,
        "num_draft_tokens": 4,
        "acc_length": 2.041,
        "step_time": 0.01570,
        "speed": 130.0,
        "completion_tokens": 512.0,
    },
]


def _write(tmp_path, rows):
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_conversion(tmp_path):
    src = _write(tmp_path, BENCH)
    result = import_bench(src, tmp_path / "out.jsonl", hardware="RTX4060_Laptop")
    assert len(result.rows) == 5 and len(result.skipped) == 1
    assert "(7, 8, 32)" in result.skipped[0]
    by = {(r["batch_size"], r["steps"], r["topk"], r["num_draft_tokens"], r["repeat"]): r for r in result.rows}
    ref = by[(1, 3, 4, 8, 0)]
    assert ref["index"] == 10  # bs-major grid position: bs 1 is the first batch size, (3,4,8) action 10
    assert ref["accept_length"] == 2.397 and ref["speed_tok_s"] == 156.197 and ref["step_time_s"] == 0.01535
    assert ref["speed_source"] == "bench_speculative" and ref["energy_method"] == "none"
    assert ref["energy_joules"] is None and ref["avg_power_watts"] is None
    assert ref["avg_output_tokens"] == 512.0 and ref["total_output_tokens"] is None
    assert ref["hardware"] == "RTX4060_Laptop"
    # (3,1,2) and (3,1,4) are the same action after sglang's topk=1 rewrite: two repeats
    assert by[(4, 3, 1, 4, 0)]["index"] == by[(4, 3, 1, 4, 1)]["index"] == 19 + 5
    sweep = load_sweep(result.out_path)
    assert not sweep.energy_measured
    parts = sweep.reward_parts(sweep.rows[1])
    assert parts.energy_measured is False and parts.band_score is None
    assert parts.reward == pytest.approx((156.197 / 97.254 - 1) / 2)


def test_cli_warns_that_rewards_are_throughput_only(run_cli, tmp_path):
    src = _write(tmp_path, BENCH)
    result = run_cli("import-bench", src, "--out", tmp_path / "o.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "no energy" in result.stderr and "throughput" in result.stderr
    assert "skipped (not a contract action): line 3" in result.stderr
    assert "wrote 5 rows" in result.stdout
    again = run_cli("import-bench", src, "--out", tmp_path / "o.jsonl")
    assert again.exit_code == 2 and "--force" in again.stderr
    assert run_cli("import-bench", src, "--out", tmp_path / "o.jsonl", "--force").exit_code == 0


def test_a_batch_size_without_a_baseline_is_an_error(tmp_path):
    src = _write(tmp_path, [BENCH[1]])
    with pytest.raises(DataError, match=r"no \(0,0,0\) baseline.*--steps 0"):
        import_bench(src, tmp_path / "o.jsonl")
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ({"batch_size": 1, "steps": 0, "topk": 0, "num_draft_tokens": 0, "speed": 1.0}, "acc_length"),
        (
            {"batch_size": "1", "steps": 0, "topk": 0, "num_draft_tokens": 0, "acc_length": 1, "speed": 1.0},
            "batch_size",
        ),
        ({"batch_size": 1, "steps": 0, "topk": 0, "num_draft_tokens": 0, "acc_length": 1, "speed": "fast"}, "speed"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, line, field):
    src = _write(tmp_path, [BENCH[0], line])
    with pytest.raises(DataError) as info:
        import_bench(src, tmp_path / "o.jsonl")
    assert f"bench.jsonl:2: field '{field}'" in str(info.value)


def test_not_jsonl(tmp_path):
    src = tmp_path / "bench.jsonl"
    src.write_text('{"batch_size": 1}\nnot json\n')
    with pytest.raises(DataError, match=r"bench.jsonl:2: not valid JSON"):
        import_bench(src, tmp_path / "o.jsonl")
    with pytest.raises(DataError, match="no such file"):
        import_bench(tmp_path / "missing.jsonl", tmp_path / "o.jsonl")


def test_a_converted_row_that_does_not_load_names_the_input_line_and_writes_nothing(tmp_path):
    bad = dict(BENCH[1], acc_length=9.5)  # more than steps + 1 tokens per step: load_sweep refuses it
    src = _write(tmp_path, [BENCH[0], bad])
    out = tmp_path / "o.jsonl"
    out.write_text("old\n")
    with pytest.raises(DataError) as info:
        import_bench(src, out, overwrite=True)
    message = str(info.value)
    assert message.startswith(f"{src}:2: field 'acc_length': the converted row does not load as a sweep: ")
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.jsonl", "o.jsonl"]


def test_an_unwritable_output_is_one_error_line(run_cli, tmp_path):
    src = _write(tmp_path, BENCH)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"file/o\.jsonl: cannot write \(File exists\)"):
        import_bench(src, tmp_path / "file" / "o.jsonl")
    with pytest.raises(ConfigError, match=r"adir: cannot write \(Is a directory\)"):
        (tmp_path / "adir").mkdir()
        import_bench(src, tmp_path / "adir", overwrite=True)
    out = tmp_path / "adir"
    (out / "inner").mkdir(parents=True)
    for args, message in [
        (["--out", out, "--force"], f"error: --out {out}: is a folder; name a file"),
        (["--out", out], f"error: --out {out}: is a folder; name a file"),
        (["--out", ""], "error: --out: empty"),
        (["--out", "/proc/specband.files.jsonl", "--force"], "error: /proc/specband.files.jsonl: cannot write ("),
        (["--out", tmp_path / "file" / "o.jsonl"], f"error: {tmp_path}/file/o.jsonl: cannot write (File exists)"),
    ]:
        result = run_cli("import-bench", src, *args)
        assert result.exit_code == 2
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and errors[0].startswith(message), result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
        # nothing written: no output, no temporary file left next to it
        assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "bench.jsonl", "file"]
        assert [p.name for p in out.iterdir()] == ["inner"]


def test_out_that_is_the_input_is_refused_even_with_force(run_cli, tmp_path, monkeypatch):
    import os

    src = _write(tmp_path, BENCH)
    raw = src.read_text()
    (tmp_path / "link.jsonl").symlink_to(src)
    os.link(src, tmp_path / "hard.jsonl")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    for out in (src, "bench.jsonl", "./sub/../bench.jsonl", tmp_path / "link.jsonl", "hard.jsonl"):
        for force in ([], ["--force"]):
            result = run_cli("import-bench", src, "--out", out, *force)
            assert result.exit_code == 2
            assert one_error_line(result.stderr) == (
                f"error: --out {Path(out)}: is the input file {src}; "
                "converting would replace the bench output it reads (choose another --out)"
            )
            assert result.stdout == ""
            assert src.read_text() == raw  # the raw bench output is kept
            assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.jsonl", "hard.jsonl", "link.jsonl", "sub"]
    with pytest.raises(ConfigError, match="is the input file"):
        import_bench(src, src, overwrite=True)

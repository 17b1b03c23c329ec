"""``sweep --shard K/N`` partition and ``specband merge``: shards of a simulated sweep merge
back into the runs of the unsharded sweep; mismatched or overlapping shards are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specband.contract.actions import ACTIONS
from specband.core.errors import ConfigError, DataError
from specband.harness.merge import merge_shards
from specband.harness.pipeline import SweepPlan, grid
from specband.harness.shards import ShardSpec, parse_shard, shard_runs, shard_units, unit_cost
from specband.sim.simulated import simulate_sweep
from specband.sweeps.dataset import load_sweep

BATCH_SIZES = (1, 4, 8)
ACTS = ACTIONS[:6]
SETTINGS = {"engine": "sglang", "engine_version": "0.5.23", "dtype": "float16", "attention_backend": "flashinfer",
            "max_new_tokens": 512, "num_prompts": 16, "workload": "builtin", "workload_sha256": "ab" * 32}  # fmt: skip


@pytest.fixture(scope="module")
def sweep_rows() -> list[dict[str, Any]]:
    """A simulated 2-repeat sweep in ``specband sweep``'s identity: ``index`` is the grid's."""
    rows = simulate_sweep(profile="rtx4060-laptop", batch_sizes=BATCH_SIZES, actions=ACTS, repeats=2, seed=3)
    n = len(BATCH_SIZES) * len(ACTS)
    return [{**r, "index": r["index"] % n, **SETTINGS, "mem_fraction_static": 0.65} for r in rows]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _shard_files(tmp_path: Path, rows: list[dict[str, Any]], count: int, one_launch: bool) -> list[Path]:
    plan = SweepPlan(tuple(grid(BATCH_SIZES, ACTS)), 2, ACTS, one_launch)
    files = []
    for k in range(1, count + 1):
        mine = shard_runs(plan, ShardSpec(k, count))
        files.append(_write(tmp_path / f"s{k}.jsonl", [r for r in rows if (r["index"], r["repeat"]) in mine]))
    return files


@pytest.mark.parametrize("text, expected", [("1/1", (1, 1)), ("2/4", (2, 4)), (" 4 / 4 ", (4, 4))])
def test_parse_shard(text, expected):
    spec = parse_shard(text)
    assert (spec.number, spec.count) == expected and str(spec) == f"{expected[0]}/{expected[1]}"


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "a/b", "1", "1/2/3", "-1/2", ""])
def test_parse_shard_refuses_with_one_line_naming_the_option(text):
    with pytest.raises(ConfigError) as info:
        parse_shard(text)
    assert str(info.value).startswith("--shard: expected K/N") and "\n" not in str(info.value)


@settings(max_examples=60, deadline=None)
@given(n_bs=st.integers(1, 4), n_act=st.integers(1, 8), repeats=st.integers(1, 3), count=st.integers(1, 7),
       one_launch=st.booleans())  # fmt: skip
def test_every_run_is_in_exactly_one_shard_and_shards_are_balanced(n_bs, n_act, repeats, count, one_launch):
    points = grid((1, 4, 8, 16)[:n_bs], ACTIONS[:n_act])
    units = SweepPlan(tuple(points), repeats, ACTIONS[:n_act], one_launch).units()
    shares = [shard_units(units, ShardSpec(k, count)) for k in range(1, count + 1)]
    positions = sorted(units.index(u) for share in shares for u in share)
    assert positions == list(range(len(units)))  # a partition of whole launch units
    runs = [run.key for share in shares for unit in share for run in unit.runs]
    assert sorted(runs) == sorted((p.index, r) for r in range(repeats) for p in points)
    loads = [sum(unit_cost(u) for u in share) for share in shares]
    assert max(loads) - min(loads) <= max(unit_cost(u) for u in units)  # greedy: within one unit
    for share in shares:  # launch order kept
        assert [units.index(u) for u in share] == sorted(units.index(u) for u in share)


def test_one_launch_per_config_keeps_an_action_s_batch_sizes_in_one_shard():
    units = SweepPlan(tuple(grid(BATCH_SIZES, ACTS)), 2, ACTS, True).units()
    assert len(units) == 2 * len(ACTS) and all(len(u.runs) == len(BATCH_SIZES) for u in units)
    share = shard_units(units, ShardSpec(2, 3))
    assert len(share) == 4 and {r.action for u in share for r in u.runs} == {u.action for u in share}
    assert shard_units(units, ShardSpec(2, 3)) == share  # deterministic


@pytest.mark.parametrize("one_launch", [False, True])
def test_merged_shards_hold_the_unsharded_sweep_s_runs(tmp_path, sweep_rows, one_launch):
    files = _shard_files(tmp_path, sweep_rows, 3, one_launch)
    summary = merge_shards(tmp_path / "all.jsonl", files[::-1])
    merged = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    key = lambda r: (r["repeat"], r["index"])  # noqa: E731
    assert merged == sorted(sweep_rows, key=key)
    assert summary.rows == len(sweep_rows) and sum(summary.rows_per_file) == len(sweep_rows)
    assert summary.missing == () and all(n > 0 for n in summary.rows_per_file)
    assert len(load_sweep(tmp_path / "all.jsonl").training_data()) > 0  # train accepts it


def test_merge_notes_runs_no_shard_holds(tmp_path, sweep_rows):
    files = _shard_files(tmp_path, sweep_rows, 3, False)
    summary = merge_shards(tmp_path / "part.jsonl", files[:2])
    held = {(r["index"], r["repeat"]) for f in files[:2] for r in map(json.loads, f.read_text().splitlines())}
    top = max(i for i, _ in held)  # the grid is inferred up to the largest index held
    assert set(summary.missing) == {(r["index"], r["repeat"]) for r in sweep_rows if r["index"] <= top} - held
    assert summary.missing


@pytest.mark.parametrize("column, value", [("dtype", "bfloat16"), ("target_model", "other/model"),
                                           ("workload_sha256", "cd" * 32), ("mem_fraction_static", 0.7)])  # fmt: skip
def test_merge_refuses_a_shard_with_other_settings_naming_file_line_and_column(tmp_path, sweep_rows, column, value):
    files = _shard_files(tmp_path, sweep_rows, 2, False)
    rows = [json.loads(line) for line in files[1].read_text().splitlines()]
    rows[2][column] = value
    _write(files[1], rows)
    with pytest.raises(ConfigError) as info:
        merge_shards(tmp_path / "all.jsonl", files)
    message = str(info.value)
    assert message.startswith(f"{files[1]}:3: cannot merge: its rows have {column}={value!r}"), message
    assert "\n" not in message and not (tmp_path / "all.jsonl").exists()


def test_merge_refuses_a_shard_of_another_grid(tmp_path, sweep_rows):
    files = _shard_files(tmp_path, sweep_rows, 2, False)
    first = [json.loads(line) for line in files[0].read_text().splitlines()]
    rows = [json.loads(line) for line in files[1].read_text().splitlines()]
    other = next(r for r in first if r["batch_size"] != rows[0]["batch_size"])
    rows[0]["index"] = other["index"]  # same index, another (batch size, action)
    _write(files[1], rows)
    with pytest.raises(ConfigError, match=rf"^{files[1]}:1: cannot merge: its row index={other['index']} is bs="):
        merge_shards(tmp_path / "all.jsonl", files)


def test_merge_refuses_a_run_in_two_shards(tmp_path, sweep_rows):
    files = _shard_files(tmp_path, sweep_rows, 2, False)
    extra = json.loads(files[0].read_text().splitlines()[4])
    _write(files[1], [json.loads(line) for line in files[1].read_text().splitlines()] + [extra])
    with pytest.raises(DataError) as info:
        merge_shards(tmp_path / "all.jsonl", files)
    n = len(files[1].read_text().splitlines())
    assert str(info.value).startswith(f"{files[1]}:{n}: field 'index': (index, repeat) = ")
    assert f"is also on {files[0]}:5" in str(info.value)


def test_merge_refuses_a_partial_line_an_existing_out_and_reads_shards_only(tmp_path, sweep_rows):
    files = _shard_files(tmp_path, sweep_rows, 2, False)
    before = files[0].read_bytes()
    files[0].write_bytes(before + b'{"index": 9')
    with pytest.raises(DataError, match=r":\d+: ends in a partial line"):
        merge_shards(tmp_path / "all.jsonl", files)
    assert files[0].read_bytes() == before + b'{"index": 9'  # not rewritten
    files[0].write_bytes(before)
    out = _write(tmp_path / "all.jsonl", [{"index": 0}])
    with pytest.raises(ConfigError, match="output file exists \\(pass --force"):
        merge_shards(out, files)
    assert merge_shards(out, files, force=True).rows == len(sweep_rows)


def test_merge_cli(run_cli, tmp_path, sweep_rows):
    files = _shard_files(tmp_path, sweep_rows, 2, True)
    res = run_cli("merge", tmp_path / "all.jsonl", *files)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.strip().startswith(f"{tmp_path / 'all.jsonl'}: {len(sweep_rows)} rows from 2 files")
    res = run_cli("merge", tmp_path / "all.jsonl", *files)
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "--force" in res.stderr
    res = run_cli("merge", tmp_path / "x.jsonl", files[0], tmp_path / "nope.jsonl")
    assert res.exit_code == 2 and res.stderr == f"error: {tmp_path / 'nope.jsonl'}: no such file\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["merge", "", "s.jsonl"], "error: OUT: empty"),
        (["merge", "o.jsonl", " "], "error: SHARD: empty"),
        (["doctor", "--target", "", "--draft", "d"], "error: --target: empty"),
    ],
)
def test_an_empty_file_argument_is_named_not_read_as_the_working_folder(run_cli, args, message):
    result = run_cli(*args)
    assert result.exit_code == 2 and result.stderr.strip() == message


@pytest.mark.parametrize(
    "column, value",
    [("hardware", "H100_SXM"), ("provenance", "measured"), ("profile", "h100-sxm")],
)
def test_merge_refuses_another_world_naming_the_difference(tmp_path, sweep_rows, column, value):
    """An 80 W RTX 4060 shard with a 700 W H100 row, or simulated with measured (issue 16 item 5)."""
    files = _shard_files(tmp_path, sweep_rows, 2, False)
    rows = [json.loads(line) for line in files[1].read_text().splitlines()]
    assert rows[0].get(column) is not None or column == "profile"
    rows[1][column] = value
    _write(files[1], rows)
    with pytest.raises(ConfigError) as info:
        merge_shards(tmp_path / "all.jsonl", files)
    message = str(info.value)
    assert message.startswith(f"{files[1]}:2: cannot merge: "), message
    assert f"{column}={value!r}" in message and "\n" not in message
    assert not (tmp_path / "all.jsonl").exists()


def test_merge_of_empty_shards_writes_nothing(tmp_path):
    empty = [_write(tmp_path / "a.jsonl", []), _write(tmp_path / "b.jsonl", [])]
    with pytest.raises(ConfigError, match="hold no rows"):
        merge_shards(tmp_path / "all.jsonl", empty)
    assert not (tmp_path / "all.jsonl").exists()


def _limit_rows(rows: list[dict[str, Any]], limits: tuple[float, ...]) -> list[dict[str, Any]]:
    """``rows`` (one limit) as a ``--power-limits`` sweep's: limit ``k``'s block at ``k * n + index``."""
    n = len(BATCH_SIZES) * len(ACTS)
    return [{**r, "index": k * n + r["index"], "power_limit_watts": w} for k, w in enumerate(limits) for r in rows]


def test_merge_refuses_shards_at_another_power_limit(tmp_path, sweep_rows):
    """Hostile trial N30: shard 2's rows rewritten to 700 W (shard 1's at 80 W) were merged."""
    files = _shard_files(tmp_path, sweep_rows, 2, False)
    rows = [json.loads(line) for line in files[1].read_text().splitlines()]
    _write(files[1], [{**r, "power_limit_watts": 700.0} for r in rows])
    with pytest.raises(ConfigError) as info:
        merge_shards(tmp_path / "all.jsonl", files)
    message = str(info.value)
    assert message.startswith(f"{files[1]}:1: cannot merge: row index=") and "power_limit_watts=700" in message
    assert "\n" not in message and not (tmp_path / "all.jsonl").exists()


def test_merge_refuses_one_row_at_another_power_limit_inside_a_power_limit_sweep(tmp_path, sweep_rows):
    limits = (40.0, 80.0)
    rows = _limit_rows(sweep_rows, limits)
    plan = SweepPlan(tuple(grid(BATCH_SIZES, ACTS, power_limits_w=limits)), 2, ACTS, False)
    files = []
    for k in (1, 2):
        mine = shard_runs(plan, ShardSpec(k, 2))
        files.append(_write(tmp_path / f"p{k}.jsonl", [r for r in rows if (r["index"], r["repeat"]) in mine]))
    assert len(merge_shards(tmp_path / "ok.jsonl", files).missing) == 0  # the real grid merges
    merged = [json.loads(line) for line in (tmp_path / "ok.jsonl").read_text().splitlines()]
    assert sorted({r["power_limit_watts"] for r in merged}) == [40.0, 80.0] and len(merged) == len(rows)
    shard2 = [json.loads(line) for line in files[1].read_text().splitlines()]
    bad = next(i for i, r in enumerate(shard2) if r["power_limit_watts"] == 40.0)
    shard2[bad]["power_limit_watts"] = 60.0  # measured while another sweep held the GPU at 60 W
    _write(files[1], shard2)
    with pytest.raises(ConfigError, match=r"power_limit_watts=60, .* has 40: rows of another power limit"):
        merge_shards(tmp_path / "bad.jsonl", files)
    assert not (tmp_path / "bad.jsonl").exists()

"""Bad inputs of issue 12 (item 8): each is one error line naming file, line and field or
the option, or a correct result; and the bounds of :mod:`specband.core.limits`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from tests.sweeps.test_dataset import small_sweep

from specband.core.errors import DataError, one_line
from specband.core.limits import (
    MAX_BATCH_SIZE,
    MAX_SEED,
    is_finite_number,
    is_int,
    is_number,
)
from specband.sweeps.dataset import load_sweep


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


# ------------------------------------------------------------ state values out of range
@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("gpu_temp_c_before", 1e300, "must be a number in [-40, 150], got 1e+300 (a GPU temperature in C"),
        ("gpu_mem_used_mb_before", 1e300, "must be a number in [0, 16777216], got 1e+300 (GPU memory in use in MB"),
        ("gpu_temp_c", -300.0, "must be a number in [-40, 150], got -300.0"),
        ("gpu_util_pct_before", 250.0, "must be a number in [0, 100], got 250.0 (GPU utilisation"),
    ],
)
def test_a_state_value_outside_its_physical_range_is_refused_on_loading(
    write_jsonl: Any, field: Any, value: Any, expected: Any
) -> None:
    rows = small_sweep()
    rows[2][field] = value
    path = write_jsonl(rows)
    with pytest.raises(DataError) as exc:
        load_sweep(path)
    assert str(exc.value).startswith(f"{path}:3: field '{field}': ")
    assert expected in str(exc.value)


def test_train_on_a_1e300_temperature_is_one_line_not_a_nan_network(
    run_cli: Any, write_jsonl: Any, tmp_path: Path
) -> None:
    rows = small_sweep()
    rows[1]["gpu_temp_c_before"] = 1e300
    path = write_jsonl(rows)
    res = run_cli("train", path, "--out", tmp_path / "m", "--algo", "gbt", "--algo", "doubly_robust")
    assert res.exit_code == 2
    assert _one_error_line(res.stderr).startswith(f"error: {path}:2: field 'gpu_temp_c_before': must be a number in")
    assert not (tmp_path / "m").exists()


# ------------------------------------------------------------ --seed
def test_train_seed_above_what_scikit_learn_takes_is_a_usage_error(run_cli: Any, tmp_path: Path) -> None:
    res = run_cli("train", "--seed", str(MAX_SEED + 1), "--out", tmp_path / "m", "--algo", "gbt")
    assert res.exit_code == 2
    line = _one_error_line(res.stderr)
    assert "Invalid value for '--seed'" in line and str(MAX_SEED) in line
    assert not (tmp_path / "m").exists()


def test_train_at_the_largest_seed_trains_every_seeded_algorithm(run_cli: Any, tmp_path: Path) -> None:
    res = run_cli(
        "train",
        "--seed",
        str(MAX_SEED),
        "--out",
        tmp_path / "m",
        "--algo",
        "gbt",
        "--algo",
        "thompson_sampling",
        "--algo",
        "mlp_bandit",
    )
    assert res.exit_code == 0, res.stderr
    assert json.loads((tmp_path / "m" / "specband.json").read_text())["seed"] == MAX_SEED


@pytest.mark.parametrize("command", ["evaluate", "simulate"])
def test_other_seeds_have_the_same_bound(run_cli: Any, command: str) -> None:
    res = run_cli(command, "--seed", str(MAX_SEED + 1))
    assert res.exit_code == 2 and "Invalid value for '--seed'" in _one_error_line(res.stderr)


# ------------------------------------------------------------ the assumed 80 W limit
def _rows_without_limit(**extra: Any) -> list[dict]:
    rows = small_sweep()
    for row in rows:
        row.pop("power_limit_watts", None)
        row.update(extra)
    return rows


def test_rows_from_another_gpu_without_a_power_limit_need_power_limit(
    run_cli: Any, write_jsonl: Any, tmp_path: Path
) -> None:
    path = write_jsonl(_rows_without_limit(hardware="NVIDIA H100 80GB HBM3"))
    res = run_cli("train", path, "--out", tmp_path / "m", "--algo", "lookup_table")
    assert res.exit_code == 2
    assert _one_error_line(res.stderr) == (
        f"error: {path}:1: field 'hardware': is 'NVIDIA H100 80GB HBM3', not the RTX 4060 Laptop whose 80 W limit is "
        "assumed, and the row has no power_limit_watts: give the GPU's power limit with --power-limit W"
    )
    res = run_cli("train", path, "--out", tmp_path / "m", "--algo", "lookup_table", "--power-limit", "700")
    assert res.exit_code == 0, res.stderr
    assert "assumed" not in res.stderr and "no energy" not in res.stderr
    assert json.loads((tmp_path / "m" / "specband.json").read_text())["power_limit_w"] == 700.0


def test_rows_drawing_more_than_80_w_without_a_limit_need_power_limit(write_jsonl: Any) -> None:
    rows = _rows_without_limit(hardware=None)
    rows[1]["avg_power_watts"] = 350.0
    with pytest.raises(DataError, match=r":2: field 'avg_power_watts': is 350 W, above the assumed 80 W limit"):
        load_sweep(write_jsonl(rows))


def test_rows_of_the_study_card_without_a_limit_say_the_limit_used(
    run_cli: Any, write_jsonl: Any, tmp_path: Path
) -> None:
    path = write_jsonl(_rows_without_limit())  # hardware RTX4060_Laptop, 70-77 W
    sweep = load_sweep(path)
    assert sweep.energy_measured and sweep.power_limit_assumed
    assert sweep.reward_parts(sweep.rows[1]).energy_utilization == pytest.approx(77.0 / 80.0)
    res = run_cli("train", path, "--out", tmp_path / "m", "--algo", "lookup_table")
    assert res.exit_code == 0, res.stderr
    assert "no energy was measured" not in res.stderr
    assert (
        f"note: {path}: rows give avg_power_watts but no power_limit_watts; energy utilisation uses the "
        "assumed 80 W limit of the study's RTX 4060 Laptop (--power-limit W gives another)" in res.stderr
    )


def test_rows_without_energy_still_say_throughput_alone(write_jsonl: Any) -> None:
    sweep = load_sweep(write_jsonl(_rows_without_limit(avg_power_watts=None)))
    assert not sweep.energy_measured and not sweep.power_limit_assumed
    assert sweep.energy_note() is not None and "throughput alone" in str(sweep.energy_note())


# ------------------------------------------------------------ file names and files
def test_a_newline_in_a_data_path_stays_on_the_error_line(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl\nerror: everything is fine"
    path.write_text("not json\n")
    res = run_cli("train", path, "--out", tmp_path / "m")
    assert res.exit_code == 2
    line = _one_error_line(res.stderr)
    escaped = f"{tmp_path}/x.jsonl\\nerror: everything is fine"
    assert line == f"error: {escaped}:1: not valid JSON (Expecting value at column 1)"


def test_one_line_escapes_control_characters_only() -> None:
    assert one_line("a\nb\r\tc\x1b[31m d\u00e9") == "a\\nb\\r\\tc\\x1b[31m d\u00e9"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_dev_zero_as_data_is_one_line(run_cli: Any, tmp_path: Path) -> None:
    res = run_cli("train", "/dev/zero", "--out", tmp_path / "m")
    assert res.exit_code == 2
    assert _one_error_line(res.stderr) == (
        "error: /dev/zero: not a regular file (a device, FIFO or socket); give a JSONL file"
    )


def test_a_fifo_as_data_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        load_sweep(fifo)


def test_a_file_over_the_size_bound_is_refused_before_reading(tmp_path: Path) -> None:
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as fh:
        fh.truncate((1 << 30) + 1)  # sparse: no disk used
    with pytest.raises(
        DataError, match=r"huge.jsonl: too large \(1073741825 bytes; a JSONL file may have at most 1024 MiB\)"
    ):
        load_sweep(huge)


# ------------------------------------------------------------ one batch-size bound
def test_a_row_above_the_batch_size_bound_is_refused(write_jsonl: Any) -> None:
    rows = small_sweep()
    rows[0]["batch_size"] = MAX_BATCH_SIZE + 1
    with pytest.raises(DataError, match=f"field 'batch_size': must be > 0 and <= {MAX_BATCH_SIZE}"):
        load_sweep(write_jsonl(rows))


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "--batch-sizes", "1,1000000000"],
        ["sweep", "--target", "t", "--batch-sizes", "4 " + "9" * 40],
        ["launch", "--target", "t", "-b", str(10**30), "--dry-run"],
        ["recommend", "-b", str(MAX_BATCH_SIZE + 1)],
    ],
)
def test_batch_sizes_above_the_bound_are_usage_errors_everywhere(run_cli: Any, tmp_path: Path, args: list[str]) -> None:
    os.chdir(tmp_path)
    res = run_cli(*args)
    assert res.exit_code == 2
    line = _one_error_line(res.stderr)
    # typer's bound on one batch size; recommend's -b takes a list (issue 35), checked by the list parser
    assert "Invalid value for '--batch-size" in line or line.startswith("error: --batch-size: ")
    assert str(MAX_BATCH_SIZE) in line
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_simulate_at_the_bound_writes_a_file_train_accepts(run_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "sim.jsonl"
    res = run_cli("simulate", "--batch-sizes", f"1,{MAX_BATCH_SIZE}", "--repeats", "1", "--out", out)
    assert res.exit_code == 0, res.stderr
    assert max(r.batch_size for r in load_sweep(out).rows) == MAX_BATCH_SIZE


def test_the_simulator_api_has_the_same_bound() -> None:
    from specband.core.errors import ConfigError
    from specband.sim.simulated import simulate_sweep

    with pytest.raises(ConfigError, match=f"batch sizes must be integers in \\[1, {MAX_BATCH_SIZE}\\]"):
        simulate_sweep(batch_sizes=[MAX_BATCH_SIZE + 1], repeats=1)


# ------------------------------------------------------------ the one type check
@pytest.mark.parametrize(
    ("value", "integer", "number", "finite"),
    [
        (3, True, True, True),
        (True, False, False, False),
        (2.5, False, True, True),
        (float("nan"), False, True, False),
        (float("inf"), False, True, False),
        ("3", False, False, False),
        (None, False, False, False),
    ],
)
def test_is_int_is_number_is_finite_number(value: Any, integer: bool, number: bool, finite: bool) -> None:
    assert (is_int(value), is_number(value), is_finite_number(value)) == (integer, number, finite)


def test_no_hand_written_bool_int_checks_are_left() -> None:
    import re

    src = Path(__file__).resolve().parents[2] / "src" / "specband"
    pattern = re.compile(r"isinstance\((\w[\w.\[\]\"']*), bool\) or not isinstance\(\1, [(]?int")
    found = [
        f"{path}:{number}"
        for path in src.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


def test_every_policy_config_refuses_a_seed_above_the_bound() -> None:
    from specband.core.errors import ConfigError
    from specband.policies import ALGORITHMS, create_policy

    for name in ALGORITHMS:
        with pytest.raises(ConfigError, match=f"seed must be an integer in \\[0, {MAX_SEED}\\], got {MAX_SEED + 1}"):
            create_policy(name, seed=MAX_SEED + 1)

"""`specband train` and `specband recommend` through the real entry point."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specband.artifacts.folder import ARTIFACT_FILES, MANIFEST_FILE
from specband.policies import ALGORITHMS

FLAGS_324 = (
    "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 2 "
    "--speculative-num-draft-tokens 4"
)
FLAGS_348 = (
    "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 4 "
    "--speculative-num-draft-tokens 8"
)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """All eight trained by `specband train` on the bundled data."""
    from specband.cli import main

    out = tmp_path_factory.mktemp("cli") / "models"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--out", str(out)])
    assert exc.value.code in (0, None)
    return out


def _table_rows(stdout: str) -> dict[tuple[str, int], list[str]]:
    """algorithm, bs -> cells of the picks table."""
    rows: dict[tuple[str, int], list[str]] = {}
    algo = None
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) < 7 or not cells[1].isdigit():
            continue
        algo = cells[0] or algo
        rows[(algo, int(cells[1]))] = cells
    return rows


def test_train_on_the_bundled_data(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "m"
    res = run_cli("train", "--out", out)
    assert res.exit_code == 0, res.stderr
    assert (
        "trained 8 algorithm(s) on bundled published measurements (29 training rows, features=pre, seed=0)"
        in res.stdout
    )
    rows = _table_rows(res.stdout)
    assert len(rows) == 32
    picks = {bs: rows[("lookup_table", bs)][2] for bs in (1, 4, 8, 16)}
    assert picks == {1: "(3,4,8)", 4: "(3,4,8)", 8: "(3,4,8)", 16: "(3,2,4)"}
    # pick, its mean observed reward, the reference (3,4,8) beside it
    assert rows[("lookup_table", 16)][3:6] == ["0.3890", "0.2659", "+0.1231"]
    assert rows[("lookup_table", 1)][3:5] == ["0.5322", "0.5322"]
    assert all(cells[2] == picks[bs] for (_, bs), cells in rows.items())  # all eight agree
    for name in ALGORITHMS:
        assert (out / ARTIFACT_FILES[name]).is_file()
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["features"] == "pre" and manifest["seed"] == 0


def test_train_selected_algorithms_with_pre_features(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "m"
    res = run_cli("train", "--out", out, "--algo", "lookup_table", "--algo", "gbt", "--features", "pre", "--seed", "3")
    assert res.exit_code == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "gbt", "lookup_table", MANIFEST_FILE]
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert (
        manifest["features"] == "pre"
        and manifest["seed"] == 3
        and list(manifest["algorithms"]) == ["lookup_table", "gbt"]
    )
    rec = run_cli(
        "recommend", "-b", "16", "--models", out, "--algo", "gbt", "--format", "json", "--state", "45", "1200", "0"
    )
    assert rec.exit_code == 0, rec.stderr
    doc = json.loads(rec.stdout)
    assert (
        doc["features"] == "pre"
        and doc["state"][1] == pytest.approx(0.45)
        and doc["state"][2] == pytest.approx(1200 / 8192)
    )


def test_train_is_reproducible(run_cli, tmp_path: Path) -> None:
    digests = []
    for run in ("a", "b"):
        res = run_cli("train", "--out", tmp_path / run, "--algo", "mlp_bandit", "--algo", "linucb", "--seed", "5")
        assert res.exit_code == 0, res.stderr
        digests.append(
            {
                str(p.relative_to(tmp_path / run)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in (tmp_path / run).rglob("*")
                if p.is_file()
            }
        )
    # 2 model card files, the safetensors copy, 2 sidecars, manifest, README.md
    assert digests[0] == digests[1] and len(digests[0]) == 7


@pytest.mark.parametrize(
    "args, message",
    [
        (["--algo", "dqn"], "unknown algorithm 'dqn'"),
        (["--features", "post"], "'post' is not one of 'contract', 'pre'"),
        (["--power-limit", "0"], "--power-limit must be a power limit in W in [1, 2000]"),
    ],
)
def test_train_bad_options(run_cli, tmp_path: Path, args: list[str], message: str) -> None:
    res = run_cli("train", "--out", tmp_path / "m", *args)
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and message in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "m").exists()


def test_train_refuses_a_foreign_non_empty_out(run_cli, tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    res = run_cli("train", "--out", tmp_path, "--algo", "lookup_table")
    assert res.exit_code == 2 and "not a specband artifact folder" in res.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def _good_rows(published_records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(r) for r in published_records[:4]]  # bs 1: baseline, (3,4,8), (5,4,16), (5,4,8)


BAD_INPUTS = [
    ("empty", lambda rows: [], None, None, "file is empty"),
    ("not json", lambda rows: [json.dumps(rows[0]), "{not json"], 2, None, "not valid JSON"),
    ("nan", lambda rows: [rows[0], {**rows[1], "speed_tok_s": float("nan")}], 2, "speed_tok_s", "NaN or Infinity"),
    (
        "missing",
        lambda rows: [rows[0], {k: v for k, v in rows[1].items() if k != "topk"}],
        2,
        "topk",
        "required field is missing",
    ),
    ("wrong type", lambda rows: [rows[0], {**rows[1], "batch_size": "one"}], 2, "batch_size", "expected an integer"),
    ("bs <= 0", lambda rows: [rows[0], {**rows[1], "batch_size": 0}], 2, "batch_size", "must be > 0"),
    ("triple", lambda rows: [rows[0], {**rows[1], "num_draft_tokens": 16}], 2, "steps/topk/num_draft_tokens", "rule 1"),
    ("accept", lambda rows: [rows[0], {**rows[1], "accept_length": 4.5}], 2, "accept_length", "outside [1, steps + 1]"),
    ("no baseline", lambda rows: rows[1:], 1, "batch_size", "no successful (0,0,0) baseline"),
    (
        "duplicate",
        lambda rows: [rows[0], rows[1], {**rows[2], "index": rows[1]["index"]}],
        3,
        "index",
        "already appears on line 2",
    ),
]


@pytest.mark.parametrize("case, make, line, field, message", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_train_bad_file(
    run_cli, write_jsonl, published_records, tmp_path: Path, case, make, line, field, message
) -> None:
    path = write_jsonl(make(_good_rows(published_records)), name="bad.jsonl")
    out = tmp_path / "out"
    res = run_cli("train", path, "--out", out)
    assert res.exit_code == 2, (case, res.stdout, res.stderr)
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    where = f"{path}:{line}: " if line else f"{path}: "
    assert where in lines[0], lines[0]
    if field:
        assert f"field '{field}'" in lines[0]
    assert message in lines[0]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_train_missing_file(run_cli, tmp_path: Path) -> None:
    res = run_cli("train", tmp_path / "nope.jsonl", "--out", tmp_path / "out")
    assert res.exit_code == 2 and "nope.jsonl: no such file" in res.stderr


def test_recommend_embedded_default(run_cli) -> None:
    res = run_cli("recommend", "--batch-size", "16")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines() == [FLAGS_324]
    assert "--speculative-draft-model-path" in res.stderr  # says it is needed, invents no path
    res = run_cli("recommend", "-b", "4", "--draft-model", "my/draft head", "--allow-transfer")
    assert res.stdout.strip() == (
        "--speculative-algorithm EAGLE3 --speculative-draft-model-path 'my/draft head' --speculative-num-steps 3 "
        "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8"
    )
    assert "sglang needs --speculative-draft-model-path" not in res.stderr
    assert "note: transferred (--allow-transfer): draft my/draft head vs the data's " in res.stderr


def test_recommend_json(run_cli) -> None:
    res = run_cli("recommend", "-b", "8", "--format", "json", "--draft-model", "d", "--allow-transfer")
    doc = json.loads(res.stdout)
    assert doc["action_index"] == 10 and doc["action"] == [3, 4, 8] and doc["algorithm"] == "lookup_table"
    assert doc["flags"][:4] == ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d"]
    assert doc["kwargs"] == {
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "d",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 8,
    }
    assert doc["mean_reward"] == pytest.approx(0.4653, abs=1e-4)


def test_recommend_unmeasured_batch_size(run_cli) -> None:
    res = run_cli("recommend", "-b", "12", "--format", "json")
    assert json.loads(res.stdout)["measured_batch_size"] == 16
    assert "batch size 12 was not measured; picking for the nearest measured batch size 16" in res.stderr
    res = run_cli("recommend", "-b", "64")
    assert res.stdout.strip() == FLAGS_324


@pytest.mark.parametrize("name", ALGORITHMS)
def test_recommend_from_a_trained_folder(run_cli, models: Path, name: str) -> None:
    for bs, flags in ((1, FLAGS_348), (16, FLAGS_324)):
        res = run_cli("recommend", "-b", str(bs), "--algo", name, "--models", models)
        assert res.exit_code == 0, res.stderr
        assert res.stdout.strip() == flags, (name, bs)


def test_recommend_other_algorithm_without_models(run_cli) -> None:
    res = run_cli("recommend", "-b", "16", "--algo", "linucb")
    assert res.exit_code == 0 and res.stdout.strip() == FLAGS_324
    assert "training linucb on the bundled published measurements" in res.stderr


def test_recommend_foreign_folder(run_cli, tmp_path: Path) -> None:
    (tmp_path / "lookup_table").mkdir()
    (tmp_path / "lookup_table" / "model.json").write_text(json.dumps({"4": {"config": [5, 4, 16], "mean_reward": 0.4}}))
    res = run_cli("recommend", "-b", "4", "--models", tmp_path)
    assert res.exit_code == 0, res.stderr
    assert "--speculative-num-draft-tokens 16" in res.stdout
    assert "no specband manifest" in res.stderr
    # with the raw sweep, only configs measured there are allowed: (5,4,16) was measured at bs 4
    from specband.sweeps.dataset import bundled_data_path

    res = run_cli("recommend", "-b", "4", "--models", tmp_path, "--data", bundled_data_path(), "--format", "json")
    assert json.loads(res.stdout)["action"] == [5, 4, 16]
    (tmp_path / "lookup_table" / "model.json").write_text(json.dumps({"4": {"config": [5, 2, 8], "mean_reward": 0.4}}))
    res = run_cli("recommend", "-b", "4", "--models", tmp_path, "--data", bundled_data_path(), "--format", "json")
    # (5,2,8) was never run at bs 4: the pick falls back to the lowest allowed index there
    assert json.loads(res.stdout)["action"] == [0, 0, 0]
    assert "launch without speculative flags" in res.stderr


def test_recommend_baseline_only(run_cli, write_jsonl, published_records, tmp_path: Path) -> None:
    path = write_jsonl([published_records[0]])
    assert run_cli("train", path, "--out", tmp_path / "m", "--algo", "lookup_table").exit_code == 0
    res = run_cli("recommend", "-b", "1", "--models", tmp_path / "m")
    assert res.exit_code == 0 and res.stdout == "\n"
    assert "non-speculative baseline (0,0,0)" in res.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["-b", "0"], "error: --batch-size: batch sizes must be in [1, 1048576], got 0"),
        (["-b", "1048577"], "error: --batch-size: batch sizes must be in [1, 1048576], got 1048577"),
        (["-b", "1_6"], "error: --batch-size: '1_6' is not a whole number"),
        (["-b", "8,8"], "error: --batch-size: batch size 8 is given twice in '8,8'"),
        (["-b", "4", "--format", "yaml"], "--format must be 'flags' or 'json'"),
        (["-b", "4", "--algo", "dqn"], "unknown algorithm 'dqn'"),
        (["-b", "4", "--models", "/nonexistent/models"], "no such artifact folder"),
        (["-b", "4", "--state", "40", "-5", "0"], "--state: MEM_MB must be a number in [0, 16777216], got -5.0"),
        (["-b", "4", "--state", "-300", "0", "0"], "--state: TEMP_C must be a number in [-40, 150]"),
        (["-b", "4", "--state", "50", "0", "500"], "--state: UTIL_PCT must be a number in [0, 100]"),
        (["-b", "4", "--state", "nan", "0", "0"], "--state: TEMP_C must be a number"),
    ],
)
def test_recommend_bad_options(run_cli, args: list[str], message: str) -> None:
    res = run_cli("recommend", *args)
    assert res.exit_code == 2 and message in res.stderr and "Traceback" not in res.stderr


def test_recommend_missing_algorithm_in_folder(run_cli, tmp_path: Path) -> None:
    assert run_cli("train", "--out", tmp_path / "m", "--algo", "lookup_table").exit_code == 0
    res = run_cli("recommend", "-b", "4", "--models", tmp_path / "m", "--algo", "cql")
    assert res.exit_code == 2 and "the folder has: lookup_table" in res.stderr


CHECK_IMPORTS = """
import sys
from specband.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'sklearn', 'numpy', 'scipy', 'joblib'})
print('HEAVY', heavy)
"""


@pytest.mark.parametrize("with_models", [False, True])
def test_recommend_lookup_table_imports_no_torch(models: Path, with_models: bool) -> None:
    args = ["recommend", "-b", "16"] + (["--models", str(models)] if with_models else [])
    proc = subprocess.run([sys.executable, "-c", CHECK_IMPORTS, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == FLAGS_324
    assert proc.stdout.splitlines()[-1] == "HEAVY []"


def test_python_dash_m_specband() -> None:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "specband", "recommend", "-b", "1", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["action"] == [3, 4, 8]


def test_recommend_uses_the_folder_train_wrote_by_default(
    run_cli, write_jsonl, published_records, tmp_path: Path, monkeypatch
) -> None:
    # bs 4 with only the baseline and (3,1,4): a folder trained on it must pick (3,1,4), the embedded default (3,4,8)
    rows = [r for r in published_records if r["batch_size"] == 4 and (r["steps"], r["topk"]) in ((0, 0), (3, 1))]
    data = write_jsonl(rows)
    monkeypatch.chdir(tmp_path)
    assert run_cli("train", data, "--algo", "lookup_table").exit_code == 0
    res = run_cli("recommend", "-b", "4", "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["action"] == [3, 1, 4]
    assert "using ./specband-models" in res.stderr
    (tmp_path / "specband-models" / "specband.json").unlink()  # not a specband folder any more
    res = run_cli("recommend", "-b", "4", "--format", "json")
    assert json.loads(res.stdout)["action"] == [3, 4, 8] and "using ./specband-models" not in res.stderr


def test_train_says_which_algorithms_a_replaced_folder_loses(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "m"
    assert run_cli("train", "--out", out, "--algo", "lookup_table", "--algo", "linucb").exit_code == 0
    res = run_cli("train", "--out", out, "--algo", "lookup_table")
    assert res.exit_code == 0
    assert f"note: {out} was replaced; it no longer holds linucb" in res.stderr
    assert not (out / "linucb").exists() and (out / "lookup_table" / "model.json").is_file()


def test_default_folder_without_the_algorithm_falls_back_to_the_embedded_policy(
    run_cli, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_cli("train", "--algo", "lookup_table").exit_code == 0
    res = run_cli("recommend", "-b", "16", "--algo", "linucb", "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert "./specband-models has no linucb; using the embedded default" in res.stderr
    assert json.loads(res.stdout)["action"] == [3, 2, 4]


def test_contract_models_asked_with_a_state_say_it_is_not_what_they_saw(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "cm"
    assert run_cli("train", "--out", out, "--features", "contract", "--algo", "lookup_table").exit_code == 0
    res = run_cli("recommend", "-b", "16", "--models", out, "--state", "40", "0", "0")
    assert res.exit_code == 0
    assert "contract state, whose memory and utilisation were read after each run" in res.stderr
    pre = tmp_path / "pm"
    assert run_cli("train", "--out", pre, "--algo", "lookup_table").exit_code == 0
    res = run_cli("recommend", "-b", "16", "--models", pre, "--state", "40", "0", "0")
    assert "contract state" not in res.stderr


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_train_power_limit_is_an_option_error_not_a_data_error(run_cli, tmp_path: Path, value: str) -> None:
    res = run_cli("train", "--power-limit", value, "--out", tmp_path / "m")
    assert res.exit_code == 2
    assert res.stderr.startswith("error: --power-limit must be a power limit in W in [1, 2000], got ")
    assert len(res.stderr.splitlines()) == 1 and not (tmp_path / "m").exists()

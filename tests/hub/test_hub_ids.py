"""Hub ids wherever a path is taken (issue 9 item 2), resolved offline from a hub cache
built in a temporary folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specband.files.hub import HubRef, parse_hub_ref, resolve_data_file
from specband.sweeps.dataset import bundled_data_path, load_sweep

from .conftest import DATASET_REPO, POLICY_REPO, add_snapshot, config_bytes


@pytest.mark.parametrize(
    "text, ref",
    [
        ("org/name", HubRef("org/name")),
        ("org/name@v1.0", HubRef("org/name", revision="v1.0")),
        ("datasets/org/name", HubRef("org/name", "dataset")),
        ("datasets/org/name@refs%2Fconvert%2Fparquet", HubRef("org/name", "dataset", "refs/convert/parquet")),
        ("datasets/org/name@refs/convert/parquet", HubRef("org/name", "dataset", "refs/convert/parquet")),
        ("hf://org/name", HubRef("org/name")),
        ("hf:/org/name", HubRef("org/name")),  # what pathlib makes of hf://
        ("hf://datasets/org/name@main/data/x.jsonl", HubRef("org/name", "dataset", "main", "data/x.jsonl")),
        (
            "hf://datasets/org/name@refs/convert/parquet/default/train",
            HubRef("org/name", "dataset", "refs/convert/parquet", "default/train"),
        ),
        ("./org/name", None),
        ("/abs/org/name", None),
        ("name.jsonl", None),
        ("a/b/c", None),
    ],
)
def test_parse_hub_ref(text: str, ref: HubRef | None) -> None:
    assert parse_hub_ref(text) == ref


def test_an_existing_local_path_wins(tmp_path: Path) -> None:
    Path("org").mkdir()
    Path("org/name").write_text("{}")
    assert parse_hub_ref("org/name") is None


@pytest.mark.parametrize("form", [POLICY_REPO, f"hf://{POLICY_REPO}", f"{POLICY_REPO}@main"])
def test_recommend_from_the_policy_repo(run_cli, hub_cache: Path, model_card_files, form: str) -> None:
    add_snapshot(hub_cache, POLICY_REPO, model_card_files)
    for algo in ("lookup_table", "mlp_bandit", "linucb"):
        res = run_cli("recommend", "--models", form, "--algo", algo, "-b", "16")
        assert res.exit_code == 0, res.stderr
        assert res.stdout.startswith("--speculative-algorithm EAGLE3") or res.stdout.strip() == ""


def test_a_revision_by_commit(run_cli, hub_cache: Path, model_card_files) -> None:
    snapshot = add_snapshot(hub_cache, POLICY_REPO, model_card_files, commit="c" * 40)
    res = run_cli("recommend", "--models", f"{POLICY_REPO}@{'c' * 40}", "-b", "16", "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["source"] == str(snapshot)


def test_downloaded_pickles_need_trust(run_cli, hub_cache: Path, model_card_files) -> None:
    add_snapshot(hub_cache, POLICY_REPO, model_card_files)
    res = run_cli("recommend", "--models", POLICY_REPO, "--algo", "gbt", "-b", "16")
    assert res.exit_code == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "gbt/model.joblib" in errors[0] and "--trust-pickle" in errors[0]
    res = run_cli("recommend", "--models", POLICY_REPO, "--algo", "gbt", "-b", "16", "--trust-pickle")
    assert res.exit_code == 0, res.stderr


def test_cache_miss_is_one_error_line_naming_the_id(run_cli, hub_cache: Path) -> None:
    for args in (
        ("recommend", "--models", "org/missing", "-b", "4"),
        ("train", "datasets/org/missing", "--out", "x"),
        ("evaluate", "hf://datasets/org/missing"),
        ("simulate", "--target-config", "org/missing-target", "--out", "s.jsonl"),
    ):
        res = run_cli(*args)
        assert res.exit_code == 5, args  # offline (HF_HUB_OFFLINE=1) and not cached: a failed download
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "org/missing" in lines[0], res.stderr
        assert "not in the local Hugging Face cache" in lines[0]
    assert not Path("x").exists() and not Path("s.jsonl").exists()


def _published_jsonl() -> bytes:
    return bundled_data_path().read_bytes()


def _as_parquet(jsonl: bytes) -> bytes:
    """The rows as the hub's Parquet conversion stores them (one table, columns inferred)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in jsonl.decode().splitlines() if line.strip()]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def test_train_and_evaluate_from_the_dataset_repo(run_cli, hub_cache: Path) -> None:
    add_snapshot(hub_cache, DATASET_REPO, {"rtx4060_published_live.jsonl": _published_jsonl()}, repo_type="dataset")
    res = run_cli("train", f"datasets/{DATASET_REPO}", "--algo", "lookup_table", "--out", "m")
    assert res.exit_code == 0, res.stderr
    manifest = json.loads(Path("m/specband.json").read_text())
    assert manifest["data"]["path"] == f"hf://datasets/{DATASET_REPO}" and manifest["data"]["rows"] == 29
    res = run_cli("evaluate", f"hf://datasets/{DATASET_REPO}", "--algo", "lookup_table", "--bootstrap", "5", "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)


@pytest.mark.parametrize(
    "form", [f"datasets/{DATASET_REPO}@refs%2Fconvert%2Fparquet", f"hf://datasets/{DATASET_REPO}@refs/convert/parquet"]
)
def test_the_hubs_parquet_conversion(run_cli, hub_cache: Path, form: str) -> None:
    jsonl = _published_jsonl()
    add_snapshot(hub_cache, DATASET_REPO, {"rtx4060_published_live.jsonl": jsonl}, repo_type="dataset")
    add_snapshot(
        hub_cache,
        DATASET_REPO,
        {"default/train/0000.parquet": _as_parquet(jsonl)},
        repo_type="dataset",
        ref="refs/convert/parquet",
    )
    from_parquet = load_sweep(resolve_data_file(form))
    from_jsonl = load_sweep(resolve_data_file(f"datasets/{DATASET_REPO}"))
    assert len(from_parquet.rows) == len(from_jsonl.rows) == 29
    a, b = from_parquet.training_data("pre"), from_jsonl.training_data("pre")
    assert (a.rewards == b.rewards).all() and (a.actions == b.actions).all()
    res = run_cli("train", form, "--algo", "lookup_table", "--out", "m")
    assert res.exit_code == 0, res.stderr


def test_a_local_parquet_file(tmp_path: Path, hub_cache: Path) -> None:
    path = tmp_path / "sweep.parquet"
    path.write_bytes(_as_parquet(_published_jsonl()))
    assert len(load_sweep(resolve_data_file(path)).rows) == 29


def test_simulate_and_load_model_spec_from_a_model_repo(run_cli, hub_cache: Path) -> None:
    from specband.sim.hfconfig import bundled_model_config_path, load_model_spec

    target = json.loads(bundled_model_config_path("llama-3.2-1b-instruct").read_text())
    draft = json.loads(bundled_model_config_path("eagle3-llama-3.2-1b-instruct").read_text())
    add_snapshot(hub_cache, "unsloth/Llama-3.2-1B-Instruct", {"config.json": config_bytes(target)})
    add_snapshot(hub_cache, "org/eagle3-head", {"config.json": config_bytes(draft)})
    spec = load_model_spec("unsloth/Llama-3.2-1B-Instruct", draft=False)
    assert spec.hidden_size == 2048 and spec.num_layers == 16
    res = run_cli(
        "simulate",
        "--target-config",
        "unsloth/Llama-3.2-1B-Instruct",
        "--draft-config",
        "hf://org/eagle3-head",
        "--batch-sizes",
        "4",
        "--repeats",
        "1",
        "--out",
        "s.jsonl",
    )
    assert res.exit_code == 0, res.stderr
    assert Path("s.jsonl").read_text().count("\n") == 19

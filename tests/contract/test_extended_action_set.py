"""The extended action set through train, evaluate, recommend and schedule (issue 19 item 5):
opt-in with ``--actions extended``, the contract's formats unchanged, one set per file/folder."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from specband.artifacts.folder import ARTIFACT_FILES
from specband.contract.actions import (
    ACTION_SETS,
    ACTIONS,
    CONTRACT_SET,
    EXTENDED_ACTIONS,
    EXTENDED_SET,
    Action,
    action_index,
    action_set_of,
    parse_action,
)
from specband.core.errors import InvalidActionError

#: sha256 of the files ``specband train`` wrote on the bundled data before the extended set
#: existed (main at 3804f8f, seed 0, all eight algorithms): the model card's formats whose
#: bytes depend only on the fitted numbers (the joblib pickles also carry library versions).
_BEFORE = {
    "lookup_table/model.json": "a0262baf22b12b0106be89153e765e466f24ef115f5309e791cc842ff17ed37c",
    "linucb/model.npz": "7b9c4b42c0387b86a7d52ae2609e28bd0e0f090c386f1a0326f19c7c4afb0d0d",
    "thompson_sampling/model.npz": "61810a1f6002a78bbdd488e34c9ba0e8d94461c718099fde0c92ad7be89ed8aa",
    "mlp_bandit/policy.pth": "c8ee86821a664a8afeae8014ba133f6f682190e67baa182990d4d5d2eace7691",
    "cql/policy.pth": "93762ba4fc053339d4599923988e211ee73fdd474bffff19a4d128e0d70cbbc9",
    "bcq/policy.pth": "5704b000f865b67474b8d6b4930f93004cb60bb7857e8f355ac7873d150c6d4e",
}
#: sha256 of the manifest without what names this machine or release (data path, version)
#: and without ``files`` (the joblib hashes): features, allowed, states, means, row counts,
#: origin and stats, as main wrote it before the extended set was merged (main at 9595164,
#: after issue 18 added ``origin`` and ``stats``; the files above were the same since 3804f8f).
_BEFORE_MANIFEST = "83b21bb17c590e2d8f45477caef8f639e09b9bf3f98ee25689a01feb910eecaf"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _simulated_extended(run_cli, path: Path, repeats: int = 2) -> Path:
    res = run_cli(
        "simulate", "--profile", "h200", *("--target-config", "llama-3.1-8b-instruct"),
        *("--draft-config", "eagle3-llama-3.1-8b-instruct"), "--actions", "extended",
        *("--batch-sizes", "1,4", "--repeats", str(repeats), "--out", path),
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    return path


def test_the_set_is_a_value_passed_in_and_the_contract_by_default() -> None:
    assert ACTION_SETS == {"contract": CONTRACT_SET, "extended": EXTENDED_SET}
    assert (CONTRACT_SET.name, len(CONTRACT_SET), CONTRACT_SET.actions) == ("contract", 19, ACTIONS)
    assert (EXTENDED_SET.name, len(EXTENDED_SET), EXTENDED_SET.actions) == ("extended", 44, EXTENDED_ACTIONS)
    with pytest.raises(InvalidActionError, match="in the extended action set \\(pass --actions extended\\)"):
        action_index((7, 1, 8))
    with pytest.raises(InvalidActionError, match="in the extended action set \\(pass --actions extended\\)"):
        CONTRACT_SET.index(Action(7, 1, 8))
    assert action_index((7, 1, 8), EXTENDED_SET) == EXTENDED_SET.index(Action(7, 1, 8)) == 31
    assert EXTENDED_ACTIONS[31] == (7, 1, 8)
    assert action_index((7, 1, 2), EXTENDED_SET) == 31  # canonicalised to (7, 1, 8)
    assert action_index((3, 4, 8), EXTENDED_SET) == action_index((3, 4, 8)) == 10  # a contract index means the same
    assert parse_action("43", EXTENDED_SET) == EXTENDED_ACTIONS[43] == EXTENDED_SET[43]
    with pytest.raises(InvalidActionError, match=r"outside 0\.\.18"):
        parse_action("19")
    assert action_set_of([Action(0, 0, 0), Action(3, 4, 8)]) is CONTRACT_SET
    assert action_set_of([Action(0, 0, 0), Action(7, 1, 8)]) is EXTENDED_SET


def test_contract_train_output_is_byte_identical_to_before(run_cli, tmp_path) -> None:
    out = tmp_path / "models"
    res = run_cli("train", "--out", out)
    assert res.exit_code == 0, res.stderr
    assert {name: _sha(out / name) for name in _BEFORE} == _BEFORE
    manifest = json.loads((out / "specband.json").read_text())
    assert "action_set" not in manifest and "actions" not in manifest
    manifest.pop("specband_version")
    manifest.pop("files")
    manifest["data"].pop("path")
    assert hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest() == _BEFORE_MANIFEST
    # --actions contract is the default, spelled out
    again = tmp_path / "again"
    assert run_cli("train", "--out", again, "--actions", "contract").exit_code == 0
    assert {name: _sha(again / name) for name in _BEFORE} == _BEFORE


def test_an_extended_folder_says_so_and_holds_no_19_action_format(run_cli, tmp_path) -> None:
    data = _simulated_extended(run_cli, tmp_path / "ext.jsonl")
    assert all(json.loads(line)["action_set"] == "extended" for line in data.read_text().splitlines())
    out = tmp_path / "models"
    res = run_cli("train", data, "--out", out, "--actions", "extended")
    assert res.exit_code == 0, res.stderr
    manifest = json.loads((out / "specband.json").read_text())
    assert manifest["action_set"] == "extended"
    assert manifest["actions"] == [list(a) for a in EXTENDED_ACTIONS]
    assert list(manifest["algorithms"]) == ["lookup_table"]
    allowed = {i for entry in manifest["batch_sizes"].values() for i in entry["allowed"]}
    assert max(allowed) >= 19  # the extended indices live in specband's own manifest ...
    # ... and no model card loader is ever handed one: the only model card file names triples
    present = [name for name, rel in ARTIFACT_FILES.items() if (out / rel).exists()]
    assert present == ["lookup_table"]
    table = json.loads((out / "lookup_table" / "model.json").read_text())
    assert all(tuple(v["config"]) in EXTENDED_ACTIONS for v in table.values())
    card = (out / "README.md").read_text()
    assert "Action set: **extended**" in card and f"43 {tuple(EXTENDED_ACTIONS[43])}" in card
    # the 19-action formats are refused in one line, naming the option
    res = run_cli("train", data, "--out", tmp_path / "m2", "--actions", "extended", "--algo", "gbt")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "--actions extended trains lookup_table only" in res.stderr
    assert not (tmp_path / "m2").exists()


def test_a_folder_is_read_with_its_own_action_set_only(run_cli, tmp_path) -> None:
    data = _simulated_extended(run_cli, tmp_path / "ext.jsonl")
    ext = tmp_path / "ext-models"
    assert run_cli("train", data, "--out", ext, "--actions", "extended").exit_code == 0
    res = run_cli("recommend", "-b", "4", "--models", ext, "--actions", "extended", "--format", "json")
    assert res.exit_code == 0, res.stderr
    pick = json.loads(res.stdout)
    table = json.loads((ext / "lookup_table" / "model.json").read_text())
    assert pick["action_set"] == "extended" and pick["action"] == table["4"]["config"]
    assert EXTENDED_ACTIONS[pick["action_index"]] == tuple(pick["action"])
    res = run_cli("recommend", "-b", "4", "--models", ext)
    assert res.exit_code == 2 and "the models are of the extended action set; pass --actions extended" in res.stderr
    contract = tmp_path / "contract-models"
    assert run_cli("train", "--out", contract, "--algo", "lookup_table").exit_code == 0
    res = run_cli("recommend", "-b", "4", "--models", contract, "--actions", "extended")
    assert res.exit_code == 2 and "the models are of the contract action set; pass --actions contract" in res.stderr
    res = run_cli("recommend", "-b", "4", "--actions", "extended")
    assert res.exit_code == 2 and "--actions extended needs --models DIR" in res.stderr
    res = run_cli("recommend", "-b", "4", "--actions", "all")
    assert res.exit_code == 2 and "--actions must be one of contract, extended" in res.stderr


def test_mixing_action_sets_in_one_file_is_refused_on_merge(run_cli, tmp_path) -> None:
    contract = tmp_path / "a.jsonl"
    res = run_cli("simulate", *("--batch-sizes", "1", "--repeats", "1", "--out", contract))
    assert res.exit_code == 0, res.stderr
    assert all("action_set" not in json.loads(line) for line in contract.read_text().splitlines())
    extended = _simulated_extended(run_cli, tmp_path / "b.jsonl", repeats=1)
    res = run_cli("merge", tmp_path / "m.jsonl", contract, extended)
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "cannot merge: its rows are of the extended action set, this sweep's is contract" in res.stderr
    assert not (tmp_path / "m.jsonl").exists()


def test_the_sweep_its_data_the_folder_and_the_policy_carry_their_set(run_cli, tmp_path) -> None:
    from specband.artifacts.folder import load_manifest
    from specband.artifacts.load import load_models
    from specband.core.errors import ArtifactError, DataError
    from specband.policies.lookup_table import LookupTable
    from specband.sweeps.dataset import load_sweep

    data = _simulated_extended(run_cli, tmp_path / "ext.jsonl")
    with pytest.raises(DataError, match="in the extended action set \\(pass --actions extended\\)"):
        load_sweep(data)  # read against the contract unless told otherwise
    sweep = load_sweep(data, action_set=EXTENDED_SET)
    training = sweep.training_data("pre")
    assert sweep.action_set is EXTENDED_SET and training.action_set is EXTENDED_SET
    assert sweep.subset(lambda r: r.batch_size == 1).action_set is EXTENDED_SET
    assert training.allowed[1].shape == (44,) and training.allowed[1].sum() == 44  # every config ran at bs 1
    assert {r.action for r in sweep.rows} == set(EXTENDED_ACTIONS)
    policy = LookupTable().fit(training)
    assert policy.action_set is EXTENDED_SET and policy.scores(training.states[:1]).shape == (1, 44)
    assert load_sweep(None).training_data().action_set is CONTRACT_SET

    out = tmp_path / "models"
    assert run_cli("train", data, "--out", out, "--actions", "extended").exit_code == 0
    assert load_manifest(out, EXTENDED_SET).action_set is EXTENDED_SET
    with pytest.raises(ArtifactError, match="the models are of the extended action set; pass --actions extended"):
        load_manifest(out)
    loaded = load_models("lookup_table", out, action_set=EXTENDED_SET)
    assert loaded.manifest.action_set is EXTENDED_SET and loaded.lookup_means is not None
    written = json.loads((out / "lookup_table" / "model.json").read_text())
    table = LookupTable.load(out, EXTENDED_SET).table()
    assert {str(bs): list(a) for bs, (a, _) in table.items()} == {bs: v["config"] for bs, v in written.items()}
    assert any(EXTENDED_SET.index(a) >= 19 for a, _ in table.values())  # an index the contract lacks

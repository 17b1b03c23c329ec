"""The extended action set through train, evaluate, recommend and schedule (issue 19 item 5):
opt-in with ``--actions extended``, the contract's formats unchanged, one set per file/folder."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

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

#: What ``specband train`` wrote on the bundled data before the extended set existed (the files'
#: sha256 were pinned at main 3804f8f, the manifest's at 9595164, seed 0, all eight algorithms), as
#: values: lookup_table's means, LinUCB's and Thompson sampling's arrays and the manifest without what
#: names the machine or release (closed-form fits, compared closely), and for each network
#: (mlp_bandit, cql, bcq) what it does: its tensors' shapes, its pick at each batch size of the data
#: (at the state the manifest records, among the configs measured there) and its predicted reward
#: for each of those configs. The networks' weights themselves are not compared: they are trained by
#: SGD in float32, and another CPU's float kernels (OpenBLAS and NumPy pick theirs per CPU) end 200-600
#: epochs at other weights: ``cql/policy.pth/net.0.weight`` sums to -2.0187 on an Intel Xeon with AMX
#: and to -2.0105 on the AMD EPYC machines, and (measured on an AMD EPYC) ``OPENBLAS_CORETYPE=Nehalem``
#: gives -2.0184, NumPy without AVX2/FMA (``NPY_DISABLE_CPU_FEATURES``) -2.0546. Under those kernels the
#: picks stay and the predicted rewards move by 0.0006 and 0.0027 at most (a different seed: 0.0069).
#: The networks' behaviour was recorded on an AMD EPYC where their weights still matched the pinned
#: ones (sums within 1e-3).
BEFORE = Path(__file__).with_name("contract_train_before.json")
#: Tolerances: closed-form fits and means (relative, absolute).
_CLOSED_FORM = (1e-6, 1e-9)
#: The networks' predicted rewards (reward units, absolute): about twice the largest move measured
#: under another CPU's float kernels (0.0027, above), below the gap between the best and the second
#: config at every batch size (0.011 or more).
_NETWORK_REWARD_TOL = 0.005
#: The policies trained by SGD (torch ``.pth`` files).
NETWORKS = ("mlp_bandit", "cql", "bcq")


def _network_behaviour(folder: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """What each network of a ``specband train`` folder does (see :data:`BEFORE`): its tensors'
    shapes and, per batch size of ``manifest``, its pick and its predicted reward per measured config."""
    import numpy as np
    import torch

    from specband.policies import policy_class

    def shapes(state: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in state.items():
            if isinstance(value, dict):
                out.update(shapes(value, f"{prefix}{key}."))
            elif isinstance(value, torch.Tensor):
                out[f"{prefix}{key}"] = list(value.shape)
            else:
                out[f"{prefix}{key}"] = value
        return out

    behaviour: dict[str, Any] = {}
    for name in NETWORKS:
        policy = policy_class(name).load(folder)
        picks, rewards = {}, {}
        for bs, entry in manifest["batch_sizes"].items():
            state = np.array(entry["state"], dtype=np.float64)
            allowed = np.zeros(len(CONTRACT_SET), dtype=bool)
            allowed[entry["allowed"]] = True
            scores = policy.scores(state)
            picks[bs] = int(policy.act(state, allowed))
            rewards[bs] = {str(a): float(scores[a]) for a in entry["allowed"]}
        pth = torch.load(folder / name / "policy.pth", weights_only=True)
        behaviour[f"{name}/policy.pth"] = {"shapes": shapes(pth), "picks": picks, "predicted_reward": rewards}
    return behaviour


def _train_values(folder: Path) -> dict[str, Any]:
    """The values of a ``specband train`` folder in :data:`BEFORE`'s shape."""
    import numpy as np

    def arrays(name: str, keys: tuple[str, ...]) -> dict[str, Any]:
        with np.load(folder / name, allow_pickle=False) as z:
            return {k: z[k].tolist() for k in keys}

    manifest = json.loads((folder / "specband.json").read_text())
    manifest.pop("specband_version")
    manifest.pop("files")
    manifest["data"].pop("path")
    # the origin's engine columns came later (the bundled rows are sglang's; vLLM's version only on vLLM rows)
    assert manifest["origin"].pop("engine") == "sglang"
    assert manifest["origin"].pop("engine_version", None) is None  # sglang_version before it: null
    manifest["origin"]["sglang_version"] = None
    return {
        "lookup_table/model.json": json.loads((folder / "lookup_table/model.json").read_text()),
        "linucb/model.npz": arrays("linucb/model.npz", ("theta", "A", "actions")),
        "thompson_sampling/model.npz": arrays("thompson_sampling/model.npz", ("mean", "cov", "actions")),
        **_network_behaviour(folder, manifest),
        "specband.json": manifest,
    }


def _mismatches(got: Any, want: Any, tol: tuple[float, float], where: str = "") -> list[str]:
    """Where ``got`` differs from ``want``: the same structure, equal strings and integers, and
    floats within ``tol`` (relative, absolute)."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [f"{where}: keys {sorted(got) if isinstance(got, dict) else got!r} != {sorted(want)}"]
        return [m for k in want for m in _mismatches(got[k], want[k], tol, f"{where}/{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: {got!r} != {want!r}"]
        pairs = enumerate(zip(got, want, strict=True))
        return [m for i, (g, w) in pairs for m in _mismatches(g, w, tol, f"{where}[{i}]")]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return [] if math.isclose(got, want, rel_tol=tol[0], abs_tol=tol[1]) else [f"{where}: {got!r} != {want!r}"]
    return [] if got == want and type(got) is type(want) else [f"{where}: {got!r} != {want!r}"]


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


def test_contract_train_output_has_the_values_it_had_before(run_cli, tmp_path) -> None:
    out = tmp_path / "models"
    res = run_cli("train", "--out", out)
    assert res.exit_code == 0, res.stderr
    manifest = json.loads((out / "specband.json").read_text())
    assert "action_set" not in manifest and "actions" not in manifest
    got, want = _train_values(out), json.loads(BEFORE.read_text())
    networks = {f"{name}/policy.pth" for name in NETWORKS}
    assert set(got) == set(want) and networks <= set(want)
    assert [m for k in want if k not in networks for m in _mismatches(got[k], want[k], _CLOSED_FORM, k)] == []
    # the networks: the same tensors, the same pick at every batch size, predicted rewards within the tolerance
    for k in sorted(networks):
        assert got[k]["shapes"] == want[k]["shapes"], k
        assert got[k]["picks"] == want[k]["picks"], k
        assert _mismatches(got[k]["predicted_reward"], want[k]["predicted_reward"], (0.0, _NETWORK_REWARD_TOL), k) == []
    # --actions contract is the default, spelled out: the same files, byte for byte, on one machine
    again = tmp_path / "again"
    assert run_cli("train", "--out", again, "--actions", "contract").exit_code == 0
    files = [p.relative_to(out) for p in sorted(out.rglob("*")) if p.is_file() and p.name != "README.md"]
    assert len(files) > 20
    assert [f for f in files if f != Path("specband.json") and (out / f).read_bytes() != (again / f).read_bytes()] == []


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

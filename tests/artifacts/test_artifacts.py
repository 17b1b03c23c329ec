"""Artifact folders: the model card's layout, each file loadable by the model card's own
recipe in a process that never imports specband, folders written by other tools, the
manifest, atomic writes and the embedded default."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specband.artifacts.fit import build_manifest, compute_embedded_manifest, train_policies
from specband.artifacts.folder import (
    ARTIFACT_FILES,
    MANIFEST_FILE,
    Manifest,
    available_algorithms,
    embedded_manifest,
    load_manifest,
    load_policies,
    load_policy,
    save_artifacts,
    validate_algorithms,
)
from specband.artifacts.pick_table import pick_table
from specband.contract.actions import ACTIONS
from specband.contract.state import state_tuple
from specband.core.errors import ArtifactError, ConfigError
from specband.policies import ALGORITHMS, create_policy, policy_class
from specband.policies.embedded import EMBEDDED_MANIFEST
from specband.sweeps.dataset import load_sweep, state_vector


@pytest.fixture(scope="module")
def sweep():
    return load_sweep(None)


@pytest.fixture(scope="module")
def trained(sweep):
    data = sweep.training_data("contract")
    return data, train_policies(data, seed=0)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, sweep, trained) -> Path:
    data, policies = trained
    out = tmp_path_factory.mktemp("artifacts") / "models"
    save_artifacts(policies, out, build_manifest(data, ALGORITHMS, seed=0, sweep=sweep))
    return out


def test_layout_is_the_model_cards(folder: Path) -> None:
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    expected = sorted(
        [
            *ARTIFACT_FILES.values(),
            MANIFEST_FILE,
            *(f"{name}/specband.json" for name in ALGORITHMS),
            "gbt/model.skops",  # the pickle-free copies, preferred when loading
            "doubly_robust/model.skops",
            "mlp_bandit/policy.safetensors",
            "cql/policy.safetensors",
            "bcq/policy.safetensors",
        ]
    )
    assert files == expected
    assert {name: f"{name}/{policy_class(name).artifact_file}" for name in ALGORITHMS} == ARTIFACT_FILES
    assert available_algorithms(folder) == list(ALGORITHMS)
    assert oct(os.stat(folder / ARTIFACT_FILES["linucb"]).st_mode & 0o044) == oct(0o044)  # readable by others


RECIPE = r"""
import json, sys
import joblib, numpy as np, torch
import torch.nn as nn

class QNetwork(nn.Module):
    def __init__(self, state_dim, n_actions):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(),
                                 nn.Linear(128, n_actions))
    def forward(self, x):
        return self.net(x)

d = sys.argv[1]
out = {}
for name in ("mlp_bandit", "cql"):
    q = QNetwork(4, 19)
    q.load_state_dict(torch.load(f"{d}/{name}/policy.pth", weights_only=True))
    with torch.no_grad():
        out[name] = q(torch.tensor(json.loads(sys.argv[2]), dtype=torch.float32)).tolist()

bcq = torch.load(f"{d}/bcq/policy.pth", weights_only=True)
assert isinstance(bcq, dict) and set(bcq) == {"behavior_state_dict", "q_state_dict", "actions"}, sorted(bcq)
behavior = nn.Sequential(nn.Linear(4, 128), nn.GELU(), nn.Linear(128, 19))
behavior.load_state_dict({k[len("net."):]: v for k, v in bcq["behavior_state_dict"].items()})
assert list(bcq["behavior_state_dict"]) == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
q = QNetwork(4, 19)
q.load_state_dict(bcq["q_state_dict"])
assert [tuple(a) for a in bcq["actions"]][10] == (3, 4, 8) and len(bcq["actions"]) == 19

table = json.load(open(f"{d}/lookup_table/model.json"))
out["lookup_table"] = {bs: entry["config"] for bs, entry in table.items()}
assert all(isinstance(e["mean_reward"], float) for e in table.values())

lin = np.load(f"{d}/linucb/model.npz")
assert lin["theta"].shape == (19, 4) and lin["A"].shape == (19, 4, 4) and lin["actions"].shape == (19, 3)
assert lin["theta"].dtype == np.float64 and lin["actions"].dtype.kind == "i"
ts = np.load(f"{d}/thompson_sampling/model.npz")
assert ts["mean"].shape == (19, 4) and ts["cov"].shape == (19, 4, 4) and ts["actions"].shape == (19, 3)
assert np.allclose(ts["cov"], np.linalg.inv(np.linalg.inv(ts["cov"])))

gbt = joblib.load(f"{d}/gbt/model.joblib")
assert type(gbt).__name__ == "GradientBoostingRegressor"
assert gbt.n_estimators == 100 and gbt.max_depth == 3 and gbt.n_features_in_ == 5
dr = joblib.load(f"{d}/doubly_robust/model.joblib")
assert type(dr).__name__ == "LinearRegression" and dr.n_features_in_ == 5
state = json.loads(sys.argv[2])[0]
feats = np.array([state + [a / 19] for a in range(19)])
out["gbt"] = gbt.predict(feats).tolist()

assert "specband" not in sys.modules, "the recipe imported specband"
print(json.dumps(out))
"""


def test_every_file_loads_with_the_model_card_recipe_without_specband(folder: Path, trained) -> None:
    """A clean interpreter (-I, no PYTHONPATH, not started from the repo) loads every file
    by the model card's recipe; its networks and trees give the same numbers as specband."""
    _, policies = trained
    states = [list(map(float, state_vector(bs))) for bs in (1, 4, 8, 16)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run(
        [sys.executable, "-I", "-c", RECIPE, str(folder), json.dumps(states)],
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("mlp_bandit", "cql"):
        np.testing.assert_allclose(out[name], policies[name].scores(np.array(states)), atol=1e-5)
    assert out["lookup_table"] == {"1": [3, 4, 8], "4": [3, 4, 8], "8": [3, 4, 8], "16": [3, 2, 4]}
    np.testing.assert_allclose(out["gbt"], policies["gbt"].scores(np.array(states[0])), atol=1e-12)


OTHER_TOOL = r'''
"""Writes an artifact folder the way the published study's scripts would, without specband."""
import json, os, sys
import joblib, numpy as np, torch
import torch.nn as nn
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.linear_model import LinearRegression

torch.manual_seed(0)
rng = np.random.default_rng(0)
d = sys.argv[1]
ACTIONS = [(0,0,0),(1,1,2),(1,2,2),(1,4,2),(1,4,4),(3,1,4),(3,2,2),(3,2,4),(3,4,2),(3,4,4),(3,4,8),
           (5,1,6),(5,2,2),(5,2,4),(5,2,8),(5,4,2),(5,4,4),(5,4,8),(5,4,16)]

class QNetwork(nn.Module):
    def __init__(self, s, n):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(s, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, n))

for name in ("mlp_bandit", "lookup_table", "linucb", "thompson_sampling", "gbt", "doubly_robust", "cql", "bcq"):
    os.makedirs(f"{d}/{name}", exist_ok=True)
for name in ("mlp_bandit", "cql"):
    torch.save(QNetwork(4, 19).state_dict(), f"{d}/{name}/policy.pth")
class Behavior(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 128), nn.GELU(), nn.Linear(128, 19))
torch.save({"behavior_state_dict": Behavior().state_dict(), "q_state_dict": QNetwork(4, 19).state_dict(),
            "actions": ACTIONS}, f"{d}/bcq/policy.pth")
json.dump({"1": {"config": [3, 4, 8], "mean_reward": 0.5323}, "16": {"config": [3, 2, 4], "mean_reward": 0.3855}},
          open(f"{d}/lookup_table/model.json", "w"))
A = np.stack([np.eye(4) + 0.1 * i * np.ones((4, 4)) for i in range(19)])
theta = rng.normal(size=(19, 4))
theta[10] += 5.0  # (3,4,8) clearly best for a positive state
np.savez(f"{d}/linucb/model.npz", theta=theta, A=A, actions=np.array(ACTIONS))
np.savez(f"{d}/thompson_sampling/model.npz", mean=theta, cov=np.linalg.inv(A), actions=np.array(ACTIONS))
X = rng.random((200, 5)); y = X[:, 4] * (1 - X[:, 4])
joblib.dump(GradientBoostingRegressor(n_estimators=100, max_depth=3).fit(X, y), f"{d}/gbt/model.joblib")
joblib.dump(LinearRegression().fit(X, y), f"{d}/doubly_robust/model.joblib")
'''


@pytest.fixture(scope="module")
def foreign_folder(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("foreign") / "published"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-I", "-c", OTHER_TOOL, str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_folder_written_by_another_tool_loads(foreign_folder: Path) -> None:
    manifest = load_manifest(foreign_folder)
    assert manifest.foreign and manifest.features == "contract" and manifest.allowed == {}
    assert manifest.algorithms == ALGORITHMS
    policies = load_policies(foreign_folder, trust_pickle=True)  # its joblib files: trusted explicitly
    assert list(policies) == list(ALGORITHMS)
    state = state_vector(4)
    for name, policy in policies.items():
        assert policy.scores(state).shape == (19,), name
        assert 0 <= policy.act(state) < 19
    assert ACTIONS[policies["linucb"].act(state)] == (3, 4, 8)
    assert ACTIONS[policies["thompson_sampling"].act(state)] == (3, 4, 8)
    assert ACTIONS[policies["lookup_table"].act(state_vector(12))] == (3, 2, 4)
    assert policies["bcq"].threshold == 0.3  # no sidecar: the published threshold
    assert policies["doubly_robust"].correction_source == "none"


def test_doubly_robust_correction_recomputed_from_the_raw_sweep(folder: Path, trained) -> None:
    data, policies = trained
    from_sidecar = load_policy(folder, "doubly_robust")
    from_data = load_policy(folder, "doubly_robust", data)
    assert from_sidecar.correction_source == "sidecar" and from_data.correction_source == "data"
    for bs, corr in policies["doubly_robust"].correction.items():
        np.testing.assert_allclose(from_sidecar.correction[bs], corr, atol=1e-12)
        np.testing.assert_allclose(from_data.correction[bs], corr, atol=1e-12)


@pytest.mark.parametrize(
    "name, damage, message",
    [
        (
            "linucb",
            lambda p: np.savez(p, theta=np.zeros((19, 3)), A=np.zeros((19, 4, 4)), actions=np.array(ACTIONS)),
            r"'theta' must have shape \(19, 4\)",
        ),
        ("linucb", lambda p: np.savez(p, theta=np.zeros((19, 4)), actions=np.array(ACTIONS)), "missing key"),
        (
            "thompson_sampling",
            lambda p: np.savez(p, mean=np.zeros((19, 4)), cov=np.zeros((19, 4, 4)), actions=np.array(ACTIONS)[::-1]),
            "contract order",
        ),
        ("mlp_bandit", lambda p: p.write_bytes(b"not a torch file"), "weights_only=True"),
        ("gbt", lambda p: p.write_bytes(b"garbage"), "not a readable joblib file"),
    ],
)
def test_malformed_files_are_artifact_errors(folder: Path, tmp_path: Path, name: str, damage, message: str) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    target = copy / ARTIFACT_FILES[name]
    target.unlink()
    target.with_suffix(".skops").unlink(missing_ok=True)
    target.with_suffix(".safetensors").unlink(missing_ok=True)
    damage(target)
    assert target.is_file()
    with pytest.raises(ArtifactError, match=message):
        load_policy(copy, name, trust_pickle=True, allow_modified=True)
    if name != "gbt":  # a non-pickle file edited after training is refused first, naming it
        with pytest.raises(ArtifactError, match=f"{ARTIFACT_FILES[name]}: modified since specband wrote it"):
            load_policy(copy, name, trust_pickle=True)


def test_bcq_file_must_be_the_dict(folder: Path, tmp_path: Path) -> None:
    import shutil

    import torch

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    torch.save({"q_state_dict": {}}, copy / "bcq" / "policy.pth")
    (copy / "bcq" / "policy.safetensors").unlink()
    with pytest.raises(ArtifactError, match="missing key"):
        load_policy(copy, "bcq", allow_modified=True)


def test_torch_files_need_no_pickled_code(folder: Path) -> None:
    import torch

    for name in ("mlp_bandit", "cql", "bcq"):
        obj = torch.load(folder / ARTIFACT_FILES[name], weights_only=True)
        assert isinstance(obj, dict)


def test_manifest_records_the_training(folder: Path, sweep) -> None:
    manifest = load_manifest(folder)
    assert not manifest.foreign and manifest.features == "contract" and manifest.seed == 0
    assert manifest.algorithms == ALGORITHMS
    assert manifest.data.training_rows == 29 and manifest.data.sweep is not None
    assert manifest.data.sweep.format == "published_live"
    from specband.artifacts.folder import file_sha256

    assert manifest.data.sweep.sha256 == file_sha256(sweep.path)
    assert manifest.allowed[16] == (0, 3, 7, 10, 14)
    assert manifest.row_counts[16] == {0: 5, 3: 1, 7: 5, 10: 5, 14: 1}
    assert manifest.state_for(16) == pytest.approx(tuple(map(float, state_vector(16))))
    assert manifest.reward_config is not None and manifest.reward_config.band_low == 0.95
    again = Manifest.from_json(json.loads(json.dumps(manifest.to_json())), "x")
    assert again == manifest


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"features": "post"}, "'features' must be one of"),
        ({"seed": "zero"}, "'seed'"),
        ({"algorithms": {"dqn": {}}}, "unknown algorithm 'dqn'"),
        ({"batch_sizes": {"4": {"allowed": [19]}}}, "action indices in 0..18"),
        ({"batch_sizes": {"four": {}}}, "not a positive integer"),
        ({"batch_sizes": {"4": {"allowed": [1], "state": [1, 2]}}}, "4 finite numbers"),
        ({"power_limit_w": -80}, "'power_limit_w'"),
        ({"reward_config": [0.95]}, "'reward_config' must be an object or null"),
        ({"reward_config": {"band_low": 0.99, "band_high": 0.98}}, "'reward_config': reward config needs 0 < band_low"),
        ({"power_limits": {"picks": {}}}, "'power_limits' must be an object with"),
    ],
)
def test_bad_manifest(folder: Path, tmp_path: Path, patch: dict, message: str) -> None:
    obj = json.loads((folder / MANIFEST_FILE).read_text())
    obj.update(patch)
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(obj))
    with pytest.raises(ArtifactError, match=message):
        load_manifest(tmp_path)


def test_pick_table(trained, sweep) -> None:
    data, policies = trained
    rows = pick_table(policies, build_manifest(data, ALGORITHMS, seed=0, sweep=sweep))
    assert len(rows) == 8 * 4
    for r in rows:
        assert r.action == r.best_action and r.mean_reward == r.best_reward
        assert r.reference_reward is not None
    at16 = [r for r in rows if r.batch_size == 16]
    assert all(r.triple == (3, 2, 4) for r in at16)
    assert at16[0].mean_reward - at16[0].reference_reward == pytest.approx(0.3890 - 0.2659, abs=2e-4)


def test_model_card_lists_every_file_with_its_registry_recipe(trained, sweep) -> None:
    from specband.artifacts.card import render_model_card
    from specband.policies import REGISTRY

    data, policies = trained
    manifest = build_manifest(data, ALGORITHMS, seed=0, sweep=sweep)
    lines = render_model_card(manifest, sweep, pick_table(policies, manifest)).splitlines()
    start = lines.index("| file | load |")
    rows = lines[start + 2 : start + 2 + len(ALGORITHMS)]
    assert rows == [f"| `{e.path}` | {e.recipe} |" for e in REGISTRY.values()]
    assert rows[2] == "| `linucb/model.npz` | `np.load(...)`: theta, A, actions |"
    assert lines[start + 2 + len(ALGORITHMS)] == ""


def test_a_failed_write_leaves_nothing(tmp_path: Path, trained, sweep, monkeypatch) -> None:
    data, policies = trained
    manifest = build_manifest(data, ALGORITHMS, seed=0, sweep=sweep)

    def broken(self, directory):
        raise ArtifactError("disk full")

    monkeypatch.setattr(policy_class("cql"), "save", broken)
    with pytest.raises(ArtifactError, match="disk full"):
        save_artifacts(policies, tmp_path / "out", manifest)
    assert list(tmp_path.iterdir()) == []


def test_replaces_a_specband_folder_but_not_other_folders(tmp_path: Path, trained, sweep) -> None:
    data, policies = trained
    manifest = build_manifest(data, ["lookup_table"], seed=0, sweep=sweep)
    out = tmp_path / "out"
    both = build_manifest(data, ["lookup_table", "linucb"], seed=0, sweep=sweep)
    save_artifacts({"lookup_table": policies["lookup_table"], "linucb": policies["linucb"]}, out, both)
    save_artifacts({"lookup_table": policies["lookup_table"]}, out, manifest)  # a specband folder is replaced
    assert not (out / "linucb").exists() and (out / ARTIFACT_FILES["lookup_table"]).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    (out / "stale.txt").write_text("old")  # ... unless it holds files specband did not write
    with pytest.raises(ArtifactError, match=r"also holds stale\.txt"):
        save_artifacts({"lookup_table": policies["lookup_table"]}, out, manifest)
    assert (out / "stale.txt").read_text() == "old"
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ArtifactError, match="not a specband artifact folder"):
        save_artifacts({"lookup_table": policies["lookup_table"]}, other, manifest)
    assert (other / "notes.txt").read_text() == "keep me"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ArtifactError, match="not a folder"):
        save_artifacts({"lookup_table": policies["lookup_table"]}, a_file, manifest)


def test_embedded_manifest_is_current() -> None:
    """The shipped default equals a fresh computation from the bundled data."""
    assert compute_embedded_manifest() == EMBEDDED_MANIFEST
    manifest = embedded_manifest()
    assert manifest.mean_rewards[16][7] == pytest.approx(0.3890, abs=1e-4)


def test_state_tuple_equals_state_vector() -> None:
    for args in [(1,), (16, 71.5, 5230.0, 97.0), (3, None, 100.0, None), (7, 40.0, 0.0, 0.0)]:
        assert state_tuple(*args) == tuple(float(v) for v in state_vector(*args))


def test_validate_algorithms() -> None:
    assert validate_algorithms(None) == list(ALGORITHMS)
    assert validate_algorithms(["gbt", "cql", "gbt"]) == ["gbt", "cql"]
    with pytest.raises(ConfigError, match="unknown algorithm 'xgb'"):
        validate_algorithms(["xgb"])
    with pytest.raises(ArtifactError, match="no such artifact folder"):
        load_manifest("/nonexistent/folder")


def test_a_file_named_as_the_artifact_folder_is_not_a_folder(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# not a model folder\n")
    with pytest.raises(ArtifactError, match=r"README\.md: not a folder \(an artifact folder is a directory\)"):
        load_manifest(readme)


def test_missing_algorithm_in_folder(tmp_path: Path, trained, sweep) -> None:
    data, policies = trained
    save_artifacts(
        {"lookup_table": policies["lookup_table"]},
        tmp_path / "m",
        build_manifest(data, ["lookup_table"], seed=0, sweep=sweep),
    )
    with pytest.raises(ArtifactError, match=r"no such file \(the folder has: lookup_table\)"):
        load_policy(tmp_path / "m", "gbt")


def test_batch_size_without_allowed_configs_is_left_out(trained) -> None:
    import dataclasses

    data, policies = trained
    allowed = dict(data.allowed)
    allowed[8] = np.zeros_like(allowed[8])
    manifest = build_manifest(dataclasses.replace(data, allowed=allowed), ["lookup_table"], seed=0)
    assert manifest.batch_sizes == [1, 4, 16]
    assert manifest.measured_batch_size(8) == 4
    rows = pick_table({"lookup_table": policies["lookup_table"]}, manifest)
    assert [r.batch_size for r in rows] == [1, 4, 16]


def test_a_specband_folder_holding_user_files_is_not_replaced(tmp_path: Path) -> None:
    data = load_sweep(None).training_data()
    policy = create_policy("lookup_table").fit(data)
    out = tmp_path / "m"
    save_artifacts({"lookup_table": policy}, out, build_manifest(data, ["lookup_table"], seed=0))
    (out / "NOTES.md").write_text("mine")
    (out / "plots").mkdir()
    with pytest.raises(ArtifactError, match=r"also holds NOTES.md, plots, which specband did not write"):
        save_artifacts({"lookup_table": policy}, out, build_manifest(data, ["lookup_table"], seed=0))
    assert (out / "NOTES.md").read_text() == "mine" and (out / "lookup_table" / "model.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_new_folder_gets_mkdirs_mode(tmp_path: Path, umask: int) -> None:
    data = load_sweep(None).training_data()
    policy = create_policy("lookup_table").fit(data)
    old = os.umask(umask)
    try:
        out = save_artifacts({"lookup_table": policy}, tmp_path / "m", build_manifest(data, ["lookup_table"], seed=0))
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask


@pytest.mark.parametrize(
    ("fmt", "words"),
    [
        (999, "'format' 999 is newer than this specband reads (up to 1); upgrade specband"),
        ("1", "'format' must be a positive integer, got '1'"),
        (0, "'format' must be a positive integer, got 0"),
    ],
)
def test_a_manifest_format_this_specband_does_not_know_is_refused(
    folder: Path, tmp_path: Path, fmt: object, words: str
) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    obj = json.loads((copy / MANIFEST_FILE).read_text())
    assert obj["format"] == 1  # what this specband writes
    (copy / MANIFEST_FILE).write_text(json.dumps({**obj, "format": fmt}))
    with pytest.raises(ArtifactError) as caught:
        load_manifest(copy)
    message = str(caught.value)
    assert message.startswith(f"{copy / MANIFEST_FILE}: {words}") and "\n" not in message


def test_a_manifest_without_format_reads_as_format_1(folder: Path) -> None:
    obj = json.loads((folder / MANIFEST_FILE).read_text())
    del obj["format"]
    assert Manifest.from_json(obj, "x").algorithms == load_manifest(folder).algorithms


@pytest.mark.parametrize("link", ["file", "folder"])
def test_files_whose_real_path_leaves_the_folder_are_refused(folder: Path, tmp_path: Path, link: str) -> None:
    """A ``lookup_table/model.json`` (or ``lookup_table/``) linked to ``/etc/passwd`` is not
    read, not even with ``allow_modified`` and not in a folder without manifest."""
    from specband.artifacts.load import load_models

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.json").write_text('{"1": {"config": [0, 0, 0], "mean_reward": 9.0}}')
    for with_manifest in (True, False):
        copy = tmp_path / f"copy-{with_manifest}"
        (copy / "lookup_table").mkdir(parents=True)
        if with_manifest:
            (copy / MANIFEST_FILE).write_bytes((folder / MANIFEST_FILE).read_bytes())
        if link == "file":
            os.symlink(outside / "model.json", copy / "lookup_table" / "model.json")
            bad, real = copy / "lookup_table" / "model.json", outside / "model.json"
        else:
            (copy / "lookup_table").rmdir()
            os.symlink(outside, copy / "lookup_table")
            bad, real = copy / "lookup_table", outside
        with pytest.raises(ArtifactError) as caught:
            load_models("lookup_table", copy, allow_modified=True)
        assert str(caught.value) == (
            f"{bad}: a link to {real.resolve()}, outside the artifact folder {copy}; refused "
            "(copy the file into the folder)"
        )
    # the manifest itself is not read through a link out of the folder
    linked = tmp_path / "linked-manifest"
    linked.mkdir()
    (outside / MANIFEST_FILE).write_bytes((folder / MANIFEST_FILE).read_bytes())
    os.symlink(outside / MANIFEST_FILE, linked / MANIFEST_FILE)
    with pytest.raises(ArtifactError, match=f"^{linked / MANIFEST_FILE}: a link to .*outside the artifact folder"):
        load_manifest(linked)
    # a link that stays inside the folder is fine
    inside = tmp_path / "inside"
    (inside / "lookup_table").mkdir(parents=True)
    (inside / "real.json").write_text('{"1": {"config": [3, 4, 8], "mean_reward": 0.5}}')
    os.symlink(inside / "real.json", inside / "lookup_table" / "model.json")
    assert load_models("lookup_table", inside).lookup_means == {1: {10: 0.5}}

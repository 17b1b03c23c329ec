"""Crafted skops models (no pickle): tree structures scikit-learn's compiled code trusts.

An out-of-range child index made ``recommend`` die with SIGSEGV; a node pointing to itself
made it spin at 100 % CPU past SIGINT and SIGTERM. Every tree is validated before anything
predicts, whichever way the folder is reached (``--models``, a hub id, ``./specband-models``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specband.artifacts.folder import file_sha256, load_policy
from specband.core.errors import ArtifactError
from specband.files.safeload import check_sklearn_structure, skops_bytes


def _load_skops(path: Path) -> Any:
    import skops.io as sio

    return sio.load(path, trusted=sio.get_untrusted_types(file=path))


def _rehash(folder: Path) -> None:
    """What whoever controls a folder does: make the manifest agree with the files."""
    manifest = json.loads((folder / "specband.json").read_text())
    for name in manifest["files"]:
        if (folder / name).is_file():
            manifest["files"][name] = file_sha256(folder / name)
    (folder / "specband.json").write_text(json.dumps(manifest))


def _edit_nodes(model: Any, edit: Callable[[np.ndarray, int], None], every: bool = True) -> None:
    for i, est in enumerate(model.estimators_.ravel()):
        if i and not every:
            break
        state = est.tree_.__getstate__()
        nodes = state["nodes"].copy()
        edit(nodes, i)
        state["nodes"] = nodes
        est.tree_.__setstate__(state)


def _edit_values(model: Any) -> None:
    tree = model.estimators_[5, 0].tree_
    state = tree.__getstate__()
    values = state["values"].copy()
    values[-1, 0, 0] = np.nan
    state["values"] = values
    tree.__setstate__(state)


def _left(value: int) -> Callable[[np.ndarray, int], None]:
    def edit(nodes: np.ndarray, _: int) -> None:
        nodes["left_child"][0] = value

    return edit


def _root(value: int) -> Callable[[np.ndarray, int], None]:
    def edit(nodes: np.ndarray, _: int) -> None:
        nodes["left_child"][0] = nodes["right_child"][0] = value

    return edit


def _last_split_back_to(parent: int) -> Callable[[np.ndarray, int], None]:
    """The deepest split's right child points back up to ``parent`` (a longer cycle)."""

    def edit(nodes: np.ndarray, _: int) -> None:
        split = np.flatnonzero(nodes["left_child"] != -1)[-1]
        nodes["right_child"][split] = parent

    return edit


def _field(name: str, value: Any) -> Callable[[np.ndarray, int], None]:
    def edit(nodes: np.ndarray, _: int) -> None:
        nodes[name][0] = value

    return edit


def _leaf_with_child(nodes: np.ndarray, _: int) -> None:
    leaf = np.flatnonzero(nodes["left_child"] == -1)[0]
    nodes["right_child"][leaf] = 0


#: (id, how the model is changed, a phrase of the expected message)
CRAFTED: list[tuple[str, Callable[[Any], None], str]] = [
    ("out-of-range child (1e9)", lambda m: _edit_nodes(m, _root(10**9)), r"child 1000000000 is not in \(0, "),
    ("root points to itself", lambda m: _edit_nodes(m, _root(0)), r"cycle"),
    ("negative child", lambda m: _edit_nodes(m, _left(-7)), r"left child -7 is not in"),
    ("child back up the tree", lambda m: _edit_nodes(m, _last_split_back_to(0)), r"right child 0 is not in"),
    ("only the first tree", lambda m: _edit_nodes(m, _root(10**9), every=False), r"estimators_\[0, 0\] node 0"),
    ("feature out of range", lambda m: _edit_nodes(m, _field("feature", 10**6)), r"feature 1000000 is not in \[0, 5\)"),
    ("negative feature", lambda m: _edit_nodes(m, _field("feature", -3)), r"feature -3 is not in"),
    ("NaN threshold", lambda m: _edit_nodes(m, _field("threshold", np.nan)), r"threshold is not a finite"),
    ("leaf with a right child", lambda m: _edit_nodes(m, _leaf_with_child), r"a leaf \(left child -1\) with right"),
    ("both children equal", lambda m: _edit_nodes(m, _root(1)), r"both children are the same node"),
    ("NaN leaf value", _edit_values, r"estimators_\[5, 0\]: holds a value that is not a finite"),
    (
        "two trees per stage",
        lambda m: setattr(m, "estimators_", np.hstack([m.estimators_, m.estimators_])),
        r"estimators_ is \(\d+, 2\)",
    ),
    (
        "a stage that is not a tree",
        lambda m: m.estimators_.__setitem__((3, 0), m.init_),
        r"estimators_\[3, 0\] is a DummyRegressor",
    ),
    ("infinite learning rate", lambda m: setattr(m, "learning_rate", float("inf")), r"learning_rate inf"),
]


@pytest.fixture(scope="module")
def gbt_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder written by ``specband train --algo gbt --algo doubly_robust``."""
    from specband.cli import main

    out = tmp_path_factory.mktemp("trees") / "models"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--algo", "gbt", "--algo", "doubly_robust", "--out", str(out)])
    assert exc.value.code == 0
    return out


def _crafted(gbt_folder: Path, dest: Path, craft: Callable[[Any], None]) -> Path:
    shutil.copytree(gbt_folder, dest)
    path = dest / "gbt" / "model.skops"
    model = _load_skops(path)
    craft(model)
    path.write_bytes(skops_bytes(model))
    _rehash(dest)
    return dest


def test_genuine_models_pass_the_check(gbt_folder: Path) -> None:
    for algo, n_trees in (("gbt", 100), ("doubly_robust", 0)):
        model = _load_skops(gbt_folder / algo / "model.skops")
        check_sklearn_structure(model, gbt_folder / algo / "model.skops", 5)
        assert len(getattr(model, "estimators_", [])) == n_trees
    assert load_policy(gbt_folder, "gbt").scores(np.zeros(4)).shape == (19,)


@pytest.mark.parametrize(("craft", "message"), [(c, m) for _, c, m in CRAFTED], ids=[i for i, _, _ in CRAFTED])
def test_crafted_tree_is_refused_before_it_is_walked(
    gbt_folder: Path, tmp_path: Path, craft: Callable[[Any], None], message: str
) -> None:
    folder = _crafted(gbt_folder, tmp_path / "evil", craft)
    model = _load_skops(folder / "gbt" / "model.skops")
    with pytest.raises(ArtifactError, match=message) as exc:
        check_sklearn_structure(model, folder / "gbt" / "model.skops", 5)
    assert "gbt/model.skops" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ArtifactError, match=message):
        load_policy(folder, "gbt")


def test_crafted_linear_model_is_refused(gbt_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "evil"
    shutil.copytree(gbt_folder, folder)
    path = folder / "doubly_robust" / "model.skops"
    model = _load_skops(path)
    model.coef_ = model.coef_.astype(np.float64)
    model.coef_[2] = np.inf
    path.write_bytes(skops_bytes(model))
    _rehash(folder)
    with pytest.raises(ArtifactError, match=r"coef_ is \(5,\), not 5 finite floats"):
        load_policy(folder, "doubly_robust")


def _cli(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a child: a crash (SIGSEGV) or a hang must fail the test, not pytest."""
    return subprocess.run(
        [sys.executable, "-m", "specband", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("mode", ["oob", "cycle"])
def test_commands_give_one_error_line_for_a_crafted_tree(gbt_folder: Path, tmp_path: Path, mode: str) -> None:
    """The trial's commands: ``recommend``, ``launch --dry-run``, ``schedule`` with
    ``--models``, and ``recommend`` with the folder as an unnamed ``./specband-models``."""
    value = 10**9 if mode == "oob" else 0
    folder = _crafted(gbt_folder, tmp_path / "g", lambda m: _edit_nodes(m, _root(value)))
    commands = [
        ["recommend", "--models", str(folder), "--algo", "gbt", "-b", "16"],
        ["launch", "--models", str(folder), "--algo", "gbt", "-b", "16", "--target", "m", "--draft", "d"]
        + ["--allow-transfer", "--dry-run"],
        ["schedule", "--models", str(folder), "-a", "gbt", "-e", "sglang", "-o", str(tmp_path / "s.json")],
    ]
    for args in commands:
        result = _cli(args, tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (args, result.returncode, result.stderr[-2000:])
        assert lines[-1].startswith("error: ") and "gbt/model.skops" in lines[-1], lines
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "s.json").exists()
    cwd = tmp_path / "repo"
    shutil.copytree(folder, cwd / "specband-models")
    result = _cli(["recommend", "--algo", "gbt", "-b", "16"], cwd)
    assert result.returncode == 2 and "gbt/model.skops" in result.stderr, result.stderr[-2000:]


def test_a_crafted_tree_from_a_hub_id_is_one_error_line(gbt_folder: Path, tmp_path: Path) -> None:
    """The same folder reached as a hub id (a snapshot in the hub cache, offline)."""
    from tests.hub.conftest import add_snapshot

    folder = _crafted(gbt_folder, tmp_path / "g", lambda m: _edit_nodes(m, _root(10**9)))
    cache = tmp_path / "hf-home" / "hub"
    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    add_snapshot(cache, "evil/gbt", files)
    env = {"HF_HOME": str(cache.parent), "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    result = _cli(["recommend", "--models", "evil/gbt", "--algo", "gbt", "-b", "16"], tmp_path, env)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "gbt/model.skops: estimators_[0, 0] node 0: left child 1000000000" in line, (
        line
    )

"""The policy registry is the one list of the eight algorithms: every module, file, flag
and loading recipe agrees with it, and no other list of algorithms is left in src/."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from specband.artifacts import card, folder
from specband.contract.actions import ACTIONS
from specband.core.errors import ConfigError
from specband.policies import ALGORITHMS, EXTENDED_ALGORITHMS, REGISTRY, PolicyEntry, policy_class, policy_entry
from specband.policies.base import Policy, RidgeNpzPolicy
from specband.policies.files import SIDECAR_FILE
from specband.policies.nets import TORCH_ALGORITHMS

SRC = Path(__file__).resolve().parents[2] / "src" / "specband"

#: How the model card loads each kind of file (docs/model_card.txt, "load" column).
LOADER_OF_SUFFIX = {".pth": "torch.load(", ".npz": "np.load(", ".joblib": "joblib.load(", ".json": "json.load("}


def test_the_model_cards_eight_in_its_order() -> None:
    assert ALGORITHMS == (
        "mlp_bandit",
        "lookup_table",
        "linucb",
        "thompson_sampling",
        "gbt",
        "doubly_robust",
        "cql",
        "bcq",
    )
    assert tuple(REGISTRY) == ALGORITHMS and all(REGISTRY[n].name == n for n in ALGORITHMS)
    assert EXTENDED_ALGORITHMS == ("lookup_table",)
    assert TORCH_ALGORITHMS == ("mlp_bandit", "cql", "bcq")
    assert folder.PICKLED_ALGORITHMS == ("gbt", "doubly_robust")
    assert list(folder.ARTIFACT_FILES) == list(card.RECIPES) == list(ALGORITHMS)
    assert folder.ARTIFACT_FILES["thompson_sampling"] == "thompson_sampling/model.npz"
    with pytest.raises(TypeError):
        REGISTRY["dqn"] = REGISTRY["gbt"]  # type: ignore[index]


@pytest.mark.parametrize("name", ALGORITHMS)
def test_each_module_defines_the_entrys_policy(name: str) -> None:
    entry = REGISTRY[name]
    assert entry.module == f"specband.policies.{name}"
    cls = policy_class(name)
    assert sys.modules[entry.module].POLICY is cls and issubclass(cls, Policy)
    assert cls.name == name
    assert (cls.artifact_file, cls.needs_torch) == (entry.artifact_file, entry.needs_torch)
    # a pickle is loaded only when trusted; a .pth file (and only it) needs torch
    assert ("trust_pickle" in inspect.signature(cls.load).parameters) == entry.pickled
    assert entry.needs_torch == entry.artifact_file.endswith(".pth")
    assert entry.pickled == entry.artifact_file.endswith(".joblib")


@pytest.mark.parametrize("name", ALGORITHMS)
def test_save_writes_the_entrys_files(name: str, fitted: dict[str, Policy], tmp_path: Path) -> None:
    entry = REGISTRY[name]
    path = fitted[name].save(tmp_path)
    assert path == tmp_path / entry.path
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == sorted(f"{name}/{f}" for f in entry.files)
    assert entry.files[0] == entry.artifact_file and entry.files[-1] == SIDECAR_FILE
    suffix = {".joblib": (".skops",), ".pth": (".safetensors",)}.get(Path(entry.artifact_file).suffix, ())
    assert tuple(Path(c).suffix for c in entry.copies) == suffix


@pytest.mark.parametrize("name", ALGORITHMS)
def test_the_recipe_names_how_its_file_loads(name: str) -> None:
    entry = REGISTRY[name]
    assert card.RECIPES[name] == entry.recipe
    assert entry.recipe.startswith("`") and LOADER_OF_SUFFIX[Path(entry.artifact_file).suffix] in entry.recipe
    if entry.needs_torch:
        assert "weights_only=True" in entry.recipe
    for copy in entry.copies if entry.pickled else ():  # the pickle-free copy specband loads instead
        assert f"`{name}/{copy}`" in entry.recipe
    cls = policy_class(name)
    if issubclass(cls, RidgeNpzPolicy):
        assert entry.recipe.endswith(f": {cls.npz_keys[0]}, {cls.npz_keys[1]}, actions")


def test_an_unknown_name_is_a_config_error() -> None:
    assert policy_entry("bcq") is REGISTRY["bcq"] and isinstance(REGISTRY["bcq"], PolicyEntry)
    for bad in ("dqn", "", "LinUCB"):
        with pytest.raises(
            ConfigError, match=rf"unknown algorithm '{bad}'; expected one of: mlp_bandit, lookup_table, "
        ):
            policy_class(bad)
    with pytest.raises(ConfigError, match="unknown algorithm 'dqn'"):
        folder.validate_algorithms(["gbt", "dqn"])


def test_the_registry_imports_no_heavy_module() -> None:
    code = (
        "import sys\n"
        "from specband.policies import REGISTRY, policy_class\n"
        "policy_class('lookup_table')\n"  # imports numpy (the policy class); nothing heavier
        "assert REGISTRY['lookup_table'].module in sys.modules\n"
        "heavy = ('torch', 'sklearn', 'joblib', 'skops', 'specband.policies.nets')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    before = subprocess.run(
        [sys.executable, "-c", "import sys, specband.policies; print('numpy' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert before.stdout.strip() == "False"
    after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert after.stdout.strip() == "[]"


def _algorithm_lists(tree: ast.AST) -> list[int]:
    """Line numbers of literal tuples, lists, sets and dicts naming two or more algorithms."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        names = {i.value for i in items if isinstance(i, ast.Constant) and i.value in REGISTRY}
        if len(names) >= 2:
            lines.append(node.lineno)
    return lines


def test_no_other_list_of_algorithms_in_src() -> None:
    found = {
        path.relative_to(SRC).as_posix(): lines
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "registry.py"
        for lines in [_algorithm_lists(ast.parse(path.read_text(encoding="utf-8")))]
        if lines
    }
    assert found == {}
    # the check finds what it looks for
    assert _algorithm_lists(ast.parse('X = ("gbt", "cql")\nY = {"linucb": 1, "bcq": 2}\nZ = ("gbt",)')) == [1, 2]


@pytest.mark.parametrize("name, keys", [("linucb", ("theta", "A")), ("thompson_sampling", ("mean", "cov"))])
def test_ridge_files_keep_the_model_cards_layout(
    name: str, keys: tuple[str, str], fitted: dict[str, Policy], tmp_path: Path
) -> None:
    policy = fitted[name]
    path = policy.save(tmp_path)
    with zipfile.ZipFile(path) as zf:
        assert zf.namelist() == [f"{keys[0]}.npy", f"{keys[1]}.npy", "actions.npy"]
        assert all(
            i.compress_type == zipfile.ZIP_STORED and i.date_time == (1980, 1, 1, 0, 0, 0) for i in zf.infolist()
        )
    with np.load(path, allow_pickle=False) as npz:  # the model card's recipe
        assert npz[keys[0]].shape == (19, 4) and npz[keys[0]].dtype == np.float64
        assert npz[keys[1]].shape == (19, 4, 4) and npz[keys[1]].dtype == np.float64
        np.testing.assert_array_equal(npz["actions"], np.array(ACTIONS, dtype=np.int64))
        vector, matrix = npz[keys[0]], npz[keys[1]]
    loaded = policy_class(name).load(tmp_path)
    assert isinstance(loaded, RidgeNpzPolicy) and loaded.fitted
    np.testing.assert_array_equal(loaded.ridge_arrays()[0], vector)
    np.testing.assert_array_equal(loaded.ridge_arrays()[1], matrix)
    again = loaded.save(tmp_path / "again")
    assert again.read_bytes() == path.read_bytes()

"""No command path unpickles a file specband did not write unless the user trusts it
(issue 9 item 1): a crafted joblib file would create a marker file when unpickled."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specband.artifacts.folder import load_manifest, load_policies, load_policy
from specband.core.errors import ArtifactError
from specband.files.safeload import UntrustedPickleError, load_sklearn_model
from specband.policies.doubly_robust import DoublyRobust
from specband.policies.gbt import GBT

from .conftest import write_marker_pickle


def _one_error_line(result, path_part: str) -> None:
    assert result.exit_code == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and result.stderr.strip().splitlines()[-1] == errors[0]
    assert path_part in errors[0] and "--trust-pickle" in errors[0]


@pytest.mark.parametrize("algo", ["gbt", "doubly_robust"])
@pytest.mark.parametrize("kind", ["foreign_folder", "swapped_folder"])
def test_recommend_models_refuses(run_cli, request, marker: Path, algo: str, kind: str) -> None:
    folder = request.getfixturevalue(kind)
    result = run_cli("recommend", "--algo", algo, "--models", folder, "-b", "16")
    _one_error_line(result, f"{algo}/model.joblib")
    assert not marker.exists()


def test_recommend_automatic_folder_refuses(run_cli, swapped_folder: Path, marker: Path) -> None:
    shutil.copytree(swapped_folder, Path("specband-models"))
    result = run_cli("recommend", "--algo", "gbt", "-b", "16")
    _one_error_line(result, "specband-models/gbt/model.joblib")
    assert not marker.exists()


@pytest.mark.parametrize("auto", [False, True])
@pytest.mark.parametrize("dry_run", [True, False])
def test_launch_refuses(run_cli, swapped_folder: Path, marker: Path, auto: bool, dry_run: bool) -> None:
    args = [
        "launch",
        "--target",
        "t",
        "--draft",
        "d",
        "-b",
        "16",
        "--algo",
        "gbt",
        "--device",
        "none",
        "--server-command",
        "false",
    ]
    if auto:
        shutil.copytree(swapped_folder, Path("specband-models"))
    else:
        args += ["--models", str(swapped_folder)]
    result = run_cli(*args, *(["--dry-run"] if dry_run else []))
    _one_error_line(result, "gbt/model.joblib")
    assert not marker.exists()


def test_evaluate_never_unpickles(run_cli, foreign_folder: Path, marker: Path) -> None:
    result = run_cli("evaluate", foreign_folder / "gbt" / "model.joblib", "--algo", "gbt")
    assert result.exit_code == 2 and not marker.exists()


def test_python_api_refuses(foreign_folder: Path, swapped_folder: Path, marker: Path) -> None:
    for folder in (foreign_folder, swapped_folder):
        with pytest.raises(UntrustedPickleError, match="--trust-pickle"):
            load_policy(folder, "gbt")
        with pytest.raises(UntrustedPickleError):
            load_policies(folder, ["doubly_robust"])
        with pytest.raises(UntrustedPickleError):
            GBT.load(folder)
        with pytest.raises(UntrustedPickleError):
            DoublyRobust.load(folder)
    assert not marker.exists()


def test_trust_flag_unpickles(run_cli, foreign_folder: Path, marker: Path) -> None:
    """The crafted file really runs code when trusted: the refusals above are not vacuous."""
    result = run_cli("recommend", "--algo", "gbt", "--models", foreign_folder, "-b", "16", "--trust-pickle")
    assert marker.exists()
    assert result.exit_code == 2 and "expected a scikit-learn GradientBoostingRegressor" in result.stderr


def test_matching_sha_in_the_manifest_is_no_licence_to_unpickle(
    trained_folder: Path, tmp_path: Path, marker: Path
) -> None:
    """Whoever writes the joblib file writes its sha256 too: the manifest proves nothing."""
    import json

    from specband.artifacts.folder import file_sha256

    folder = tmp_path / "copy"
    shutil.copytree(trained_folder, folder)
    (folder / "gbt" / "model.skops").unlink()
    (folder / "gbt" / "model.joblib").unlink()
    write_marker_pickle(folder / "gbt" / "model.joblib", marker)
    manifest = json.loads((folder / "specband.json").read_text())
    manifest["files"]["gbt/model.joblib"] = file_sha256(folder / "gbt" / "model.joblib")
    manifest["files"].pop("gbt/model.skops")
    (folder / "specband.json").write_text(json.dumps(manifest))
    assert load_manifest(folder).files["gbt/model.joblib"] == file_sha256(folder / "gbt" / "model.joblib")
    with pytest.raises(UntrustedPickleError, match="--trust-pickle"):
        load_policy(folder, "gbt")
    assert not marker.exists()


def test_every_algorithm_of_a_trained_folder_loads_without_pickle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`specband train`'s folder loads whole with pickle, joblib and torch.load all disabled."""
    import pickle

    import joblib
    import numpy as np
    import torch

    from specband.cli import main
    from specband.policies import ALGORITHMS

    out = tmp_path / "all"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--out", str(out)])
    assert exc.value.code == 0

    def refuse(*args, **kwargs):
        raise AssertionError("unpickled")

    for target, name in ((pickle, "load"), (pickle, "loads"), (joblib, "load"), (torch, "load")):
        monkeypatch.setattr(target, name, refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    policies = load_policies(out)
    assert sorted(policies) == sorted(ALGORITHMS)
    state = np.array([2.0, 0.4, 0.0, 0.0])
    for policy in policies.values():
        assert np.isfinite(np.asarray(policy.scores(state), dtype=float)).any()


def test_downloaded_folder_needs_trust_even_with_matching_manifest(
    trained_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hub"
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    folder = cache / "models--org--name" / "snapshots" / "abc"
    shutil.copytree(trained_folder, folder)
    (folder / "gbt" / "model.skops").unlink()
    with pytest.raises(UntrustedPickleError, match="downloaded"):
        load_policy(folder, "gbt")
    assert load_policy(folder, "gbt", trust_pickle=True).fitted
    assert load_policy(folder, "doubly_robust").fitted  # its skops copy needs no trust


def test_skops_with_unknown_types_is_refused(tmp_path: Path) -> None:
    import numpy as np
    import skops.io
    from sklearn.neural_network import MLPRegressor

    path = tmp_path / "gbt" / "model.joblib"
    path.parent.mkdir()
    model = MLPRegressor(hidden_layer_sizes=(2,), max_iter=5).fit(np.zeros((4, 5)), np.zeros(4))
    skops.io.dump(model, path.with_suffix(".skops"))
    untrusted = skops.io.get_untrusted_types(file=path.with_suffix(".skops"))
    if not untrusted:
        pytest.skip("skops trusts every type of this model by default")
    with pytest.raises(ArtifactError, match="types specband does not load"):
        load_sklearn_model(path)


def test_version_mismatch_is_one_note(tmp_path: Path, marker: Path, monkeypatch, capsys) -> None:
    import joblib
    import numpy as np
    from sklearn.linear_model import LinearRegression

    model = LinearRegression().fit(np.eye(5), np.arange(5.0))
    monkeypatch.setattr("sklearn.base.__version__", "0.0.1")
    path = tmp_path / "doubly_robust" / "model.joblib"
    path.parent.mkdir()
    joblib.dump(model, path)
    monkeypatch.undo()
    loaded = load_sklearn_model(path, trust_pickle=True)
    assert np.allclose(loaded.predict(np.eye(5)), np.arange(5.0))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("note: ") and "written with scikit-learn 0.0.1" in err[0]


def test_version_mismatch_in_a_skops_file_is_one_note(tmp_path: Path, monkeypatch, capsys) -> None:
    import numpy as np
    from sklearn.linear_model import LinearRegression

    from specband.files.safeload import skops_bytes

    model = LinearRegression().fit(np.eye(5), np.arange(5.0))
    monkeypatch.setattr("sklearn.base.__version__", "0.0.2")
    path = tmp_path / "doubly_robust" / "model.joblib"
    path.parent.mkdir()
    path.with_suffix(".skops").write_bytes(skops_bytes(model))
    monkeypatch.undo()
    loaded = load_sklearn_model(path)  # no joblib file at all: the skops copy is read
    assert np.allclose(loaded.predict(np.eye(5)), np.arange(5.0))
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [line for line in err if line.startswith("note: ")]
    assert len(err) == 1 and "written with scikit-learn 0.0.2" in err[0]


def test_marker_pickle_writer(tmp_path: Path, marker: Path) -> None:
    """The helper's file creates the marker when unpickled by plain joblib."""
    import joblib

    path = write_marker_pickle(tmp_path / "x.joblib", marker)
    joblib.load(path).close()
    assert marker.exists()


@pytest.mark.parametrize("name", ["mlp_bandit", "cql", "bcq"])
def test_torch_policies_load_from_safetensors(name: str, tmp_path: Path) -> None:
    """The safetensors copy is what loads (the .pth is not read), and it gives the same net."""
    import numpy as np

    from specband.artifacts.fit import train_policies
    from specband.sweeps.dataset import load_sweep

    data = load_sweep(None).training_data("contract")
    policy = train_policies(data, [name], seed=0)[name]
    policy.save(tmp_path)
    pth = tmp_path / name / "policy.pth"
    assert pth.with_suffix(".safetensors").is_file()
    pth.write_bytes(b"not read")
    loaded = load_policy(tmp_path, name)
    state = np.array([2.0, 0.4, 0.0, 0.0])
    np.testing.assert_array_equal(loaded.scores(state), policy.scores(state))

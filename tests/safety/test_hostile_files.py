"""Crafted policy files give one ArtifactError naming the file, before any large
allocation (issue 16 items 1, 6, 9)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from specband.artifacts.folder import ARTIFACT_FILES, load_policy
from specband.core.errors import ArtifactError
from specband.files.safeload import (
    MAX_MODEL_ARRAY_BYTES,
    check_npz_arrays,
    check_safetensors_header,
    load_sklearn_model,
)


def _huge_npy_npz(path: Path, shape: tuple[int, ...]) -> None:
    """An .npz whose 'theta' member declares ``shape`` (float64) but holds a few bytes."""
    from numpy.lib import format as npy_format

    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
    import io

    buf = io.BytesIO()
    npy_format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("theta.npy", buf.getvalue() + b"\0" * 64)


def test_npz_declaring_a_huge_array_is_refused_before_allocation(tmp_path: Path) -> None:
    path = tmp_path / "linucb" / "model.npz"
    path.parent.mkdir()
    _huge_npy_npz(path, (19, 4, 40_000_000))  # 22.6 GiB declared, as in the issue
    with pytest.raises(ArtifactError, match="declares array 'theta'") as exc:
        check_npz_arrays(path)
    assert str(path) in str(exc.value)
    with pytest.raises(ArtifactError, match="over the 64 MiB"):
        load_policy(tmp_path, "linucb")


def _safetensors(path: Path, header: dict, data: bytes = b"") -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


@pytest.mark.parametrize(
    "header, data, message",
    [
        ({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "x/y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, "also a folder"),
        ({"w": {"dtype": "F64", "shape": [1 << 20, 1 << 10], "data_offsets": [0, 8 << 30]}}, b"", "declares tensor"),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 4, "data_offsets"),
        ({"w": {"dtype": "XX", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "not a valid safetensors entry"),
        ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, "not a valid safetensors entry"),
        ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "": {}}, b"\0" * 4, "not a valid"),
    ],
)  # fmt: skip
def test_crafted_safetensors_are_one_error(tmp_path: Path, header: dict, data: bytes, message: str) -> None:
    folder = tmp_path / "mlp_bandit"
    folder.mkdir()
    (folder / "policy.pth").write_bytes(b"unused")
    _safetensors(folder / "policy.safetensors", header, data)
    with pytest.raises(ArtifactError, match=message) as exc:
        load_policy(tmp_path, "mlp_bandit")
    assert "policy.safetensors" in str(exc.value)


def test_safetensors_header_length_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(ArtifactError, match="-byte header"):
        check_safetensors_header(path)
    path.write_bytes(b"\x01")
    with pytest.raises(ArtifactError, match="shorter than"):
        check_safetensors_header(path)
    deep = "[" * 100_000 + "]" * 100_000
    path.write_bytes(struct.pack("<Q", len(deep)) + deep.encode())
    with pytest.raises(ArtifactError, match="not a safetensors file"):
        check_safetensors_header(path)


def _skops(path: Path, model) -> None:
    from specband.files.safeload import skops_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".skops").write_bytes(skops_bytes(model))


def test_unfitted_skops_estimator_is_one_error(tmp_path: Path) -> None:
    from sklearn.ensemble import GradientBoostingRegressor

    model = GradientBoostingRegressor()
    model.n_features_in_ = 5  # claims the contract's features, has no trees
    _skops(tmp_path / "gbt" / "model.joblib", model)
    (tmp_path / "gbt" / "model.joblib").write_bytes(b"never read")
    with pytest.raises(ArtifactError, match="cannot predict") as exc:
        load_policy(tmp_path, "gbt")
    assert "gbt/model.joblib" in str(exc.value)


def test_wrong_length_coef_is_one_error(tmp_path: Path) -> None:
    from sklearn.linear_model import LinearRegression

    model = LinearRegression().fit(np.eye(5), np.arange(5.0))
    model.coef_ = np.zeros(3)
    _skops(tmp_path / "doubly_robust" / "model.joblib", model)
    (tmp_path / "doubly_robust" / "model.joblib").write_bytes(b"never read")
    with pytest.raises(ArtifactError, match=r"coef_ is \(3,\), not 5 finite floats"):
        load_policy(tmp_path, "doubly_robust")


def test_skops_zip_bomb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gbt" / "model.joblib"
    path.parent.mkdir()
    with zipfile.ZipFile(path.with_suffix(".skops"), "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("schema.json", b"{}")
        zf.writestr("big.npy", b"\0" * (MAX_MODEL_ARRAY_BYTES + 1))
    with pytest.raises(ArtifactError, match=r"declares member 'big\.npy'"):
        load_sklearn_model(path)


def test_skops_that_is_not_a_zip_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "gbt" / "model.joblib"
    path.parent.mkdir()
    path.with_suffix(".skops").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ArtifactError, match="not a readable zip file"):
        load_sklearn_model(path)


@pytest.fixture
def trained_copy(tmp_path: Path) -> Path:
    from specband.cli import main

    out = tmp_path / "models"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--algo", "lookup_table", "--algo", "linucb", "--out", str(out)])
    assert exc.value.code == 0
    return out


def test_edited_lookup_table_is_refused_naming_the_file(run_cli, trained_copy: Path) -> None:
    table_path = trained_copy / ARTIFACT_FILES["lookup_table"]
    table = json.loads(table_path.read_text())
    for entry in table.values():
        entry["config"] = [1, 1, 2]
    table_path.write_text(json.dumps(table))
    result = run_cli("recommend", "--models", trained_copy, "-b", "16")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        line for line in result.stderr.strip().splitlines() if line.startswith("error: ")
    ]
    assert "lookup_table/model.json: modified since specband wrote it" in result.stderr
    allowed = run_cli("recommend", "--models", trained_copy, "-b", "16", "--allow-modified", "--format", "json")
    assert allowed.exit_code == 0, allowed.stderr
    assert "warning: " in allowed.stderr and "lookup_table/model.json" in allowed.stderr


def test_edited_npz_is_refused(trained_copy: Path) -> None:
    path = trained_copy / ARTIFACT_FILES["linucb"]
    with np.load(path) as npz:
        arrays = {k: np.array(npz[k]) for k in npz.files}
    arrays["theta"] = arrays["theta"] + 1.0
    np.savez(path, **arrays)
    with pytest.raises(ArtifactError, match=r"linucb/model\.npz: modified since specband wrote it"):
        load_policy(trained_copy, "linucb")
    assert load_policy(trained_copy, "linucb", allow_modified=True).fitted


@pytest.mark.parametrize("alias", ["symlink", "dotdot", "slashes"])
def test_paths_are_resolved_before_the_checks(trained_copy: Path, tmp_path: Path, alias: str) -> None:
    """A symlink, a ``..`` or a ``//`` does not change what is checked: the edited file is refused."""
    path = trained_copy / ARTIFACT_FILES["linucb"]
    with np.load(path) as npz:
        arrays = {k: np.array(npz[k]) for k in npz.files}
    np.savez(path, **{**arrays, "theta": arrays["theta"] * 2})
    if alias == "symlink":
        link = tmp_path / "link"
        os.symlink(trained_copy, link)
        given = str(link)
    elif alias == "dotdot":
        (tmp_path / "sub").mkdir()
        given = str(tmp_path / "sub" / ".." / "models")
    else:
        given = "//" + str(trained_copy).lstrip("/")
    with pytest.raises(ArtifactError, match="modified since specband wrote it"):
        load_policy(given, "linucb")


def test_hub_cache_guard_resolves_symlinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specband.files.safeload import in_hub_cache

    cache = tmp_path / "hub"
    (cache / "models--a--b").mkdir(parents=True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    link = tmp_path / "innocent"
    os.symlink(cache / "models--a--b", link)
    assert in_hub_cache(link)
    assert in_hub_cache(str(tmp_path / "x" / ".." / "hub" / "models--a--b"))
    assert in_hub_cache("//" + str(cache / "models--a--b").lstrip("/"))
    assert not in_hub_cache(tmp_path)


def test_implicit_folder_is_announced_and_never_unpickled(
    run_cli, trained_folder: Path, marker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .conftest import write_marker_pickle

    shutil.copytree(trained_folder, Path("specband-models"))
    (Path("specband-models") / "gbt" / "model.skops").unlink()
    (Path("specband-models") / "gbt" / "model.joblib").unlink()
    write_marker_pickle(Path("specband-models") / "gbt" / "model.joblib", marker)
    result = run_cli("recommend", "--algo", "gbt", "-b", "16", "--trust-pickle")
    assert result.exit_code == 2 and not marker.exists()
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "picked up without --models" in line
    for args in (["schedule", "-a", "gbt", "-e", "sglang"], ["launch", "--dry-run", "--algo", "gbt"]):
        res = run_cli(*args)
        assert not marker.exists(), res.stderr
        assert res.exit_code == 2, res.stderr


def test_retraining_keeps_a_users_own_files_in_an_algorithm_folder(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "models"
    assert run_cli("train", "--algo", "linucb", "--out", out).exit_code == 0
    notes = out / "linucb" / "my-notes.txt"
    notes.write_text("mine\n")
    again = run_cli("train", "--algo", "linucb", "--out", out)
    assert again.exit_code == 2
    assert "linucb/my-notes.txt" in again.stderr and "did not write" in again.stderr
    assert notes.read_text() == "mine\n"
    notes.unlink()
    assert run_cli("train", "--algo", "linucb", "--out", out).exit_code == 0


@pytest.mark.parametrize("scale", ["1e300", "1e-300"])
def test_absurd_time_scales_are_one_line(run_cli, tmp_path: Path, scale: str) -> None:
    result = run_cli(
        "sweep", "--target", "m", "--draft", "d", "--time-scale", scale, "--device", "emulated",
        "--server-command", "false", "--out", tmp_path / "s.jsonl",
    )  # fmt: skip
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "time scale" in line
    assert not (tmp_path / "s.jsonl").exists()

"""Fixtures for safe loading: a joblib file whose unpickling creates a marker file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


class _Marker:
    """Unpickling this calls ``open(marker, "w")``: the marker file appears."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def write_marker_pickle(path: Path, marker: Path) -> Path:
    """Write a joblib file at ``path`` whose unpickling creates ``marker``."""
    import joblib

    path.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump(_Marker(marker), path)
    return path


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """Where the crafted pickle would write; it must never appear."""
    return tmp_path / "MARKER-unpickled"


@pytest.fixture(scope="session")
def trained_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder written by ``specband train --algo gbt --algo doubly_robust`` (bundled data)."""
    from specband.cli import main

    out = tmp_path_factory.mktemp("trained") / "models"
    try:
        main(["train", "--algo", "gbt", "--algo", "doubly_robust", "--out", str(out)])
    except SystemExit as exc:
        assert exc.code == 0
    return out


@pytest.fixture
def foreign_folder(tmp_path: Path, marker: Path) -> Path:
    """The issue's folder: only ``gbt/model.joblib`` and ``doubly_robust/model.joblib``, crafted."""
    folder = tmp_path / "foreign"
    for name in ("gbt", "doubly_robust"):
        write_marker_pickle(folder / name / "model.joblib", marker)
    return folder


@pytest.fixture
def swapped_folder(tmp_path: Path, trained_folder: Path, marker: Path) -> Path:
    """A specband folder whose joblib files were replaced (skops copies removed): the
    manifest's sha256 no longer matches."""
    folder = tmp_path / "swapped"
    shutil.copytree(trained_folder, folder)
    for name in ("gbt", "doubly_robust"):
        (folder / name / "model.skops").unlink()
        (folder / name / "model.joblib").unlink()
        write_marker_pickle(folder / name / "model.joblib", marker)
    return folder

"""``train --out`` through a symlink and from two processes at once (hostile trial round 3:
V11, V12): the folder a link names is written through, with no ``.NAME.old-*`` litter, and a
second ``train`` into a folder another one is writing is refused with one line, whatever the
folder's spelling."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from specband.files.pathlock import PathLock


def _algorithms(folder: Path) -> list[str]:
    return sorted(json.loads((folder / "specband.json").read_text())["algorithms"])


def _train(run_cli: Any, out: Path | str, *extra: str) -> Any:
    return run_cli("train", "--out", out, "--algo", "lookup_table", *extra)


def test_train_through_a_symlink_writes_the_folder_it_names_and_leaves_no_litter(run_cli: Any, tmp_path: Path) -> None:
    """V11: the link was replaced by a new real folder and left beside it as .l3.old-*."""
    os.chdir(tmp_path)
    assert _train(run_cli, "t3").exit_code == 0
    os.symlink("t3", "l3")
    result = _train(run_cli, "l3", "--algo", "gbt")
    assert result.exit_code == 0, result.stderr
    assert os.path.islink("l3") and os.readlink("l3") == "t3"
    assert _algorithms(Path("t3")) == ["gbt", "lookup_table"]
    assert sorted(os.listdir(tmp_path)) == ["l3", "t3"]  # no .l3.old-*, no .t3.tmp-*, no lock left


@pytest.mark.parametrize("target", ["missing", "afile"])
def test_train_through_a_symlink_to_no_folder_is_one_line(run_cli: Any, tmp_path: Path, target: str) -> None:
    os.chdir(tmp_path)
    Path("afile").write_text("precious\n")
    os.symlink(target, "link")
    result = _train(run_cli, "link")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: link: not written (a symlink to "), result.stderr
    assert os.readlink("link") == target and Path("afile").read_text() == "precious\n"
    assert sorted(os.listdir(tmp_path)) == ["afile", "link"]


@pytest.mark.parametrize("spelling", ["tm", "{cwd}/tm", "./tm/", "linked"])
def test_a_second_train_into_a_folder_being_written_is_refused(run_cli: Any, tmp_path: Path, spelling: str) -> None:
    """V12: two concurrent train --force into one folder both said 'wrote tm'; the last one won
    and the other's folder was silently gone. The first holds the folder's lock (as a train
    does while it trains and writes); the second, spelt any way, is refused before reading."""
    os.chdir(tmp_path)
    assert _train(run_cli, "tm").exit_code == 0
    os.symlink("tm", "linked")
    before = (Path("tm") / "specband.json").read_bytes()
    with PathLock(tmp_path / "tm", "being written by another specband train"):
        result = _train(run_cli, spelling.format(cwd=tmp_path), "--force", "--algo", "gbt")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    given = Path(spelling.format(cwd=tmp_path))
    assert lines == [f"error: {given} is being written by another specband train (pid {os.getpid()})"]
    assert (Path("tm") / "specband.json").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["linked", "tm"]  # the lock file went with its holder


def test_a_refused_train_into_a_new_folder_leaves_no_folder(run_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "models"
    with PathLock(tmp_path / "held", "busy"):  # another lock: this train is not refused by it
        pass
    result = run_cli("train", "/nonexistent-sweep.jsonl", "--out", out)
    assert result.exit_code == 2
    assert not (tmp_path / "new").exists()

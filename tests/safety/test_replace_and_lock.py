"""``--force`` replaces only a regular file, and one file is written by one sweep
whatever name it is given (issue 16 items 2 and 3)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from specband.core.errors import ConfigError, SpecbandError
from specband.files.fileio import check_out_path, replace_target, write_bytes_atomic, write_jsonl_atomic
from specband.harness.sweepfile import RowWriter
from specband.harness.sweeplock import SweepBusyError, SweepLock


def _make(kind: str, folder: Path, outside: Path) -> Path:
    path = folder / "out.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "dir":
        path.mkdir()
    elif kind == "symlink_out":
        outside.write_text("precious\n")
        os.symlink(outside, path)
    elif kind == "symlink_dangling":
        os.symlink(folder / "missing", path)
    return path


KINDS = ["fifo", "socket", "dir", "symlink_out", "symlink_dangling"]


def _snapshot(path: Path) -> tuple[int, int]:
    info = os.lstat(path)
    return info.st_mode, info.st_ino


@pytest.mark.parametrize("kind", KINDS)
def test_checked_replace_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    outside = tmp_path / "elsewhere.txt"
    path = _make(kind, folder, outside)
    before = _snapshot(path)
    with pytest.raises(SpecbandError, match="not replaced"):
        write_bytes_atomic(path, b"new\n")
    with pytest.raises(SpecbandError, match="not replaced"):
        write_jsonl_atomic(path, [{"a": 1}])
    with pytest.raises(ConfigError, match=r"not replaced|is a folder"):
        check_out_path(path, overwrite=True)
    assert _snapshot(path) == before
    assert sorted(p.name for p in folder.iterdir()) == ["out.jsonl"]  # no temporary file left
    if kind == "symlink_out":
        assert outside.read_text() == "precious\n"


def test_a_symlink_to_a_file_in_its_own_folder_replaces_that_file(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    os.symlink("real.json", link)
    assert replace_target(link) == real
    write_bytes_atomic(link, b"new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_regular_file_is_still_replaced(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("old")
    check_out_path(path, overwrite=True)
    write_bytes_atomic(path, b"new")
    assert path.read_text() == "new" and stat.S_ISREG(os.lstat(path).st_mode)


def test_schedule_force_onto_a_fifo_is_one_error_line(run_cli, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    result = run_cli("schedule", "-e", "sglang", "-o", fifo, "--force")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "not a regular file" in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_sweep_rows_are_never_appended_to_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(SpecbandError, match="not a regular file"):
        RowWriter(fifo)  # would block forever on open if it tried


@pytest.mark.parametrize("alias", ["symlink", "dotdot", "hardlink"])
def test_the_lock_goes_by_the_file_not_its_name(tmp_path: Path, alias: str) -> None:
    out = tmp_path / "runs" / "sweep.jsonl"
    out.parent.mkdir()
    out.write_text("")
    if alias == "symlink":
        other = tmp_path / "alias.jsonl"
        os.symlink(out, other)
    elif alias == "dotdot":
        (tmp_path / "x").mkdir()
        other = tmp_path / "x" / ".." / "runs" / "sweep.jsonl"
    else:
        other = tmp_path / "hard.jsonl"
        os.link(out, other)
    with SweepLock(out), pytest.raises(SweepBusyError, match="another sweep"):
        SweepLock(other).acquire()
    with SweepLock(other):  # released: the alias may take it now
        pass
    assert not (tmp_path / "runs" / "sweep.jsonl.lock").exists()


def test_the_lock_of_a_new_file_covers_its_symlinked_folder(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "alias")
    with SweepLock(real / "new.jsonl"), pytest.raises(SweepBusyError):
        SweepLock(tmp_path / "alias" / "new.jsonl").acquire()


@pytest.mark.parametrize("alias", ["symlink", "dotdot", "hardlink"])
def test_an_alias_made_after_a_fresh_sweep_locked_is_refused(tmp_path: Path, alias: str) -> None:
    """The trial's F14: sweep A locked ``same.jsonl`` before the file existed, then
    ``ln same.jsonl hard.jsonl``; B on ``hard.jsonl`` appended to the same file."""
    out = tmp_path / "runs" / "same.jsonl"
    with SweepLock(out) as lock:
        assert out.is_file() and out.stat().st_size == 0  # created when the lock was taken
        if alias == "hardlink":
            other = tmp_path / "hard.jsonl"
            os.link(out, other)
        elif alias == "symlink":
            other = tmp_path / "sym.jsonl"
            os.symlink(out, other)
        else:
            (tmp_path / "x").mkdir()
            other = tmp_path / "x" / ".." / "runs" / "same.jsonl"
        with pytest.raises(SweepBusyError, match="another sweep"):
            SweepLock(other).acquire()
        out.write_text('{"index": 0}\n')
        # the sweep replaces its file (a killed sweep's partial line dropped): a new inode
        tmp = out.with_name("tmp")
        tmp.write_text('{"index": 0}\n')
        os.replace(tmp, out)
        lock.relock_output()
        late = tmp_path / "late.jsonl"
        os.link(out, late)
        with pytest.raises(SweepBusyError, match="the same file under another name"):
            SweepLock(late).acquire()
    assert out.read_text() == '{"index": 0}\n'  # a file with rows is kept
    assert not (tmp_path / "runs" / "same.jsonl.lock").exists()


def test_a_refused_fresh_sweep_leaves_no_empty_output(tmp_path: Path) -> None:
    out = tmp_path / "new.jsonl"
    with SweepLock(out):
        assert out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_disk_that_fills_mid_sweep_is_one_error(tmp_path: Path) -> None:
    import errno

    class FullDisk:
        """A file whose writes reach a full disk: every flush and close fails."""

        def __init__(self, fh) -> None:
            self.fh = fh

        def write(self, text: str) -> int:
            return len(text)

        def flush(self) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def fileno(self) -> int:
            return self.fh.fileno()

        def close(self) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    out = tmp_path / "rows.jsonl"
    out.write_text('{"index": 0}\n')
    with (
        pytest.raises(SpecbandError, match=r"cannot write a row \(No space left on device\)"),
        RowWriter(out) as writer,
    ):
        writer._fh = FullDisk(writer._fh)
        writer.append({"index": 1})  # __exit__ closes without a second error
    assert out.read_text() == '{"index": 0}\n'

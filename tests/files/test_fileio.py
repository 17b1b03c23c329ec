"""specband.files.fileio: all-or-nothing writes (temp file in the folder, fsync, os.replace)."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path

import pytest

from specband.core.errors import ArtifactError, ConfigError, DeviceError, SpecbandError
from specband.files import fileio
from specband.files.fileio import write_bytes_atomic, write_jsonl_atomic, write_text_atomic


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_writes_and_replaces_leaving_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    assert write_bytes_atomic(target, b"\x00first") == target
    assert target.read_bytes() == b"\x00first"
    written = write_bytes_atomic(str(target), b"second")
    assert isinstance(written, Path) and target.read_bytes() == b"second"
    assert write_text_atomic(tmp_path / "t.txt", "héllo\nworld\n").read_bytes() == "héllo\nworld\n".encode()
    rows = ({"i": i, "x": i / 2} for i in range(3))  # a generator is streamed
    out = write_jsonl_atomic(tmp_path / "r.jsonl", rows)
    assert out.read_text(encoding="utf-8") == '{"i": 0, "x": 0.0}\n{"i": 1, "x": 0.5}\n{"i": 2, "x": 1.0}\n'
    assert write_jsonl_atomic(tmp_path / "empty.jsonl", []).read_bytes() == b""
    assert _leftovers(tmp_path) == []


def test_relative_path_in_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_text_atomic("plain.txt", "x")
    assert (tmp_path / "plain.txt").read_text() == "x" and _leftovers(tmp_path) == []


def test_mode_is_what_open_gives_under_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_bytes_atomic(tmp_path / "atomic", b"x")
        with open(tmp_path / "plain", "wb") as fh:
            fh.write(b"x")
    finally:
        os.umask(old)
    atomic_mode = stat.S_IMODE((tmp_path / "atomic").stat().st_mode)
    assert atomic_mode == 0o640
    assert atomic_mode == stat.S_IMODE((tmp_path / "plain").stat().st_mode)


def test_missing_folder_is_the_callers_error_class_with_a_one_line_message(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "x.json"
    with pytest.raises(ConfigError) as info:
        write_text_atomic(target, "{}", error=ConfigError)
    assert str(info.value) == f"{target}: cannot write (No such file or directory)"
    assert "\n" not in str(info.value)
    assert not (tmp_path / "no").exists()
    with pytest.raises(SpecbandError, match="cannot write"):  # default class
        write_bytes_atomic(target, b"")
    assert write_bytes_atomic(target, b"ok", make_parents=True).read_bytes() == b"ok"
    assert _leftovers(target.parent) == []


def test_a_parent_that_is_a_file_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("keep")
    with pytest.raises(ArtifactError, match=r"file/x: cannot write \(File exists\)"):
        write_bytes_atomic(tmp_path / "file" / "x", b"", error=ArtifactError, make_parents=True)
    assert (tmp_path / "file").read_text() == "keep"


def test_a_failed_rename_keeps_the_target_and_removes_the_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "adir"
    (target / "inner").mkdir(parents=True)
    with pytest.raises(DeviceError, match=r"adir: not replaced \(a folder"):
        write_bytes_atomic(target, b"x", error=DeviceError)
    assert (target / "inner").is_dir()
    assert _leftovers(tmp_path) == []


def test_a_write_failure_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio.os, "fsync", disk_full)
    with pytest.raises(ConfigError) as info:
        write_text_atomic(target, "new", error=ConfigError)
    assert str(info.value) == f"{target}: cannot write (No space left on device)"
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []
    # without fsync the (monkeypatched) fsync is never called and the write succeeds
    write_text_atomic(target, "new", error=ConfigError, fsync=False)
    assert target.read_text() == "new"


def test_fsync_is_called_on_the_temp_file_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f"
    seen: list[tuple[bool, list[str]]] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        seen.append((target.exists(), _leftovers(tmp_path)))
        real_fsync(fd)

    monkeypatch.setattr(fileio.os, "fsync", spy)
    write_bytes_atomic(target, b"x")
    assert len(seen) == 1
    exists_then, temps = seen[0]
    assert not exists_then and len(temps) == 1 and temps[0].startswith(".f.") and temps[0].endswith(".tmp")
    assert target.read_bytes() == b"x" and _leftovers(tmp_path) == []


def test_a_bad_row_or_an_interrupt_mid_stream_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "rows.jsonl"
    target.write_text("old\n")
    with pytest.raises(ConfigError) as info:
        write_jsonl_atomic(target, [{"a": 1}, {"a": math.nan}], error=ConfigError)
    assert str(info.value).startswith(f"{target}: row 2: cannot write JSON (")
    with pytest.raises(ArtifactError, match="row 1: cannot write JSON"):
        write_jsonl_atomic(target, [{"a": object()}], error=ArtifactError)

    def interrupted():
        yield {"a": 1}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_jsonl_atomic(target, interrupted())
    assert target.read_text() == "old\n"
    assert _leftovers(tmp_path) == []


def test_check_sees_the_complete_temp_file_and_can_veto(tmp_path: Path) -> None:
    target = tmp_path / "rows.jsonl"
    target.write_text("old\n")
    seen: list[tuple[str, str]] = []

    def accept(tmp: Path) -> None:
        seen.append((tmp.name, tmp.read_text()))

    write_jsonl_atomic(target, [{"a": 1}], check=accept)
    assert seen[0][0].startswith(".rows.jsonl.") and seen[0][1] == '{"a": 1}\n'
    assert target.read_text() == '{"a": 1}\n'

    class Veto(Exception):
        pass

    def veto(tmp: Path) -> None:
        raise Veto(json.loads(tmp.read_text())["a"])

    with pytest.raises(Veto) as info:  # propagates unchanged, not mapped to the error class
        write_jsonl_atomic(target, [{"a": 2}], error=ConfigError, check=veto)
    assert info.value.args == (2,)
    assert target.read_text() == '{"a": 1}\n'
    assert _leftovers(tmp_path) == []


def test_policy_file_wrappers_keep_artifact_error(tmp_path: Path) -> None:
    from specband.policies.files import write_bytes_atomic as policy_write_bytes
    from specband.policies.files import write_json_atomic

    path = write_json_atomic(tmp_path / "deep" / "x.json", {"b": 1, "a": [1.5]})
    assert path.read_text() == '{\n  "b": 1,\n  "a": [\n    1.5\n  ]\n}\n'
    (tmp_path / "file").write_text("")
    with pytest.raises(ArtifactError, match=r"file/y.pt: cannot write \(File exists\)"):
        policy_write_bytes(tmp_path / "file" / "y.pt", b"")
    with pytest.raises(ArtifactError, match="cannot write JSON"):
        write_json_atomic(tmp_path / "nan.json", {"x": math.inf})
    assert not (tmp_path / "nan.json").exists()


@pytest.mark.parametrize("name", ["", "  ", ".", "..", "sub/.."])
def test_a_path_that_is_no_file_name_is_the_callers_error(tmp_path, monkeypatch, name: str) -> None:
    from specband.core.errors import ConfigError
    from specband.files.fileio import write_text_atomic

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="not a file name"):
        write_text_atomic(name, "x", error=ConfigError)
    assert list(tmp_path.iterdir()) == []


def test_a_parent_that_is_a_file_is_named(tmp_path) -> None:
    from specband.core.errors import ConfigError
    from specband.files.fileio import write_text_atomic

    (tmp_path / "somefile").write_text("keep")
    with pytest.raises(ConfigError, match=r"somefile/o.jsonl: cannot write \(.*somefile is not a folder\)"):
        write_text_atomic(tmp_path / "somefile" / "o.jsonl", "x", error=ConfigError)
    assert (tmp_path / "somefile").read_text() == "keep"

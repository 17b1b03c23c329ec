"""Every file a user names is read through the one bounded reader
(:func:`specband.files.fileio.read_bytes_bounded`): a device or FIFO is refused before it is
opened (no read of ``/dev/zero``, no hang on a FIFO), a file over its kind's bound before
a byte is read; one ``error:`` line, exit 2, nothing written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from specband.core.errors import ConfigError, DataError
from specband.files.fileio import read_bytes_bounded, read_text_bounded

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero and mkfifo")


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def test_the_reader_refuses_a_device_a_fifo_and_a_file_over_the_bound(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"^/dev/zero: not a regular file \(a device, FIFO or socket\); give a X$"):
        read_bytes_bounded("/dev/zero", limit=10, kind="X", error=ConfigError)
    with pytest.raises(ConfigError, match=f"^{fifo}: not a regular file"):
        read_bytes_bounded(fifo, limit=10, kind="X", error=ConfigError)  # would block if opened
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    with pytest.raises(ConfigError, match=rf"^{big}: too large \(11 bytes; a X may have at most 10 bytes\)$"):
        read_bytes_bounded(big, limit=10, kind="X", error=ConfigError)
    with pytest.raises(DataError, match=rf"^{big}: too large"):  # a DataError names the path as its field
        read_bytes_bounded(big, limit=10, kind="X", error=DataError)
    assert read_text_bounded(big, limit=11, kind="X") == "x" * 11
    with pytest.raises(FileNotFoundError):
        read_bytes_bounded(tmp_path / "missing", limit=10, kind="X")
    with pytest.raises(IsADirectoryError):
        read_bytes_bounded(tmp_path, limit=10, kind="X")


NO_SGLANG = ("--server-command", "/bin/sh -c true")


def _cases(bad: str) -> list[tuple[str, ...]]:
    return [
        ("recommend", "--batch-mix-from", bad),
        ("simulate", "--target-config", bad, "--out", "{out}"),
        ("simulate", "--profile", bad, "--out", "{out}"),
        ("import-bench", bad, "--out", "{out}"),
        # sglang not found in /bin/sh: its warning must not come before the error
        ("sweep", "--target", "m", "--draft", "d", "--prompts", bad, "--out", "{out}", "--dry-run", *NO_SGLANG),
        ("launch", "--target", "m", "--draft", "d", "--schedule", bad, "--dry-run", "--device", "none", *NO_SGLANG),
    ]


@pytest.mark.parametrize("index", range(6))
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_device_or_fifo_given_as_a_file_is_one_error_line(
    run_cli: Any, tmp_path: Path, index: int, kind: str
) -> None:
    bad = "/dev/zero"
    if kind == "fifo":
        bad = str(tmp_path / "fifo")
        os.mkfifo(bad)
    out = tmp_path / "out"
    args = [a.replace("{out}", str(out)) for a in _cases(bad)[index]]
    res = run_cli(*args)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert f"{bad}: not a regular file (a device, FIFO or socket)" in _one_error_line(res.stderr)
    assert not out.exists()


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_doctor_reports_a_device_or_fifo_target_as_an_error_check(run_cli: Any, tmp_path: Path, kind: str) -> None:
    bad = "/dev/zero"
    if kind == "fifo":
        bad = str(tmp_path / "fifo")
        os.mkfifo(bad)
    res = run_cli("doctor", "--target", bad, "--draft", bad)
    assert res.exit_code == 2
    assert (
        f"target-config: {bad}: not a regular file (a device, FIFO or socket); give a model config file" in res.stdout
    )


def test_a_profile_over_its_bound_is_refused_before_reading(run_cli: Any, tmp_path: Path) -> None:
    from specband.core.limits import MAX_CONFIG_FILE_BYTES

    huge = tmp_path / "huge.toml"
    with huge.open("wb") as fh:
        fh.truncate(MAX_CONFIG_FILE_BYTES + 1)  # sparse: no disk used
    res = run_cli("simulate", "--profile", huge, "--out", tmp_path / "out")
    assert res.exit_code == 2
    assert _one_error_line(res.stderr) == (
        f"error: {huge}: too large ({MAX_CONFIG_FILE_BYTES + 1} bytes; a profile file may have at most 64 MiB)"
    )

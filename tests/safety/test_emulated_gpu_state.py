"""The emulated GPU's state file as a sweep option (hostile trial round 3: E06, N52): a folder
is refused by the dry run as by the run (bad input, exit 2, not the GPU's 4), and two sweeps
never measure on one emulated GPU at once (the second measured with the first's server
resident: its memory reading held the other's 5.7 GB)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from specband.files.pathlock import PathLock

ONE_RUN = ("--batch-sizes", "1", "--actions", "0", "--repeats", "1")


def _one_error_line(result: Any) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
@pytest.mark.parametrize("state", [".", "afolder", "fifo"])
def test_a_state_path_that_is_no_file_is_refused_by_the_dry_run_too(
    run_cli: Any, sweep_args: list[str], tmp_path: Path, dry_run: tuple[str, ...], state: str
) -> None:
    """E06: the dry run exited 0 and the run failed with 'Is a directory', exit 4."""
    os.chdir(tmp_path)
    Path("afolder").mkdir()
    os.mkfifo("fifo")
    out = tmp_path / "es.jsonl"
    result = run_cli(*sweep_args, *ONE_RUN, "--emulator-state", state, "--out", out, *dry_run)
    assert result.exit_code == 2
    assert f"--emulator-state {state}: is " in _one_error_line(result)
    assert not out.exists() and not Path(str(out) + ".lock").exists()


def test_a_second_sweep_on_an_emulated_gpu_in_use_is_refused(
    run_cli: Any, sweep_args: list[str], tmp_path: Path
) -> None:
    """N52: two sweeps sharing --emulator-state both ran. The first holds the state file's lock
    for its whole run (as a sweep's device does while open); the second stops before it
    launches anything, and writes nothing."""
    state = tmp_path / "shared.json"
    out = tmp_path / "b.jsonl"
    with PathLock(state, "the emulated GPU of another running sweep"):
        result = run_cli(*sweep_args, *ONE_RUN, "--emulator-state", state, "--out", out)
    assert result.exit_code == 2
    assert _one_error_line(result) == (
        f"error: {state} is the emulated GPU of another running sweep (pid {os.getpid()})"
    )
    assert not out.exists() and not Path(str(out) + ".lock").exists() and not state.exists()


def test_the_sweep_releases_the_emulated_gpu_when_done(tmp_path: Path) -> None:
    from specband.emulator.spec import EmulatedGpuSpec

    spec = EmulatedGpuSpec(tmp_path / "gpu.json", "rtx4060-laptop")
    device = spec.open()
    from specband.files.pathlock import PathBusyError

    with pytest.raises(PathBusyError):
        spec.open()
    device.close()
    spec.open().close()  # free again; the lock file went with it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.json"]

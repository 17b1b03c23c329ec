"""Issue 30 item 7: `train` and `simulate` show progress on stderr when they run longer than a
second on a terminal, and nothing on a pipe."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from specband.cli.progress import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nothing_before_the_delay_nor_on_a_pipe() -> None:
    quick, pipe = _Terminal(), io.StringIO()
    with progress("quick", stream=quick, delay_s=1.0) as step:
        step("still quick")
    with progress("long", stream=pipe, delay_s=0.0) as step:
        time.sleep(0.3)
        step("longer")
    assert quick.getvalue() == "" and pipe.getvalue() == ""


def test_a_terminal_sees_the_step_and_the_time_after_the_delay() -> None:
    tty = _Terminal()
    with progress("reading", stream=tty, delay_s=0.1) as step:
        time.sleep(0.4)
        step("2/3 fitted (gbt)")
        time.sleep(0.4)
    shown = tty.getvalue()
    assert "reading" in shown and "2/3 fitted (gbt)" in shown and "0:00:00" in shown


def _in_a_terminal(code: str, cwd: Path) -> tuple[str, str, int]:
    """Run ``python -c code`` with stderr on a pseudo-terminal and stdout on a pipe."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, cwd=cwd, env=env
    )
    # the slave end stays open here until the child has exited and everything it wrote is read:
    # closed early, the terminal hangs up when the child exits and Linux may drop what it had not
    # yet handed over (a read then fails with EIO)
    seen = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        exited = proc.poll() is not None
        ready, _, _ = select.select([master], [], [], 0.0 if exited else 0.2)
        if ready:
            seen.append(os.read(master, 65536))
        elif exited:
            break
    out = proc.stdout.read().decode() if proc.stdout else ""
    code_ = proc.wait(timeout=60)
    os.close(slave)
    os.close(master)
    return b"".join(seen).decode(errors="replace"), out, code_


def test_train_and_simulate_show_progress_on_a_terminal_only(tmp_path: Path) -> None:
    """The real commands with stderr on a pseudo-terminal (the delay set to 0 s in the process,
    so that a fast machine shows it too): the spinner names the step; stdout, a pipe, holds the
    command's output alone. On a pipe (the same commands through subprocess) nothing is drawn."""
    run = (
        "import sys; import specband.cli.progress as p; p.DELAY_S = 0.0\n"
        "from specband.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    raise SystemExit(e.code)\n"
    )
    train = run.replace(
        "sys.argv[1:]", "['train', '--algo', 'lookup_table', '--algo', 'linucb', '--algo', 'gbt', '--out', 'm']"
    )
    err, out, code = _in_a_terminal(train, tmp_path)
    assert code == 0, err
    assert "specband train: " in err and "fitted (" in err and "\x1b[" in err
    assert out.startswith("trained 3 algorithm(s)") and "\x1b[" not in out and "specband train:" not in out
    # a refit to the published rows takes seconds; the sweep itself (76 rows) ends in hundredths
    simulate = run.replace("sys.argv[1:]", "['simulate', '--calibration-report', '--refit']")
    err, out, code = _in_a_terminal(simulate, tmp_path)
    assert code == 0, err
    assert "specband simulate: refitting rtx4060-laptop to the published rows" in err
    assert "\x1b[" not in out and "specband simulate:" not in out and out.strip()
    piped = subprocess.run([sys.executable, "-m", "specband", "train", "--algo", "lookup_table", "--out", "m2"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert piped.returncode == 0 and "specband train:" not in piped.stderr and "\x1b[" not in piped.stderr

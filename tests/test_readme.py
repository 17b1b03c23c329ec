"""The README's commands run as shown (issue 22): the quickstart's console blocks print what
the README pastes (same lines, same flags; the interpreter path and the sglang line
normalised), and its other commands that can run on a CPU (the emulated loop, `doctor`,
`sweep --dry-run`) run and print output of the documented shape."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.servers import free_port

README = Path(__file__).resolve().parents[1] / "README.md"
#: issue 22: the README is the front door, the reference lives in docs/
MAX_README_LINES = 250
#: notes whose wording after their first words depends on the machine (NVML) or the network
MACHINE_NOTES = ("note: NVML is not available", "note: RoPE check of the target and draft skipped")


def _blocks(kind: str) -> list[list[str]]:
    """The README's fenced blocks of ``kind`` (```kind ... ```), each as its lines."""
    blocks, current = [], None
    for line in README.read_text(encoding="utf-8").splitlines():
        if current is None and line.strip() == f"```{kind}":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def _commands(block: list[str]) -> list[str]:
    """The shell commands of a bash block: continuation lines joined, comments dropped."""
    joined, pending = [], ""
    for line in block:
        line = re.sub(r"\s+#\s.*$", "", line).rstrip() if not line.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        if pending or line:
            joined.append(pending + line)
        pending = ""
    return [c.strip() for c in joined if c.strip()]


def _run(
    command: str, cwd: Path, variables: dict[str, str] | None = None, *, merged: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run a README command (``merged``: stderr into stdout, unbuffered, in the order written, as a
    terminal shows them)."""
    for name, value in (variables or {}).items():
        command = command.replace(f"${name}", value)
    args = shlex.split(command)
    assert args[0] == "specband", command
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1", COLUMNS="200", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "specband", *args[1:]],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
        timeout=900,
        check=False,
    )


#: the warning of a launch whose --server-command interpreter has no sglang
SGLANG_NOT_FOUND = "warning: cannot find sglang in --server-command's interpreter; spelling flags for sglang "


def _normalised(line: str) -> str:
    """A printed line with what differs between machines replaced: the interpreter path of the
    server command and the sglang release line."""
    if line.startswith("# sglang "):
        return "# sglang X.Y.Z (...)" if re.match(r"^# sglang \d+\.\d+\.\d+ \(.+\)$", line) else line
    return re.sub(r"(^|\s)\S*/python3?(\.\d+)?(?=\s)", r"\1PYTHON", line)


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, len(lines)


def _console_examples() -> list[tuple[str, list[str]]]:
    examples = []
    for block in _blocks("console"):
        command, output = None, []
        for line in [*block, "$ "]:
            if line.startswith("$ "):
                if command:
                    examples.append((command, output))
                command, output = line[2:].strip(), []
            else:
                output.append(line)
    return examples


def test_readme_console_blocks_are_real_output(tmp_path: Path) -> None:
    """`specband recommend` (the embedded study policy; a first guess for an H100 over a list of
    batch sizes) and `specband launch --dry-run ...` print the README's lines as a terminal shows
    them (stdout and stderr in the order written): the table, the notes and the commands."""
    examples = _console_examples()
    assert [c.split()[1] for c, _ in examples] == ["recommend", "recommend", "launch"], examples
    for command, shown in examples:
        result = _run(command, tmp_path, merged=True)  # a folder without ./specband-models: the embedded policy
        assert result.returncode == 0, result.stdout
        # printed only where sglang is not installed beside specband (the README says so): the
        # pasted block is from an environment with sglang, as CI's
        printed = [line for line in result.stdout.splitlines() if not line.startswith(SGLANG_NOT_FOUND)]
        assert len(printed) == len(shown), (command, result.stdout)
        for got, pasted in zip(printed, shown, strict=True):
            # the NVML note names this machine's NVML state, the RoPE note how the hub answered
            # (offline here); every other line is the README's, word for word
            if got.startswith(MACHINE_NOTES):
                assert got.split()[:5] == pasted.split()[:5], (got, pasted)
            else:
                assert _normalised(got) == _normalised(pasted), (got, pasted)


def _bash_block(marker: str) -> list[str]:
    found = [b for b in _blocks("bash") if any(marker in line for line in b)]
    assert len(found) == 1, marker
    return _commands(found[0])


def test_readme_emulated_loop_runs(tmp_path: Path) -> None:
    """The CPU loop against the emulator: sweep (6 runs), train, evaluate, recommend."""
    commands = _bash_block("specband emulate")
    assert [c.split()[1] for c in commands] == ["sweep", "train", "evaluate", "recommend"], commands
    # the README's sweep serves on sglang's default port (30000); the test gives it a free one,
    # so that another server on this machine (another test, a CI job) cannot take it
    commands[0] += f" --port {free_port()}"
    sweep, train, evaluate, recommend = (_run(c, tmp_path) for c in commands)
    assert sweep.returncode == 0, sweep.stderr
    rows = [json.loads(line) for line in (tmp_path / "emulated.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert {r["provenance"] for r in rows} == {"emulated"}
    assert sorted({r["batch_size"] for r in rows}) == [1, 16]
    assert train.returncode == 0, train.stderr
    assert (tmp_path / "emulated-models" / "lookup_table" / "model.json").is_file()
    assert "lookup_table" in train.stdout
    assert evaluate.returncode == 0, evaluate.stderr
    assert "in-sample" in evaluate.stdout
    assert recommend.returncode == 0, recommend.stderr
    # the draft note names the folder's own draft (the sweep's --draft d), not the study's
    assert "pass --draft-model PATH to include it (the figures are of d)" in recommend.stderr
    # the emulated RTX 4060 Laptop's pick at bs 16: one of the two speculative configs measured
    (flags,) = recommend.stdout.strip().splitlines()
    assert re.fullmatch(
        r"--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk (4|2) "
        r"--speculative-num-draft-tokens (8|4)",
        flags,
    ), flags


def test_readme_gpu_box_commands_that_run_on_a_cpu(tmp_path: Path) -> None:
    """The GPU quickstart's `doctor` (one line per check) and `sweep --dry-run` (the sglang
    line, then one server line per run of the 228-run grid), offline on this CPU."""
    commands = _bash_block("sglang==")
    variables = dict(part.split("=", 1) for c in commands for part in shlex.split(c) if re.fullmatch(r"[TD]=\S+", part))
    assert variables == {"T": "unsloth/Llama-3.2-1B-Instruct", "D": "./draft"}
    # the draft as the README has the user fix it: the published head with the target's RoPE
    models = Path(__file__).resolve().parents[1] / "src" / "specband" / "data" / "models"
    draft = json.loads((models / "eagle3-llama-3.2-1b-instruct.json").read_text())
    target = json.loads((models / "llama-3.2-1b-instruct.json").read_text())
    draft.update(rope_theta=target["rope_theta"], rope_scaling=target["rope_scaling"])
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(json.dumps(draft))
    doctor = [c for c in commands if c.startswith("specband doctor")]
    dry_run = [c for c in commands if c.startswith("specband sweep") and "--dry-run" in c]
    assert len(doctor) == 1 and len(dry_run) == 1
    result = _run(doctor[0], tmp_path, variables)
    lines = result.stdout.splitlines()
    assert lines and all(re.match(r"^(ok|warn|error) +[a-z-]+: ", line) for line in lines), result.stdout
    checks = {line.split()[1]: line.split()[0] for line in lines}
    # offline, the hub target is not cached: an error of the hub (5), unless an error of bad input
    # (2: sglang missing from this interpreter, as without CI's conformance install) comes first
    assert checks["target-config:"] == "error", result.stdout
    assert result.returncode == (2 if checks["sglang:"] == "error" else 5), result.stdout
    # the target comes from the hub (offline here: not cached), the fixed draft from its folder
    assert not any(line.split()[1] == "draft-config:" for line in lines), result.stdout
    result = _run(dry_run[0], tmp_path, variables)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# sglang ")
    assert len(lines) == 1 + 228
    assert all("sglang.launch_server --model-path unsloth/Llama-3.2-1B-Instruct" in line for line in lines[1:])
    assert [p.name for p in tmp_path.iterdir()] == ["draft"]  # a dry run writes nothing


def test_readme_test_section_is_two_commands_that_ci_runs_as_they_are() -> None:
    """The README's test section is one set-up command and one test command (issue 30), and
    `.ci/run` runs both as they are, with no `specband train` before them (no test reads a
    ./specband-models another command left behind)."""
    section = README.read_text(encoding="utf-8").split("\n## Test\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, blocks
    setup, test = _commands(blocks[0].splitlines())
    assert setup == 'pip install -e ".[torch,test]"' and test == "python -m pytest -q"
    ci = [line.strip() for line in (README.parent / ".ci" / "run").read_text().splitlines()]
    assert setup in ci and test in ci
    assert ci.index(setup) < ci.index(test)
    assert not any(line.startswith("specband ") for line in ci), "CI runs no specband command before the tests"

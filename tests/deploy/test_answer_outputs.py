"""What ``recommend``, ``schedule`` and ``launch --dry-run`` print (stdout, stderr, exit code)
for every kind of answer (a pick, a first guess, a power limit from a sweep or a folder, a
batch-size mix, a schedule, a launch) stays what it was: ``answer_outputs.json`` holds the
outputs the code printed before the answer types became one family (captured at commit
ed923b7, before the change); ``--format json`` is each answer's ``to_json()``. The two
first-guess scenarios were captured again for issue 29, which changed them on purpose: the
first note names the acceptance used, the calibration quoted is that of the profile and pair
simulated, the pick's speed carries its interval, and one bundled config brings its own
bundled pair (the 8B target with its 8B head, no longer the 1B laptop head).

Every input is built here, deterministically (simulated rows with the simulator's fixed
seed, ``specband train`` with seed 0), in one folder shared by the module; the user's GPU
is never read (no NVML is assumed, as on the CPU machines the suite runs on).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from tests.devices import conftest as devices_conftest

from specband.sim import build_model, simulate_power_limits, simulate_sweep
from specband.sweeps.dataset import bundled_data_path

fake_gpu = devices_conftest.fake_gpu  # the patched-NVML fixture of the device tests

GOLDEN = Path(__file__).with_name("answer_outputs.json")

_H100_8B = {"target_config": "llama-3.1-8b-instruct", "draft_config": "eagle3-llama-3.1-8b-instruct"}
_LAUNCH = ("launch", "--target", "m", "--draft", "d", "--sglang-version", "0.5.23", "--dry-run", "--log", "s.log")

#: name -> (argv, needs the patched NVML GPU, working folder under the module's folder).
SCENARIOS: dict[str, tuple[tuple[str, ...], bool, str]] = {
    "pick": (("recommend", "-b", "16"), False, "."),
    "pick-json": (("recommend", "-b", "16", "--format", "json"), False, "."),
    "pick-folder-unmeasured-json": (
        ("recommend", "-b", "12", "--models", "pub-models", "-f", "json", "--draft-model", "d", "--allow-transfer"),
        False,
        ".",
    ),
    "pick-folder-policy": (("recommend", "-b", "16", "--models", "pub-models", "--algo", "linucb"), False, "."),
    "pick-folder-state-json": (
        ("recommend", "-b", "4", "--models", "pub-models", "--state", "50", "1000", "0", "--format", "json"),
        False,
        ".",
    ),
    "pick-implicit-folder": (("recommend", "-b", "16"), False, "implicit"),
    "pick-simulated-folder-json": (("recommend", "-b", "16", "--models", "sim-models", "--format", "json"), False, "."),
    "pick-transfer-refused": (("recommend", "-b", "4", "--gpu", "a100-sxm4-80gb"), False, "."),
    "pick-transfer-taken-json": (
        ("recommend", "-b", "4", "--gpu", "a100-sxm4-80gb", "--allow-transfer", "--format", "json"),
        False,
        ".",
    ),
    "pick-data-one-limit": (("recommend", "-b", "16", "--data", "pub.jsonl"), False, "."),
    "first-guess": (
        ("recommend", "-b", "4", "--gpu", "h100-sxm", "--target-config", "llama-3.1-8b-instruct"),
        False,
        ".",
    ),
    "first-guess-json": (
        (
            "recommend",
            "-b",
            "4",
            "--gpu",
            "a100-sxm4-80gb",
            "--draft-config",
            "eagle3-llama-3.1-8b-instruct",
            "--format",
            "json",
        ),
        False,
        ".",
    ),
    "limit-data": (("recommend", "-b", "16", "--data", "h100.jsonl"), False, "."),
    "limit-data-json": (("recommend", "-b", "16", "--data", "h100.jsonl", "--format", "json"), False, "."),
    "limit-data-transfer": (
        ("recommend", "-b", "16", "--data", "h100.jsonl", "--draft-model", "d", "--allow-transfer"),
        False,
        ".",
    ),
    "limit-data-transfer-json": (
        ("recommend", "-b", "16", "--data", "h100.jsonl", "--gpu", "a100-sxm4-80gb", "--allow-transfer", "-f", "json"),
        False,
        ".",
    ),
    "limit-data-refused": (("recommend", "-b", "16", "--data", "h100.jsonl", "--gpu", "a100-sxm4-80gb"), False, "."),
    "limit-data-low": (("recommend", "-b", "1", "--data", "h100.jsonl", "--max-speed-loss", "0.1"), False, "."),
    "limit-data-unmeasured": (("recommend", "-b", "12", "--data", "h100.jsonl"), False, "."),
    "limit-folder": (("recommend", "-b", "16", "--models", "h100-models"), False, "."),
    "limit-folder-unmeasured": (("recommend", "-b", "12", "--models", "h100-models"), False, "."),
    "limit-folder-json": (
        ("recommend", "-b", "16", "--models", "h100-models", "--gpu", "h100-sxm", "--format", "json"),
        False,
        ".",
    ),
    "limit-folder-low": (
        ("recommend", "-b", "1", "--models", "h100-models", "--draft-model", "d", "--allow-transfer"),
        False,
        ".",
    ),
    "limit-folder-and-data-json": (
        ("recommend", "-b", "16", "--models", "h100-models", "--data", "h100.jsonl", "-f", "json"),
        False,
        ".",
    ),
    "mix": (("recommend", "--batch-mix", "1:0.5,16:0.5"), False, "."),
    "mix-json": (("recommend", "--batch-mix", "1:0.25,4:0.25,16:0.5", "--format", "json"), False, "."),
    "mix-folder-json": (
        ("recommend", "--batch-mix", "1:1,12:1", "--models", "pub-models", "--gpu", "rtx4060-laptop", "-f", "json"),
        False,
        ".",
    ),
    "schedule-sglang": (("schedule", "--engine", "sglang", "--out", "s1.json", "--no-engine-check"), False, "."),
    "schedule-sglang-json": (
        ("schedule", "--engine", "sglang", "--out", "s2.json", "--format", "json", "--no-engine-check"),
        False,
        ".",
    ),
    "schedule-vllm-json": (
        (
            "schedule",
            "--engine",
            "vllm",
            "--out",
            "s3.json",
            "--models",
            "sim-models",
            "--draft-model",
            "d",
            "--allow-transfer",
            "--gpu",
            "a100-sxm4-80gb",
            "--format",
            "json",
        ),
        False,
        ".",
    ),
    "launch-pick": ((*_LAUNCH, "-b", "16", "--device", "none", "--allow-transfer"), False, "."),
    "launch-pick-folder": (
        (*_LAUNCH, "-b", "12", "--device", "none", "--models", "pub-models", "--allow-transfer"),
        False,
        ".",
    ),
    "launch-pick-limit-folder": (
        (*_LAUNCH, "-b", "16", "--device", "none", "--models", "h100-models", "--allow-transfer"),
        False,
        ".",
    ),
    "launch-pick-gpu": ((*_LAUNCH, "-b", "4", "--allow-transfer"), True, "."),
    "launch-limit-data": ((*_LAUNCH, "-b", "16", "--set-power-limit", "auto", "--data", "h100.jsonl"), True, "."),
    "launch-limit-data-transfer": (
        (
            *_LAUNCH,
            "-b",
            "16",
            "--set-power-limit",
            "auto",
            "--data",
            "h100.jsonl",
            "--gpu",
            "a100-sxm4-80gb",
            "--allow-transfer",
        ),
        True,
        ".",
    ),
    "launch-schedule": ((*_LAUNCH, "--schedule", "auto", "--device", "none", "--allow-transfer"), False, "."),
}


def _unmeasured_note_first(stderr: str) -> str:
    """A folder's answer over several limits now says the unmeasured batch size first, as the
    sweep's answer always did (one path for both: the notes came in two orders before)."""
    lines = stderr.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if " was not measured; " in line)
    return "".join([lines[at], *lines[:at], *lines[at + 1 :]])


#: Scenarios whose output changed on purpose: name -> what the old stderr became.
CHANGED = {"limit-folder-unmeasured": _unmeasured_note_first}


def _quiet_main(argv: list[str]) -> None:
    """``specband ARGV`` in-process, its output thrown away (building the inputs)."""
    from specband.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exc:
            assert not exc.code, argv


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's folder: ``pub.jsonl`` (the bundled published rows) and ``pub-models``
    (lookup_table and linucb on them), ``h100.jsonl`` (simulated H100 over 200-700 W) and
    ``h100-models``, ``sim.jsonl`` (simulated H100 at its default limit) and ``sim-models``,
    and ``implicit/specband-models`` (a copy of ``pub-models``)."""
    root = tmp_path_factory.mktemp("answers")
    old = Path.cwd()
    os.chdir(root)
    try:
        shutil.copy(bundled_data_path(), "pub.jsonl")
        model = build_model("h100-sxm", **_H100_8B)
        limits = [float(w) for w in (*range(200, 260, 5), *range(300, 701, 100))]
        rows = simulate_power_limits(model, limits, batch_sizes=(1, 4, 16), repeats=1)
        Path("h100.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        rows = simulate_sweep(model, batch_sizes=(1, 16), repeats=1)
        Path("sim.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        _quiet_main(["train", "pub.jsonl", "--algo", "lookup_table", "--algo", "linucb", "--out", "pub-models"])
        _quiet_main(["train", "h100.jsonl", "--algo", "lookup_table", "--out", "h100-models"])
        _quiet_main(["train", "sim.jsonl", "--algo", "lookup_table", "--out", "sim-models"])
        Path("implicit").mkdir()
        shutil.copytree("pub-models", "implicit/specband-models")
    finally:
        os.chdir(old)
    return root


def run_scenario(name: str, root: Path, run_cli, monkeypatch: pytest.MonkeyPatch) -> dict:
    """One scenario's argv, exit code, stdout and stderr, run in its folder under ``root``."""
    import specband.deploy.usersetup as usersetup

    argv, _gpu, where = SCENARIOS[name]
    monkeypatch.setattr(usersetup, "_NVIDIA_DRIVER_PATHS", ())  # the GPU is never read for the transfer check
    monkeypatch.chdir(root / where)
    result = run_cli(*argv)
    out, err = (text.replace(sys.executable, "PYTHON") for text in (result.stdout, result.stderr))
    return {"argv": list(argv), "exit_code": result.exit_code, "stdout": out, "stderr": err}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_answer_prints_what_it_printed_before(name, inputs, run_cli, monkeypatch, request) -> None:
    if SCENARIOS[name][1]:
        gpu = request.getfixturevalue("fake_gpu")
        gpu.max_limit_mw = gpu.default_mw = gpu.enforced_mw = 700_000
    got = run_scenario(name, inputs, run_cli, monkeypatch)
    want = json.loads(GOLDEN.read_text())[name]
    if name in CHANGED:
        want["stderr"] = CHANGED[name](want["stderr"])
    assert got["argv"] == want["argv"]
    assert (got["exit_code"], got["stderr"]) == (want["exit_code"], want["stderr"])
    assert got["stdout"] == want["stdout"]

"""What ``recommend``, ``schedule`` and ``launch --dry-run`` print (stdout, stderr, exit code)
for every kind of answer (a pick, a first guess, a power limit from a sweep or a folder, a
batch-size mix, a schedule, a launch) stays what it was: ``answer_outputs.json`` holds the
outputs the code printed before the answer types became one family (captured at commit
ed923b7, before the change); ``--format json`` is each answer's ``to_json()``. The two
first-guess scenarios were captured again for issue 29, which changed them on purpose: the
first note names the acceptance used, the calibration quoted is that of the profile and pair
simulated, the pick's speed carries its interval, and one bundled config brings its own
bundled pair (the 8B target with its 8B head, no longer the 1B laptop head); and again for issue
35 (the model's expected figures, the limit picked with the flags, one table). Issue 35 moved the
other answers' notes behind ``--explain`` (they are checked to be all still said, in order) and
added the answer's row under ``table`` to their JSON.

Every input is built here, deterministically (simulated rows with the simulator's fixed
seed, ``specband train`` with seed 0), in one folder shared by the module; the user's GPU
is never read (no NVML is assumed, as on the CPU machines the suite runs on).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.devices import conftest as devices_conftest

from specband.sim import build_model, simulate_power_limits, simulate_sweep
from specband.sim.hfconfig import bundled_model_configs
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


def _data_trained_in_memory(stderr: str) -> str:
    """``recommend --data FILE`` without ``--models`` answers from FILE, trained in memory (hostile
    trial N28), instead of ignoring it for the embedded study policy: the same pick here (the
    file holds the bundled rows), with the notes naming the data."""
    return stderr.replace(
        "note: --data is used with --models only; ignored\n",
        "note: no --models: trained lookup_table on pub.jsonl in memory "
        "(seed 0; `specband train` keeps it as a folder)\n",
    ).replace("the embedded study policy is from", "pub.jsonl (trained in memory) is from")


#: Scenarios whose output changed on purpose: name -> what the old stderr became.
CHANGED = {"limit-folder-unmeasured": _unmeasured_note_first, "pick-data-one-limit": _data_trained_in_memory}


def _table_to_stderr(want: dict[str, Any]) -> dict[str, Any]:
    """Issue 37: ``recommend --batch-mix`` printed its table on stdout above the flags line; it
    now goes to stderr after the notes, and stdout is the flags line alone."""
    *table, flags = want["stdout"].splitlines(keepends=True)
    assert table and flags.startswith("--speculative-algorithm"), want["stdout"]
    return {**want, "stdout": flags, "stderr": want["stderr"] + "".join(table)}


#: Scenarios whose table moved from stdout to stderr on purpose: name -> what the old output became.
MOVED = {"mix": _table_to_stderr}

#: The acceptance workload of every simulated row of this module (the 8B pair's bundled profile).
_SIMULATED_WORKLOAD = "mt-bench"


def _simulated_workload(text: str) -> str:
    """Issue 37: simulated rows record the workload their acceptance belongs to, so an answer
    resting on them says ``workload mt-bench`` (it said ``workload not recorded``, beside a first
    note naming mt-bench): in the origin lines of simulated data, and in the JSON origins."""
    if text.lstrip().startswith("{"):
        return json.dumps(_simulated_origins(json.loads(text)), indent=2) + "\n"
    new = f"workload {_SIMULATED_WORKLOAD}"
    return "".join(
        line.replace("workload not recorded", new) if "on simulated data" in line else line
        for line in text.splitlines(keepends=True)
    )


def _simulated_origins(value: Any) -> Any:
    if isinstance(value, list):
        return [_simulated_origins(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {key: _simulated_origins(v) for key, v in value.items()}
    if out.get("provenance") == "simulated" and "power_measured" in out and out.get("workload") is None:
        out["workload"] = _SIMULATED_WORKLOAD
    return out


_OLD_BAND_NOTE = re.compile(r"no config reaches the 0\.95-0\.98 band at this power limit: [^\"\n]*")
_NEW_BAND_NOTE = re.compile(r"no config reaches the 0\.95-0\.98 band at this power limit \(\d+ W\): [^\"\n]*")


def _issue30(want: str, got: str) -> str:
    """What an old output became with issue 30's wording: the band note names the config it
    speaks of and keeps to the GPU's range of limits (tested on its values in
    tests/deploy/test_power_limit_floor.py; here the new note stands where the old one stood,
    one for one), and data over several limits is labelled with its range, not its median."""
    old, new = _OLD_BAND_NOTE.findall(want), _NEW_BAND_NOTE.findall(got)
    assert len(old) == len(new), (old, new)
    for before, after in zip(old, new, strict=True):
        assert "the GPU's limits: " in after, after
        want = want.replace(before, after, 1)
    # the bundled Qwen3-8B config (a bundled name for the same config.json as a Qwen3-8B folder), and
    # issue 36's fleet models and their EAGLE3 heads
    bundled = "eagle3-llama-3.1-8b-instruct, eagle3-llama-3.2-1b-instruct, llama-3.1-8b-instruct, llama-3.2-1b-instruct"
    now = ", ".join(bundled_model_configs())
    want = want.replace(f"bundled configs: {bundled})", f"bundled configs: {now})")
    spanned = re.search(r"H100_SXM5_80GB over (\d+-\d+ W)", got)
    if spanned:  # the module's h100.jsonl, over several limits: was its median limit
        want = re.sub(r"(H100_SXM5_80GB) at \d+ W", rf"\1 over {spanned.group(1)}", want)
    return want


#: Lines issue 30 added to schedules' output: the engine release a schedule is written for,
#: where its provenance file is, and what the engine does above the last tier (their values
#: are tested in tests/deploy/test_schedule_provenance.py).
_SCHEDULE_LINES = re.compile(
    r"^(note: )?(batch sizes above \d+ were not scheduled from data: |the auto schedule is written for sglang 0\.5\.23$"
    r"|written for .*; its provenance beside it: )"
)


def _without_schedule_lines(text: str, expected: bool) -> str:
    """``text`` without :data:`_SCHEDULE_LINES` (``expected``: there must be some)."""
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if not _SCHEDULE_LINES.match(line)]
    assert (len(kept) < len(lines)) == expected, text
    return "".join(kept)


#: JSON keys issue 30 added (the origin's range of limits and its models' architectures and config
#: identities; a schedule's engine release, its provenance file and what the engine does above
#: the last tier).
_NEW_JSON_KEYS = (
    "power_limit_range_w",
    "engine_version",
    "provenance_file",
    "beyond_last_tier",
    "target_architecture",
    "target_config_sha256",
    "draft_architecture",
    "draft_config_sha256",
)


def _without_limit_range(text: str) -> str:
    """JSON output with the origin's ``power_limit_range_w`` dropped (new in issue 30, present
    only for data over several limits: checked in tests/deploy/test_power_limit_floor.py)."""
    if not text.lstrip().startswith("{"):
        return text

    def drop(obj: object) -> object:
        if isinstance(obj, dict):
            return {k: drop(v) for k, v in obj.items() if k not in _NEW_JSON_KEYS}
        if isinstance(obj, list):
            return [drop(v) for v in obj]
        return obj

    return json.dumps(drop(json.loads(text)), indent=2) + "\n"


def _quiet_main(argv: list[str]) -> None:
    """``specband ARGV`` in-process, its output thrown away (building the inputs)."""
    from specband.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exc:
            assert not exc.code, argv


#: The notes ``schedule`` prints under its comparison with the engines' defaults (issue 29 item 5).
_DEFAULTS_NOTES = (
    "note: sglang: default adaptive tiers",
    "note: vLLM: num_speculative_tokens=",
    "note: rows marked simulated were not in the data",
    "note: the folder keeps no accept lengths",
    "note: bs ",
)


def _without_engine_defaults(got: dict) -> dict:
    """``schedule``'s output without the comparison with the engines' defaults, which it gained
    after the golden outputs were captured (checked to be there, then taken out)."""
    out, err = got["stdout"], got["stderr"]
    if out.lstrip().startswith("{"):
        doc = json.loads(out)
        assert doc.pop("engine_defaults")["rows"], "schedule --format json has no engine_defaults"
        out = json.dumps(doc, indent=2) + "\n"
    else:
        lines = out.splitlines(keepends=True)
        start = next(
            i for i, line in enumerate(lines) if line.startswith("specband's pick against the engines' defaults")
        )
        end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
        out = "".join(lines[:start] + lines[end + 1 :])
        kept = [line for line in err.splitlines(keepends=True) if not line.startswith(_DEFAULTS_NOTES)]
        assert len(kept) < len(err.splitlines()), "schedule printed no notes on the engines' defaults"
        err = "".join(kept)
    return {**got, "stdout": out, "stderr": err}


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


def run_scenario(name: str, root: Path, run_cli, monkeypatch: pytest.MonkeyPatch, extra: tuple[str, ...] = ()) -> dict:
    """One scenario's argv, exit code, stdout and stderr, run in its folder under ``root``
    (``extra``: arguments added to the scenario's)."""
    import specband.deploy.usersetup as usersetup

    argv, _gpu, where = SCENARIOS[name]
    monkeypatch.setattr(usersetup, "_NVIDIA_DRIVER_PATHS", ())  # the GPU is never read for the transfer check
    monkeypatch.chdir(root / where)
    result = run_cli(*argv, *extra)
    out, err = (text.replace(sys.executable, "PYTHON") for text in (result.stdout, result.stderr))
    return {"argv": list(argv), "exit_code": result.exit_code, "stdout": out, "stderr": err}


#: Key of ``answer_outputs.json`` listing the scenarios captured again (with why), compared as
#: printed now rather than through the transformations of the old outputs above.
RECAPTURED = "_recaptured"
#: ``SPECBAND_RECAPTURE_ANSWERS=NAME`` (or ``*`` for every scenario that differs) writes what a
#: scenario prints now into ``answer_outputs.json`` and lists it under :data:`RECAPTURED`: for a
#: deliberate change of the simulator's numbers, whose diff is then reviewed like code.
RECAPTURE_ENV = "SPECBAND_RECAPTURE_ANSWERS"


def _recapture(golden: dict, name: str, got: dict) -> None:
    """Write ``got`` as scenario ``name``'s output (when it differs) and list it as recaptured."""
    old = golden[name]
    if (old["exit_code"], old["stderr"], old["stdout"]) == (got["exit_code"], got["stderr"], got["stdout"]):
        return
    names = golden.setdefault(RECAPTURED, {"why": "", "names": []})["names"]
    golden[name] = got
    if name not in names:
        names.append(name)
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")


#: Old lines issue 35 replaced: the draft's path the flags lack is one line under the table.
_REPLACED = ("note: sglang needs --speculative-draft-model-path for EAGLE3; pass --draft-model PATH",)


def _table_answer(name: str) -> bool:
    """The scenario answers with issue 35's table (a recommend for batch sizes, a launch that is
    not a schedule): its notes went behind --explain, its JSON gained the row under "table"."""
    argv = SCENARIOS[name][0]
    if argv[0] == "launch":
        return "--schedule" not in argv
    return argv[0] == "recommend" and "--batch-mix" not in argv


def _said_in_order(old: str, new: str) -> None:
    """Every line of ``old`` (but those issue 35 replaced) is in ``new``, in the same order."""
    lines = iter(new.splitlines())
    for line in old.splitlines():
        if line.startswith(_REPLACED):
            continue
        assert any(got == line for got in lines), (line, new)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_answer_prints_what_it_printed_before(name, inputs, run_cli, monkeypatch, request) -> None:
    if SCENARIOS[name][1]:
        gpu = request.getfixturevalue("fake_gpu")
        gpu.max_limit_mw = gpu.default_mw = gpu.enforced_mw = 700_000
    as_json = "--format" in SCENARIOS[name][0] or "-f" in SCENARIOS[name][0]
    golden = json.loads(GOLDEN.read_text())
    recapture = os.environ.get(RECAPTURE_ENV) in (str(name), "*")
    recaptured = recapture or name in golden.get(RECAPTURED, {}).get("names", [])
    table = _table_answer(name) and not recaptured
    got = run_scenario(name, inputs, run_cli, monkeypatch, ("--explain",) if table and not as_json else ())
    if name.startswith("schedule-"):
        got = _without_engine_defaults(got)
    if recapture:
        _recapture(golden, name, got)
    want = golden[name]
    if name in golden.get(RECAPTURED, {}).get("names", []):
        # captured again (a change of the simulator's numbers, issue 35's table): compared as printed
        # now, a JSON answer's computed floats within a tolerance, not to the last printed digit
        assert (got["argv"], got["exit_code"], got["stderr"]) == (want["argv"], want["exit_code"], want["stderr"])
        if as_json:
            assert _approx(json.loads(got["stdout"])) == json.loads(want["stdout"])
        else:
            assert got["stdout"] == want["stdout"]
        return
    if name in CHANGED:
        want["stderr"] = CHANGED[name](want["stderr"])
    if name in MOVED:
        want = MOVED[name](want)
    want["stderr"], want["stdout"] = _simulated_workload(want["stderr"]), _simulated_workload(want["stdout"])
    want["stderr"] = _issue30(want["stderr"], got["stderr"])
    want["stdout"] = _issue30(want["stdout"], got["stdout"])
    assert got["argv"][: len(want["argv"])] == want["argv"]
    got_stderr = _without_schedule_lines(got["stderr"], name in ("schedule-sglang", "launch-schedule"))
    got_stdout = _without_schedule_lines(got["stdout"], name == "schedule-sglang")
    assert got["exit_code"] == want["exit_code"]
    if table:  # issue 35: every old note still said (text: with --explain, after the table)
        _said_in_order(want["stderr"], got_stderr)
    else:
        assert got_stderr == want["stderr"]
    if table and not as_json:
        assert got_stdout == want["stdout"]
        return
    if as_json:
        # the data's origin gained the engine its rows were measured on (issue 30): the rest is as before
        got_json = json.loads(_without_limit_range(got_stdout))
        if table:  # issue 35: the answer's row of the table, checked to be there
            row = got_json.pop("table")
            assert row["action"] == got_json["action"] and row["commands"], row
        assert _without_engine(got_json) == _without_old_engine(json.loads(_without_limit_range(want["stdout"])))
        return
    assert got_stdout == want["stdout"]


def _approx(value: Any) -> Any:
    """``value`` with every float as ``pytest.approx`` (relative 1e-3), for an equality test."""
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_approx(v) for v in value]
    return pytest.approx(value, rel=1e-3) if isinstance(value, float) else value


def _without_engine(value: Any) -> Any:
    """``value`` with the ``engine`` and ``engine_version`` of every data origin taken out, each
    checked (the study's and these simulated rows are sglang's or name no engine, with no release
    recorded), and the answer's own ``engine`` beside its flags (sglang's: the default)."""
    if isinstance(value, list):
        return [_without_engine(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "power_measured" in value and "provenance" in value:
        assert value.pop("engine") in ("sglang", None) and value.pop("engine_version", None) is None, value
    if "flags" in value and "engine" in value:
        assert value.pop("engine") == "sglang", value
    return {key: _without_engine(v) for key, v in value.items()}


def _without_old_engine(value: Any) -> Any:
    """The recorded ``value`` with the per-engine version columns its origins had before the
    engine was recorded as ``engine`` and ``engine_version`` (each was ``null`` in these outputs)."""
    if isinstance(value, list):
        return [_without_old_engine(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "power_measured" in value and "provenance" in value:
        assert value.pop("sglang_version", None) is None, value
    return {key: _without_old_engine(v) for key, v in value.items()}

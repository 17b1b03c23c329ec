"""One command, one look at the model folder (issue 27): ``--models DIR`` is resolved once and
its ``specband.json`` opened once, whether the folder answers with a pick (one power limit) or
with a limit (trained on several), for ``recommend``, ``recommend --batch-mix``, ``schedule``
and ``launch --dry-run``; and ``launch --set-power-limit auto`` takes the limit from such a
folder as ``recommend`` does (it read ``--data`` only before)."""

from __future__ import annotations

import builtins
import io
import json
import os
from pathlib import Path

import pytest
from tests.devices import conftest as devices_conftest

from specband.sim import build_model, simulate_power_limits

fake_gpu = devices_conftest.fake_gpu  # the patched-NVML fixture of the device tests

_H100_8B = {"target_config": "llama-3.1-8b-instruct", "draft_config": "eagle3-llama-3.1-8b-instruct"}
_LAUNCH = ("launch", "--target", "m", "--draft", "d", "--sglang-version", "0.5.23", "--dry-run", "--allow-transfer")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``one``: lookup_table on the bundled rows (one limit); ``several``: lookup_table on a
    simulated H100 sweep over 200-700 W (the manifest's ``power_limits``)."""
    import contextlib

    from specband.cli import main

    root = tmp_path_factory.mktemp("one-read")
    rows = simulate_power_limits(build_model("h100-sxm", **_H100_8B), [200.0, 215.0, 450.0, 700.0], batch_sizes=(16,))
    data = root / "h100.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, args in (("one", []), ("several", [str(data)])):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                main(["train", *args, "--algo", "lookup_table", "--out", str(root / name)])
            except SystemExit as exc:
                assert not exc.code, name
    return {"one": root / "one", "several": root / "several"}


def _count(monkeypatch: pytest.MonkeyPatch, folder: Path) -> tuple[list[str], list[str]]:
    """The opens of ``folder/specband.json`` (by ``os.open`` and ``open``) and the calls of
    :func:`specband.files.hub.resolve_folder` from here on."""
    import specband.artifacts.load
    import specband.files.hub as hub

    manifest = os.path.realpath(folder / "specband.json")
    opened: list[str] = []
    resolved: list[str] = []

    def is_manifest(path: object) -> bool:
        return isinstance(path, (str, bytes, os.PathLike)) and os.path.realpath(os.fsdecode(path)) == manifest

    real_os_open, real_open, real_resolve = os.open, io.open, hub.resolve_folder

    def os_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if is_manifest(path):
            opened.append("os.open")
        return real_os_open(path, flags, *args, **kwargs)

    def py_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
        if is_manifest(file):
            opened.append("open")
        return real_open(file, *args, **kwargs)

    def resolve_folder(text):  # type: ignore[no-untyped-def]
        resolved.append(str(text))
        return real_resolve(text)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", py_open)
    monkeypatch.setattr(builtins, "open", py_open)
    monkeypatch.setattr(hub, "resolve_folder", resolve_folder)
    monkeypatch.setattr(specband.artifacts.load, "resolve_folder", resolve_folder)  # the one caller
    return opened, resolved


@pytest.mark.parametrize("kind", ["one", "several"])
def test_recommend_reads_the_folder_once(folders, kind, run_cli, monkeypatch) -> None:
    opened, resolved = _count(monkeypatch, folders[kind])
    result = run_cli("recommend", "-b", "16", "--models", folders[kind], "--allow-transfer")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("sudo nvidia-smi -pl ") == (kind == "several")  # the answer each folder gives
    assert (len(opened), resolved) == (1, [str(folders[kind])])


@pytest.mark.parametrize(
    "args",
    [
        ("recommend", "--batch-mix", "1:1,16:1"),
        ("schedule", "--engine", "sglang", "--no-engine-check", "--out", "s.json"),
        (*_LAUNCH, "-b", "16", "--device", "none"),
    ],
    ids=["mix", "schedule", "launch"],
)
def test_the_other_commands_read_the_folder_once(folders, args, run_cli, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    opened, resolved = _count(monkeypatch, folders["one"])
    result = run_cli(*args, "--models", folders["one"], "--allow-transfer")
    assert result.exit_code == 0, result.stderr
    assert (len(opened), resolved) == (1, [str(folders["one"])])


def test_launch_sets_the_limit_a_folder_over_several_limits_answers(folders, run_cli, monkeypatch, request) -> None:
    gpu = request.getfixturevalue("fake_gpu")
    gpu.max_limit_mw = gpu.default_mw = gpu.enforced_mw = 700_000
    recommended = run_cli("recommend", "-b", "16", "--models", folders["several"], "--allow-transfer")
    assert recommended.exit_code == 0, recommended.stderr
    limit_line, flags = recommended.stdout.splitlines()
    opened, resolved = _count(monkeypatch, folders["several"])
    auto = ("-b", "16", "--set-power-limit", "auto", "--models", folders["several"])
    launched = run_cli(*_LAUNCH, *auto, "--log", Path("s.log").absolute())
    assert launched.exit_code == 0, launched.stderr
    assert (len(opened), resolved) == (1, [str(folders["several"])])
    assert f"# {limit_line}" in launched.stdout.splitlines()  # recommend's limit, set by NVML while it runs
    assert flags.split("--speculative-num-steps")[1] in launched.stdout  # and its flags
    assert gpu.limits_set == []  # a dry run sets nothing
    # a folder trained on one limit has no limit to give: one error line
    refused = run_cli(*_LAUNCH, "-b", "16", "--set-power-limit", "auto", "--models", folders["one"])
    assert refused.exit_code == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith(f"error: {folders['one']} was trained on one power limit")

"""A third engine, defined here and nowhere in the package, goes through every command that
prints flags or a launch line and through an emulated sweep: the engine is a value, found through
the one registry, and no stage knows any engine's name.

The toy engine serves as sglang does (sglang's HTTP answers, sglang's schedule format) but has
its own name and its own spelling of a config (``--toy-spec S:K:D --toy-draft PATH``); its
server is a small script that turns its spelling into sglang's and runs ``specband emulate``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.servers import TIME_SCALE

from specband.contract.actions import Action
from specband.core.engine_table import engine_names
from specband.engines import get_engine, register_engine, unregister_engine
from specband.engines.sglang import SglangEngine
from specband.sweeps.dataset import load_sweep

#: The toy's server: its flags turned into sglang's, then the emulator (answering as sglang).
TOY_SERVER = """\
import os, sys
args, out, i = sys.argv[1:], [], 0
while i < len(args):
    if args[i] == "--toy-spec":
        steps, topk, draft = args[i + 1].split(":")
        out += ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", steps,
                "--speculative-eagle-topk", topk, "--speculative-num-draft-tokens", draft]
        i += 2
    elif args[i] == "--toy-draft":
        out += ["--speculative-draft-model-path", args[i + 1]]
        i += 2
    else:
        out.append(args[i])
        i += 1
os.execv(sys.executable, [sys.executable, "-m", "specband", "emulate", "--load-time", "2", *out])
"""


class ToyEngine(SglangEngine):
    """An engine of this test only: sglang's serving, its own name and flags."""

    name = "toy"
    display_name = "Toy"
    draft_flag = "--toy-draft"

    def __init__(self, launcher: str) -> None:
        self.launcher = launcher

    def speculative_flags(self, action: Action, draft_model: str | None) -> list[str]:
        """``--toy-spec S:K:D [--toy-draft PATH]``; none for the baseline."""
        if action.is_baseline:
            return []
        flags = ["--toy-spec", ":".join(str(v) for v in action)]
        return flags + ([] if draft_model is None else ["--toy-draft", draft_model])


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[ToyEngine]:
    from specband.cli import build_app

    build_app()  # every command's options are declared before the toy joins (their help lists the engines then)
    script = tmp_path / "toy_serve.py"
    script.write_text(TOY_SERVER)
    engine = register_engine(ToyEngine(f"{sys.executable} {script}"))
    assert isinstance(engine, ToyEngine)
    try:
        yield engine
    finally:
        unregister_engine("toy")
    assert "toy" not in engine_names()


def test_recommend_spells_the_pick_the_toys_way(run_cli, toy: ToyEngine) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("recommend", "-b", "16", "--engine", "toy")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.strip() == "--toy-spec 3:2:4"  # the embedded policy's pick at 16, as sglang's is (3,2,4)
    assert "note: Toy needs --toy-draft for EAGLE3" in res.stderr
    assert "this pick targets Toy, but the data were measured on sglang" in res.stderr
    picked = json.loads(run_cli("recommend", "-b", "16", "--engine", "toy", "--draft-model", "d", "-f", "json",
                                "--allow-transfer").stdout)  # fmt: skip
    assert (picked["engine"], picked["flags"]) == ("toy", ["--toy-spec", "3:2:4", "--toy-draft", "d"])


def test_launch_dry_run_prints_the_toys_launch_line(run_cli, toy: ToyEngine) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("launch", "--engine", "toy", "--target", "m", "--draft", "d", "-b", "16", "--device", "none",
                  "--dry-run", "--allow-transfer")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    line = res.stdout.strip().splitlines()[-1]
    assert line.endswith("--toy-spec 3:2:4 --toy-draft d")  # the engine's own spelling
    assert toy.launcher in line and "--speculative-num-steps" not in line  # its own launcher, no sglang flags
    assert res.stdout.startswith("# Toy 0.5.23")  # the release its (sglang-served) flags are spelt for


def test_schedule_writes_the_toys_format(run_cli, toy: ToyEngine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "toy-schedule.json"
    res = run_cli("schedule", "--engine", "toy", "--out", out)
    assert res.exit_code == 0, res.stderr
    assert "1" in json.loads(out.read_text())  # sglang's adaptive tiers: the toy serves as sglang does
    provenance = json.loads(Path(f"{out}.provenance.json").read_text())
    assert provenance["engine"] == "toy" and "Toy 0.5.23" in provenance["beyond_last_tier"]


def test_an_emulated_sweep_runs_through_the_toy(run_cli, toy: ToyEngine, tmp_path: Path, port: int) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "toy.jsonl"
    res = run_cli(
        "sweep", "--engine", "toy", "--target", "m", "--draft", "d", "--batch-sizes", "1", "--actions", "0 7",
        "--repeats", "1", "--out", out, "--device", "emulated", "--time-scale", TIME_SCALE, "--num-prompts", "2",
        "--max-new-tokens", "64", "--cooldown", "0", "--port", port, "--launch-timeout", "60000",
        "--request-timeout", "60000", "--quiet",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["steps"], r["topk"], r["num_draft_tokens"]) for r in rows] == [(0, 0, 0), (3, 2, 4)]
    assert all(r["error"] is None and r["speed_tok_s"] > 0 for r in rows), rows
    assert {(r["engine"], r["engine_version"], r["provenance"]) for r in rows} == {("toy", "0.5.23", "emulated")}
    assert rows[1]["accept_length_source"] in ("meta_info", "server_info")  # read as sglang's answers are
    log = next((tmp_path / "toy.jsonl.logs").iterdir()).read_text()
    assert "emulated sglang server" in log  # the toy's flags reached the emulator in sglang's spelling
    dry = run_cli("sweep", "--engine", "toy", "--target", "m", "--draft", "d", "--batch-sizes", "1", "--actions",
                  "7", "--out", tmp_path / "dry.jsonl", "--device", "none", "--dry-run")  # fmt: skip
    assert dry.exit_code == 0 and dry.stdout.splitlines()[1].endswith("--toy-spec 3:2:4 --toy-draft d")
    assert load_sweep(out).rows[0].raw["engine"] == get_engine("toy").name  # the rows read back while it is known

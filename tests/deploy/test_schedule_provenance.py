"""Issue 30 item 4: a schedule names the engine release it targets, `launch --schedule FILE`
carries the provenance `schedule` wrote beside it (a simulation's label among it), and what the
engine does above the last tier is said (real values: a simulated H100 folder, bs 1-64)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specband.core.errors import ConfigError
from specband.engines.schedule_files import provenance_path, read_schedule_provenance


@pytest.fixture(scope="module")
def simulated_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lookup_table trained on a simulated H100 SXM sweep (8B pair, bs 1, 8, 16, 64, one repeat)."""
    from specband.cli import main

    root = tmp_path_factory.mktemp("sched")
    for argv in (
        ["simulate", "--profile", "h100-sxm", "--target-config", "llama-3.1-8b-instruct", "--draft-config",
         "eagle3-llama-3.1-8b-instruct", "--batch-sizes", "1,8,16,64", "--repeats", "1",
         "--out", str(root / "s.jsonl")],
        ["train", str(root / "s.jsonl"), "--algo", "lookup_table", "--out", str(root / "m")],
    ):  # fmt: skip
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert not done.value.code
    return root / "m"


@pytest.mark.parametrize(
    ("engine", "version", "beyond"),
    [
        ("sglang", "0.5.23",
         r"sglang 0\.5\.23 runs every batch size from (\d+) up with the last tier's candidate_steps \[(\d)\]"),
        ("vllm", "0.32.0", r"vLLM 0\.32\.0 keeps the last range's K = (\d) up to its --max-num-seqs"),
    ],
)  # fmt: skip
def test_schedule_names_its_engine_release_and_launch_carries_its_provenance(
    run_cli, simulated_folder: Path, tmp_path: Path, engine: str, version: str, beyond: str
) -> None:
    out = tmp_path / f"{engine}.json"
    res = run_cli("schedule", "--engine", engine, "--models", simulated_folder, "--out", out, "--no-engine-check")
    assert res.exit_code == 0, res.stderr
    side = provenance_path(out)
    assert side == tmp_path / f"{engine}.json.provenance.json"
    made = read_schedule_provenance(out)
    assert made is not None and made["engine"] == engine and made["engine_version"] == version
    assert made["provenance"] == "simulated" and made["last_batch_size"] == 64
    assert any("SIMULATED" in n for n in made["notes"])
    assert f"its provenance beside it: {side}" in res.stdout
    assert "batch sizes above 64 were not scheduled from data: " in res.stderr and re.search(beyond, res.stderr)
    # the engine's file itself stays in the engine's format (sglang ignores non-digit keys, vLLM would refuse them)
    config = json.loads(out.read_text())
    assert ("specband" not in config) and all(k.isdigit() for k in config) if engine == "sglang" else "method" in config

    launched = run_cli("launch", "--dry-run", "--engine", engine, "--schedule", out, "--target", "t", "--draft", "d",
                       "--device", "none")  # fmt: skip
    assert launched.exit_code == 0, launched.stderr
    assert f"note: {out}: written by `specband schedule` for {'sglang' if engine == 'sglang' else 'vLLM'} {version} " \
           f"from simulated data" in launched.stderr  # fmt: skip
    assert f"note: {out}: {simulated_folder}: trained on SIMULATED rows" in launched.stderr
    assert made["beyond_last_tier"] in launched.stderr
    # the same file without its provenance: said, not guessed
    side.unlink()
    bare = run_cli("launch", "--dry-run", "--engine", engine, "--schedule", out, "--target", "t", "--draft", "d",
                   "--device", "none")  # fmt: skip
    assert bare.exit_code == 0 and f"no {side.name} beside it" in bare.stderr and "SIMULATED" not in bare.stderr
    if engine == "sglang":
        assert (
            "the file does not say which batch sizes it was made for: sglang 0.5.23 runs every batch size"
            in bare.stderr
        )


def test_a_broken_provenance_file_is_one_error_line(run_cli, simulated_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    assert run_cli("schedule", "--engine", "vllm", "--models", simulated_folder, "--out", out).exit_code == 0
    provenance_path(out).write_text('{"engine": "vllm", "notes": [1]}')
    with pytest.raises(ConfigError, match=r"v\.json\.provenance\.json: 'engine_version' must be a str"):
        read_schedule_provenance(out)
    res = run_cli("launch", "--dry-run", "--engine", "vllm", "--schedule", out, "--target", "t", "--device", "none")
    assert res.exit_code == 2 and res.stderr.startswith("error: ") and len(res.stderr.splitlines()) == 1


def test_schedule_refuses_to_overwrite_a_provenance_file(run_cli, simulated_folder: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    provenance_path(out).write_text("mine\n")
    res = run_cli("schedule", "--engine", "sglang", "--models", simulated_folder, "--out", out)
    assert res.exit_code == 2 and "s.json.provenance.json" in res.stderr and not out.exists()
    assert provenance_path(out).read_text() == "mine\n"

"""Issue 30 item 7: `doctor` never asks the user to edit a file of the installed package or of
the Hugging Face cache: asked with --write-fixed DIR it writes a fixed copy of the draft's config
there and says how to use it, and unasked it writes nothing and names the option (issue 37); a draft
folder of the user's own keeps the fix "copy ... into its config.json"."""

from __future__ import annotations

import json
from pathlib import Path

from specband.sim.hfconfig import bundled_model_config_path

from .conftest import add_snapshot, config_bytes


def _rope_line(stdout: str) -> str:
    (line,) = [x for x in stdout.splitlines() if x.split()[:2] == ["error", "rope:"]]
    return line


def test_doctor_writes_nothing_unasked_and_names_the_option(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = run_cli("doctor", "--target", "qwen3-8b", "--draft", "eagle3-llama-3.1-8b-instruct")
    assert res.exit_code == 2
    line = _rope_line(res.stdout)
    package = str(bundled_model_config_path("eagle3-llama-3.1-8b-instruct"))
    assert line.endswith(
        f"fix: {package} is inside the installed specband package, not a file to edit; --write-fixed DIR writes a "
        "copy of it with the target's RoPE to DIR/eagle3-llama-3.1-8b-instruct/config.json: take your own copy of "
        "the draft (`hf download yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --local-dir DRAFT`), copy it over "
        "DRAFT/config.json and pass --draft DRAFT"
    ), line
    assert list(tmp_path.iterdir()) == []
    # launch refuses the pair in doctor's words (its vocabulary first: no RoPE copy would make it serve)
    res = run_cli("launch", "--dry-run", "-b", "4", "--target", "qwen3-8b", "--draft", "eagle3-llama-3.1-8b-instruct")
    assert res.exit_code == 2 and "vocab_size: target 151936, draft 128256" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_bundled_draft_gets_a_fixed_copy_not_an_edit(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = run_cli("doctor", "--target", "qwen3-8b", "--draft", "eagle3-llama-3.1-8b-instruct", "--write-fixed", "fixed")
    assert res.exit_code == 2
    line = _rope_line(res.stdout)
    package = str(bundled_model_config_path("eagle3-llama-3.1-8b-instruct"))
    assert f"fix: {package} is inside the installed specband package, not a file to edit" in line
    assert "copy the target's" not in line.split("fix: ", 1)[1][:20]
    out = Path("fixed/eagle3-llama-3.1-8b-instruct/config.json")
    assert f"a fixed copy with the target's RoPE is written to {out}" in line
    assert "`hf download yuhuili/EAGLE3-LLaMA3.1-Instruct-8B --local-dir DRAFT`" in line and "--draft DRAFT" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixed"]
    fixed = json.loads(out.read_text())
    original = json.loads(bundled_model_config_path("eagle3-llama-3.1-8b-instruct").read_text())
    assert fixed["rope_theta"] == 1000000 and fixed["rope_scaling"] is None  # Qwen3-8B's
    assert {k: v for k, v in fixed.items() if not k.startswith("rope")} == {
        k: v for k, v in original.items() if not k.startswith("rope")
    }
    # the fixed copy passes doctor's RoPE check against the same target
    again = run_cli("doctor", "--target", "qwen3-8b", "--draft", str(out))
    assert any(x.startswith("ok    rope:") for x in again.stdout.splitlines()), again.stdout
    # a different file where the copy would go is not overwritten
    out.write_text("{}\n")
    res = run_cli("doctor", "--target", "qwen3-8b", "--draft", "eagle3-llama-3.1-8b-instruct", "--write-fixed", "fixed")
    assert f"{out} exists and differs from the fixed copy" in _rope_line(res.stdout) and out.read_text() == "{}\n"


def test_a_cached_hub_draft_gets_a_fixed_copy(run_cli, hub_cache: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    draft = json.loads(bundled_model_config_path("eagle3-llama-3.2-1b-instruct").read_text())
    published = {**draft, "rope_theta": 10000.0, "rope_scaling": None}  # docs/FACTS.md §6
    add_snapshot(
        hub_cache, "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct", {"config.json": config_bytes(published)}
    )
    res = run_cli("doctor", "--target", "llama-3.2-1b-instruct", "--draft",
                  "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct", "--write-fixed", "fixed")  # fmt: skip
    line = _rope_line(res.stdout)
    assert "is in the Hugging Face cache, not a file to edit" in line
    out = Path("fixed/SpecForge-EAGLE3-Llama-3.2-1B-Instruct/config.json")
    assert json.loads(out.read_text())["rope_theta"] == 500000.0


def test_a_users_own_draft_folder_is_the_file_to_fix(run_cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    draft = json.loads(bundled_model_config_path("eagle3-llama-3.2-1b-instruct").read_text())
    Path("draft").mkdir()
    Path("draft/config.json").write_text(json.dumps({**draft, "rope_theta": 10000.0, "rope_scaling": None}))
    res = run_cli("doctor", "--target", "llama-3.2-1b-instruct", "--draft", "./draft", "--write-fixed", "fixed")
    assert "fix: copy the target's rope_theta (500000) and rope_scaling into draft/config.json" in _rope_line(
        res.stdout
    )
    assert not Path("fixed").exists()

"""The recommend decision as data (specband.deploy.recommend): the pick and its notes, nothing printed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from specband.core.errors import ArtifactError, ConfigError
from specband.deploy.answers import Pick
from specband.deploy.recommend import recommend


def test_recommend_returns_pick_and_notes_without_printing(capsys) -> None:
    result = recommend(12, draft_model="drafts/eagle3")
    assert isinstance(result, Pick)
    assert result.measured_batch_size == 16 and result.action == (3, 2, 4)
    assert "--speculative-draft-model-path" in result.flags
    assert result.notes == ("batch size 12 was not measured; picking for the nearest measured batch size 16",)
    assert capsys.readouterr() == ("", "")


def test_the_automatic_folder_is_a_note(run_cli) -> None:
    assert run_cli("train", "--algo", "lookup_table", "--out", "specband-models").exit_code == 0
    result = recommend(16)
    assert result.source == "specband-models"
    assert result.notes[0].startswith("using ./specband-models")


def test_an_empty_draft_model_is_one_error_line(run_cli) -> None:
    with pytest.raises(ConfigError, match="empty"):
        recommend(16, draft_model="  ")
    res = run_cli("recommend", "-b", "16", "--draft-model", "")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: --draft-model: empty; give the EAGLE3 draft model's path or hub id"
    ]


def _junk_lookup_folder() -> None:
    Path("specband-models/lookup_table").mkdir(parents=True)
    Path("specband-models/lookup_table/model.json").write_text('{"1": {"config": [0, 0, 0], "mean_reward": 9.0}}')


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            _junk_lookup_folder,
            "./specband-models has no specband.json, so `specband train` did not write it (it holds "
            "lookup_table/model.json); not picked up without --models: using the embedded default "
            "(--models ./specband-models reads it)",
        ),
        (
            lambda: Path("specband-models").write_text("not a folder\n"),
            "./specband-models is not a folder (a file named like specband's default folder); "
            "using the embedded default",
        ),
        (
            lambda: os.symlink("no-such-target", "specband-models"),
            "./specband-models is a dangling symlink (to no-such-target); using the embedded default",
        ),
    ],
    ids=["no-manifest", "regular-file", "dangling-symlink"],
)
def test_what_the_default_folder_pickup_skips_is_a_note(make: Callable[[], object], expected: str) -> None:
    make()
    result = recommend(16)
    assert result.notes[0] == expected
    # the embedded default's pick, not the junk table's (0,0,0) with reward 9.0
    assert result.source.startswith("embedded") and result.action == (3, 2, 4)


def test_nothing_named_specband_models_is_no_note() -> None:
    assert not any("specband-models" in n for n in recommend(16).notes)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{bad", "specband-models/specband.json:1: not valid JSON"),
        ('{"format": 999}', "specband-models/specband.json: 'format' 999 is newer than this specband reads (up to 1)"),
    ],
)
def test_a_broken_default_folder_manifest_is_refused_as_with_models(run_cli, text: str, words: str) -> None:
    """Not "has no lookup_table": the manifest's own error, as ``--models`` gives it."""
    Path("specband-models").mkdir()
    Path("specband-models/specband.json").write_text(text)
    with pytest.raises(ArtifactError) as caught:
        recommend(16)
    message = str(caught.value)
    assert message.startswith(words) and "has no lookup_table" not in message
    assert message.endswith("(./specband-models was picked up without --models; --models DIR names another folder)")
    res = run_cli("recommend", "-b", "16")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [f"error: {message}"]
    explicit = run_cli("recommend", "-b", "16", "--models", "specband-models")
    assert explicit.exit_code == 2 and explicit.stderr.strip().startswith(f"error: {words}")

"""The recommend decision as data (specband.recommend): the pick and its notes, nothing printed."""

from __future__ import annotations

import pytest

from specband.errors import ConfigError
from specband.recommend import Recommendation, recommend


def test_recommend_returns_pick_and_notes_without_printing(capsys) -> None:
    result = recommend(12, draft_model="drafts/eagle3")
    assert isinstance(result, Recommendation)
    assert result.pick.measured_batch_size == 16 and result.pick.action == (3, 2, 4)
    assert "--speculative-draft-model-path" in result.pick.flags
    assert result.notes == ("batch size 12 was not measured; picking for the nearest measured batch size 16",)
    assert capsys.readouterr() == ("", "")


def test_the_automatic_folder_is_a_note(run_cli) -> None:
    assert run_cli("train", "--algo", "lookup_table", "--out", "specband-models").exit_code == 0
    result = recommend(16)
    assert result.pick.source == "specband-models"
    assert result.notes[0].startswith("using ./specband-models")


def test_an_empty_draft_model_is_one_error_line(run_cli) -> None:
    with pytest.raises(ConfigError, match="empty"):
        recommend(16, draft_model="  ")
    res = run_cli("recommend", "-b", "16", "--draft-model", "")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: --draft-model: empty; give the EAGLE3 draft model's path or hub id"
    ]

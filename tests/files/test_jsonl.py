"""The JSONL reader splits lines where JSON Lines does (hostile trial N44)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specband.core.errors import DataError
from specband.files.jsonl import parse_jsonl, read_jsonl
from specband.harness.workload import load_prompts

# Characters str.splitlines() splits on that may stand raw inside a JSON string.
RAW_IN_STRINGS = ["\u2028", "\u2029", "\u0085"]


@pytest.mark.parametrize("char", RAW_IN_STRINGS)
def test_a_raw_line_separator_inside_a_string_stays_on_its_line(tmp_path: Path, char: str) -> None:
    path = tmp_path / "p.jsonl"
    rows = [{"prompt": f"a{char}b"}, {"prompt": "second"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert char in path.read_text(encoding="utf-8")  # written raw, not escaped
    assert read_jsonl(path) == [(1, rows[0]), (2, rows[1])]
    assert load_prompts(path, "m").prompts == (f"a{char}b", "second")


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_line_ends_lf_crlf_and_lone_cr_are_read(end: str) -> None:
    text = end.join(['{"a": 1}', "", '{"a": 2}']) + end
    assert parse_jsonl(text, "x.jsonl") == [(1, {"a": 1}), (3, {"a": 2})]


def test_a_form_feed_is_not_a_line_end() -> None:
    # splitlines() split here and the two halves parsed as two rows; it is one bad line.
    with pytest.raises(DataError, match=r"x\.jsonl:1: not valid JSON"):
        parse_jsonl('{"a": 1}\x0c{"a": 2}\n', "x.jsonl")

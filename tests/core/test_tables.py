"""specband.core.tables: text that fits a width, wrapped between words, never inside one."""

from __future__ import annotations

from specband.core.tables import longest_word, text_table, wrap_lines


def test_wrap_lines_wraps_between_words_with_a_hanging_indent() -> None:
    line = "ok    rope: rope_theta match --speculative-num-draft-tokens and more words here"
    wrapped = wrap_lines([line, "short"], 30, hang=6)
    assert wrapped == [
        "ok    rope: rope_theta match",
        "      --speculative-num-draft-tokens",  # longer than 30 - 6: kept whole
        "      and more words here",
        "short",
    ]
    assert wrap_lines([line], None) == [line]
    assert wrap_lines(["  indented line of words"], 14) == ["  indented", "    line of", "    words"]


def test_text_table_fits_or_falls_back_to_blocks() -> None:
    rows = [["validate", "(3,4,8)", "2.397/2.398 (+0.1%)"], ["seed0", "(3,2,4)", "2.1/2.2 (-1.0%)"]]
    lines = text_table(("trial", "action", "accept m/p (err)"), rows, 40)
    assert max(len(line) for line in lines) <= 40
    assert lines[0].split() == ["trial", "action", "accept", "m/p", "(err)"]
    assert lines[1].split()[:2] == ["validate", "(3,4,8)"]
    blocks = text_table(("trial", "action", "accept m/p (err)"), rows, 20)
    assert blocks[:3] == ["trial: validate", "  action: (3,4,8)", "  accept m/p (err):"]
    assert longest_word(" a bb  ccc ") == 3 and longest_word("") == 0

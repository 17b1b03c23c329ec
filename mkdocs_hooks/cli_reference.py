"""mkdocs hook: fills docs/cli.md's ``<!-- cli-reference -->`` marker with every command's
``--help`` (:func:`specband.cli.reference.render_reference`), so the page is built from the
commands themselves at every ``mkdocs build``."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- cli-reference -->"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    from specband.cli.reference import render_reference

    return markdown.replace(MARKER, render_reference())

"""mkdocs hook: renders docs/cli.md's generated region (between
:data:`specband.cli.reference.START` and ``END``) afresh from every command's ``--help``
(:func:`specband.cli.reference.updated_page`), so the built page is the commands' own help even
where the committed page (kept current by ``python -m specband.cli.reference --write docs/cli.md``,
checked by ``tests/cli/test_reference.py``) has not been regenerated yet."""

from __future__ import annotations

from typing import Any


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    from specband.cli.reference import START, updated_page

    if START not in markdown:
        return markdown
    return updated_page(markdown)

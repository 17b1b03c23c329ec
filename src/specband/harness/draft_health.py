"""Draft health: a speculative row whose draft proposals were (nearly) all rejected.

An accept length at most :data:`DRAFT_REJECTED_ACCEPT_LENGTH` with speculation on means
the target rejects the draft's tokens: a rope mismatch between target and draft, a wrong
``--speculative-algorithm`` for this draft, or a dtype problem. Such a row measures a
broken set-up, not a configuration; the sweep flags it (``draft_flag``) and warns after
the first one, and ``train``/``evaluate`` warn on data holding such rows. Only the
standard library is imported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from specband.core.errors import one_line

__all__ = [
    "DRAFT_REJECTED_ACCEPT_LENGTH",
    "DRAFT_REJECTED_FLAG",
    "draft_flag",
    "draft_rejected_message",
    "draft_rejected_warning",
    "warn_if_draft_rejected",
]

#: At or below this accept length a speculative row's drafts were (nearly) all rejected.
DRAFT_REJECTED_ACCEPT_LENGTH = 1.05
#: The ``draft_flag`` value of such a row.
DRAFT_REJECTED_FLAG = "all_rejected"


def draft_flag(action: tuple[int, int, int], accept_length: float | None) -> str | None:
    """:data:`DRAFT_REJECTED_FLAG` for a speculative action whose accept length is at
    most :data:`DRAFT_REJECTED_ACCEPT_LENGTH`, else ``None``.

    Args:
        action: the run's triple, valid already (the sweep checked it when its grid was
            built): the baseline is ``(0, 0, 0)``, any other has no zero.
        accept_length: the run's mean accepted tokens per verify step (``None``: unknown).
    """
    if not any(action) or accept_length is None:
        return None
    return DRAFT_REJECTED_FLAG if accept_length <= DRAFT_REJECTED_ACCEPT_LENGTH else None


def draft_rejected_message(where: str) -> str:
    """The warning for rows whose draft proposals were all rejected (``where`` names
    them)."""
    return (
        f"{where}: accept length <= {DRAFT_REJECTED_ACCEPT_LENGTH} with speculation on: the draft's proposals "
        f"are (nearly) all rejected (likely a rope mismatch between target and draft, a wrong "
        f"--speculative-algorithm for this draft, or a dtype problem); such rows get draft_flag={DRAFT_REJECTED_FLAG}"
    )


def draft_rejected_warning(rows: Iterable[Mapping[str, Any]], source: str) -> str | None:
    """The warning for data holding such rows (flagged, or speculative without an error
    and with an accept length at most the threshold), or ``None``.

    Args:
        rows: raw sweep rows (``steps``, ``topk``, ``num_draft_tokens``,
            ``accept_length``, ``error``, ``draft_flag``).
        source: the data's name for the message (a file).
    """
    count = 0
    for row in rows:
        flagged = row.get("draft_flag") == DRAFT_REJECTED_FLAG
        accept = row.get("accept_length")
        speculative = bool(row.get("steps"))
        low = (
            speculative
            and not row.get("error")
            and isinstance(accept, (int, float))
            and (accept <= DRAFT_REJECTED_ACCEPT_LENGTH)
        )
        count += bool(flagged or low)
    return None if count == 0 else draft_rejected_message(f"{source}: {count} rows")


def warn_if_draft_rejected(sweep: Any) -> None:
    """Print ``warning: ...`` on stderr when a loaded :class:`specband.sweeps.dataset.Sweep`
    holds rows whose drafts were all rejected (``train`` and ``evaluate`` call this)."""
    import sys

    message = draft_rejected_warning((row.raw for row in sweep.rows), str(sweep.path or "<data>"))
    if message is not None:
        print(f"warning: {one_line(message)}", file=sys.stderr)

"""Names a user types for a model: a bundled config's name (``llama-3.1-8b-instruct``,
``eagle3-llama-3.1-8b-instruct``) or the hub id a bundled config carries
(``meta-llama/Llama-3.1-8B-Instruct``, ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``; the org and
case ignored, as the transfer check compares names) given to ``--target`` / ``--draft-model``
(``launch --target`` / ``--draft``) with ``--gpu`` and no data that answers for it: the
simulated first guess of that pair on that GPU (:func:`named_first_guess`), labelled, instead
of the embedded study policy's refusal ("answers for another setup").

Imported by :mod:`specband.deploy.recommend` only when a refusal is to be turned into a first
guess (it imports nothing of it).
"""

from __future__ import annotations

from pathlib import Path

from specband.deploy.transfer import UserSetup, model_key
from specband.sim.hfconfig import bundled_model_configs, read_model_config

__all__ = ["bundled_config_of", "named_first_guess"]


def bundled_config_of(name: str) -> str | None:
    """The bundled config ``name`` means: a bundled config's own name, or the one whose
    ``_name_or_path`` is ``name`` (org, case and punctuation ignored); ``None`` for anything
    else (a local path is the user's own model, never a bundled name)."""
    if Path(name).exists():
        return None
    names = bundled_model_configs()
    if name in names:
        return name
    key = model_key(name)
    for bundled in names:
        data, _ = read_model_config(bundled)
        if model_key(str(data.get("_name_or_path", ""))) == key:
            return bundled
    return None


def named_first_guess(setup: UserSetup | None) -> tuple[str | None, str | None] | None:
    """The bundled configs to simulate instead of a refused transfer, ``(target, draft)`` (one
    may be ``None``: its bundled partner comes with the other, :func:`specband.sim.model.model_pair`),
    or ``None`` when the refusal stands: a model the user named (``setup.target``,
    ``setup.draft``) that is not a bundled one (:func:`bundled_config_of`), or none named. The
    caller checks the rest (a GPU profile named, no data named, one batch size).
    """
    if setup is None or (setup.target is None and setup.draft is None):
        return None
    target = None if setup.target is None else bundled_config_of(setup.target)
    draft = None if setup.draft is None else bundled_config_of(setup.draft)
    if (setup.target is not None and target is None) or (setup.draft is not None and draft is None):
        return None
    return target, draft

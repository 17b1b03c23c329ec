"""Acceptance profiles: EAGLE3 acceptance parameters per (target, draft, workload).

How often the target accepts the draft's tokens depends on the model pair and on the prompts,
not on the GPU. The bundled ``specband/data/acceptance_profiles.json`` names each profile, the
target and draft names it covers (the configs' ``_name_or_path``), its workload and where its
numbers come from:

* ``llama-3.2-1b/specforge-eagle3/specband-sweep``: the hardware profile's ``[acceptance]``
  section (fitted to the published RTX 4060 Laptop live rows);
* ``llama-3.1-8b/eagle3-8b/mt-bench``: fitted to SpecForge SpecBundle's accept lengths
  (H200, MT-bench, :mod:`specband.sim.published`).

:func:`resolve_acceptance` picks the profile of a pair and workload (``None``: the pair's
default workload). A pair or workload no profile covers *borrows* one, and says which
(:attr:`AcceptanceChoice.note`): an unknown pair borrows the hardware profile's
``[acceptance]``; a known pair with an unknown workload borrows the pair's default workload.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError
from specband.sim.draft_tree import AcceptParams
from specband.sim.profile import HardwareProfile

__all__ = ["AcceptanceChoice", "AcceptanceProfile", "acceptance_profiles", "resolve_acceptance", "workloads"]

_WORKLOAD_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_HARDWARE = "hardware-profile"


@dataclass(frozen=True)
class AcceptanceProfile:
    """One bundled acceptance profile.

    Attributes:
        name: ``<target>/<draft>/<workload>`` label.
        targets, drafts: model names (``_name_or_path``) the profile covers.
        workload: the prompts the numbers belong to (``mt-bench``, ``specband-sweep``).
        default_workload: whether it is the pair's profile when no workload is asked for.
        params: acceptance parameters, or ``None`` for the hardware profile's ``[acceptance]``.
        source: where the numbers come from.
    """

    name: str
    targets: tuple[str, ...]
    drafts: tuple[str, ...]
    workload: str
    default_workload: bool
    params: AcceptParams | None
    source: str


@dataclass(frozen=True)
class AcceptanceChoice:
    """The acceptance a model uses.

    Attributes:
        profile: the acceptance profile's name.
        params: its parameters.
        workload: the workload those parameters belong to.
        borrowed: True when no profile covers the asked pair/workload and this one stands in.
        note: one line naming the profile, and, when borrowed, what it stands in for.
    """

    profile: str
    params: AcceptParams
    workload: str
    borrowed: bool
    note: str


def _path() -> Path:
    return Path(str(resources.files("specband").joinpath("data/acceptance_profiles.json")))


def _parse(rec: Any, i: int) -> AcceptanceProfile:
    where = f"acceptance_profiles.json: profiles[{i}]"
    if not isinstance(rec, dict):
        raise ConfigError(f"{where}: expected an object")
    try:
        params_raw = rec["params"]
        if params_raw == _HARDWARE:
            params = None
        elif isinstance(params_raw, dict):
            params = AcceptParams(**{k: float(v) for k, v in params_raw.items()})
        else:
            raise ConfigError(f"{where}: field 'params': expected an object or {_HARDWARE!r}")
        return AcceptanceProfile(
            name=str(rec["name"]),
            targets=tuple(str(t) for t in rec["targets"]),
            drafts=tuple(str(d) for d in rec["drafts"]),
            workload=str(rec["workload"]),
            default_workload=bool(rec.get("default_workload", False)),
            params=params,
            source=str(rec.get("source", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


@lru_cache(maxsize=1)
def acceptance_profiles() -> tuple[AcceptanceProfile, ...]:
    """The bundled acceptance profiles, in file order.

    Raises:
        ConfigError: the bundled file is malformed.
    """
    data = json.loads(_path().read_text(encoding="utf-8"))
    return tuple(_parse(rec, i) for i, rec in enumerate(data["profiles"]))


def workloads() -> tuple[str, ...]:
    """Workload names some bundled profile covers."""
    return tuple(dict.fromkeys(p.workload for p in acceptance_profiles()))


def _params(profile: AcceptanceProfile, hardware: HardwareProfile) -> AcceptParams:
    return profile.params if profile.params is not None else hardware.accept_params()


def resolve_acceptance(
    hardware: HardwareProfile, target: str, draft: str, workload: str | None = None
) -> AcceptanceChoice:
    """The acceptance profile of a target/draft pair and workload.

    Args:
        hardware: the hardware profile (its ``[acceptance]`` backs the 1B pair and unknown pairs).
        target, draft: model names (``ModelSpec.name``: the configs' ``_name_or_path``).
        workload: ``None`` for the pair's default workload, else a name such as ``mt-bench``.

    Returns:
        the :class:`AcceptanceChoice`; ``borrowed`` when nothing covers the pair or workload.

    Raises:
        ConfigError: a workload name that is not ``[a-z0-9][a-z0-9_.-]*`` (at most 64 characters).
    """
    if workload is not None and not _WORKLOAD_RE.match(workload):
        raise ConfigError(f"--workload: expected a name such as {', '.join(workloads())}, got {workload!r}")
    pair = [p for p in acceptance_profiles() if target in p.targets and draft in p.drafts]
    if pair:
        exact = [p for p in pair if (p.workload == workload if workload else p.default_workload)]
        if exact:
            chosen = exact[0]
            return AcceptanceChoice(
                chosen.name, _params(chosen, hardware), chosen.workload, False, f"acceptance profile {chosen.name}"
            )
        chosen = next((p for p in pair if p.default_workload), pair[0])
        return AcceptanceChoice(
            chosen.name,
            _params(chosen, hardware),
            chosen.workload,
            True,
            f"acceptance: no profile for workload {workload!r} of {target} + {draft}; borrows {chosen.name}",
        )
    fallback = next(p for p in acceptance_profiles() if p.params is None)
    asked = f" on workload {workload!r}" if workload else ""
    return AcceptanceChoice(
        fallback.name,
        hardware.accept_params(),
        fallback.workload,
        True,
        f"acceptance: no profile for {target} + {draft}{asked}; borrows {fallback.name} "
        f"(the hardware profile {hardware.name}'s [acceptance])",
    )

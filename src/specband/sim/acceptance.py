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
default workload). A pair or workload no profile covers *borrows* one, and says which and why
(:attr:`AcceptanceChoice.note`): a known pair with an unknown workload borrows the pair's
default workload; an unknown pair whose target spec is given (``like``) borrows the profiled
pair nearest to it (:func:`nearest_profile`: the same target first, then the same kind, dense
or mixture-of-experts, then the nearest number of parameters a token uses, on the asked
workload where that pair has it); an unknown pair without a spec borrows the hardware
profile's ``[acceptance]``.
:func:`fitted_choice` replaces a choice's parameters by a fit to the user's own measurements
(:mod:`specband.sim.acceptance_fit`, ``--acceptance-from FILE``).

Every choice has a 95 % interval on a config's accept length
(:meth:`AcceptanceChoice.accept_length_interval`): a fit's own interval; a profile's on its own
workload, :data:`PROFILE_ACCEPT_SD`; a borrowed one, the published spread of acceptance across
workloads (:data:`BORROWED_ACCEPT_FACTOR`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError
from specband.sim.acceptance_fit import FittedAcceptance
from specband.sim.draft_tree import AcceptParams, accept_length
from specband.sim.hfconfig import ModelSpec, bundled_model_configs, load_model_spec
from specband.sim.profile import HardwareProfile

__all__ = [
    "BORROWED_ACCEPT_FACTOR",
    "PROFILE_ACCEPT_SD",
    "AcceptanceChoice",
    "AcceptanceProfile",
    "acceptance_profiles",
    "fitted_choice",
    "nearest_profile",
    "pair_profile",
    "resolve_acceptance",
    "workloads",
]

#: Relative sd of a bundled profile's accept length on its own workload: the profiles
#: reproduce the accept lengths they were fitted to within 2.2 % (Llama-3.1-8B, MT-bench, H200:
#: median 1.2 %, ``simulate --calibration-report --against published-datacenter``); 3 % leaves
#: room for the configs no published row holds.
PROFILE_ACCEPT_SD = 0.03
#: Factor either way on a *borrowed* accept length (95 %): one pair and config on one GPU
#: measures accept length 1.72 on one workload and 3.05 on another (SpecForge SpecBundle,
#: H200, Llama-3.1-8B, (3,1,4); issue 29), a factor 1.77; a borrowed pair differs more still.
BORROWED_ACCEPT_FACTOR = 1.8
_Z95 = 1.959964

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
        fit: the fit to the user's measurements (``--acceptance-from``), or ``None``.
    """

    profile: str
    params: AcceptParams
    workload: str
    borrowed: bool
    note: str
    fit: FittedAcceptance | None = None

    @property
    def source(self) -> str:
        """Where the acceptance comes from, as a simulated row's ``acceptance_source`` says
        it: ``"fitted to N configs of FILE"``, ``"profile NAME"`` or ``"borrowed NAME"``."""
        if self.fit is not None:
            return self.fit.label
        return f"{'borrowed' if self.borrowed else 'profile'} {self.profile}"

    def accept_length_interval(
        self, action: Sequence[int], scales: Mapping[str, float] | None = None
    ) -> tuple[float, float, float]:
        """``(estimate, lo95, hi95)`` accept length of ``(steps, topk, num_draft_tokens)``,
        within ``[1, steps + 1]`` (see the module docstring); the baseline is ``(1, 1, 1)``.
        ``scales``: a fit's interval factors (:meth:`FittedAcceptance.accept_length_interval`)."""
        if self.fit is not None:
            return self.fit.accept_length_interval(action, scales)
        steps, topk, tokens = (int(x) for x in action)
        if steps == 0:
            return 1.0, 1.0, 1.0
        est = accept_length((steps, topk, tokens), self.params)
        if self.borrowed:
            lo, hi = est / BORROWED_ACCEPT_FACTOR, est * BORROWED_ACCEPT_FACTOR
        else:
            half = math.exp(_Z95 * PROFILE_ACCEPT_SD)
            lo, hi = est / half, est * half
        top = steps + 1.0
        return est, min(max(lo, 1.0), top), min(max(hi, 1.0), top)


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


def pair_profile(target: str, draft: str) -> AcceptanceProfile | None:
    """The bundled profile of a target/draft pair's default workload (names as
    ``ModelSpec.name``), or ``None`` when no profile covers the pair: two pairs with the same
    profile are the same pair to the simulator (e.g. the lmsys and yuhuili 8B heads)."""
    pair = [p for p in acceptance_profiles() if target in p.targets and draft in p.drafts]
    return next((p for p in pair if p.default_workload), pair[0] if pair else None)


def _params(profile: AcceptanceProfile, hardware: HardwareProfile) -> AcceptParams:
    return profile.params if profile.params is not None else hardware.accept_params()


@lru_cache(maxsize=1)
def _bundled_targets() -> dict[str, ModelSpec]:
    """The bundled target configs by model name (``_name_or_path``)."""
    specs = [load_model_spec(name, draft=False) for name in bundled_model_configs() if not name.startswith("eagle3-")]
    return {spec.name: spec for spec in specs}


def _active_b(spec: ModelSpec) -> float:
    """Parameters one token uses, billions (half the dense FLOPs per token)."""
    return spec.dense_flops_per_token / 2e9


def _kind(spec: ModelSpec) -> str:
    return "mixture-of-experts" if spec.moe is not None else "dense"


def nearest_profile(like: ModelSpec, workload: str | None = None) -> tuple[AcceptanceProfile, ModelSpec] | None:
    """The profiled pair whose target is nearest to ``like``, and that target's spec: a profile
    of the same target first, then one of the same kind (dense or mixture-of-experts), then the
    smallest ``|log(active parameters ratio)|``; among that pair's profiles the one on
    ``workload`` when it has it, else its default. ``None`` when no profile's target is bundled.

    Why this order: acceptance belongs to the draft's training and the target's predictions, and
    the published accept lengths differ more between kinds (SpecBundle, H200, bs 8, MT-bench
    (5,1,6): Llama-3.3-70B 3.53-3.62, Qwen3-30B-A3B 2.83) than between sizes of one kind
    (Llama-3.1-8B 3.55 at bs 1); either way a borrowed accept length carries
    :data:`BORROWED_ACCEPT_FACTOR`.
    """
    known = _bundled_targets()
    scored = []
    for prof in acceptance_profiles():
        spec = next((known[t] for t in prof.targets if t in known), None)
        if spec is None:
            continue
        same = like.name in prof.targets
        kind = _kind(spec) != _kind(like)
        size = abs(math.log(_active_b(spec) / _active_b(like)))
        scored.append(((not same, kind, round(size, 6)), prof, spec))
    if not scored:
        return None
    key, _prof, spec = min(scored, key=lambda item: item[0])
    pair = [p for k, p, _s in scored if k == key]
    chosen = next((p for p in pair if workload and p.workload == workload), None)
    chosen = chosen or next((p for p in pair if p.default_workload), pair[0])
    return chosen, spec


def resolve_acceptance(
    hardware: HardwareProfile,
    target: str,
    draft: str,
    workload: str | None = None,
    *,
    like: ModelSpec | None = None,
) -> AcceptanceChoice:
    """The acceptance profile of a target/draft pair and workload.

    Args:
        hardware: the hardware profile (its ``[acceptance]`` backs the 1B pair and unknown pairs).
        target, draft: model names (``ModelSpec.name``: the configs' ``_name_or_path``).
        workload: ``None`` for the pair's default workload, else a name such as ``mt-bench``.
        like: the target's spec: an unknown pair then borrows the nearest profiled pair
            (:func:`nearest_profile`) instead of the hardware profile's ``[acceptance]``.

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
    asked = f" on workload {workload!r}" if workload else ""
    near = nearest_profile(like, workload) if like is not None else None
    if near is not None and like is not None:
        chosen, spec = near
        why = (
            f"the nearest profiled pair: a {_kind(spec)} target using {_active_b(spec):.1f}B parameters per token, "
            f"against {_kind(like)} {_active_b(like):.1f}B; 95 % interval x/÷ {BORROWED_ACCEPT_FACTOR:g}"
        )
        return AcceptanceChoice(
            chosen.name,
            _params(chosen, hardware),
            chosen.workload,
            True,
            f"acceptance: no profile for {target} + {draft}{asked}; borrows {chosen.name} ({why})",
        )
    fallback = next(p for p in acceptance_profiles() if p.params is None)
    return AcceptanceChoice(
        fallback.name,
        hardware.accept_params(),
        fallback.workload,
        True,
        f"acceptance: no profile for {target} + {draft}{asked}; borrows {fallback.name} "
        f"(the hardware profile {hardware.name}'s [acceptance])",
    )


def fitted_choice(base: AcceptanceChoice, fit: FittedAcceptance) -> AcceptanceChoice:
    """``base`` with the fitted parameters: not borrowed (the user's own measurements), its
    note naming the fit and the profile the fit started from.

    Args:
        base: the pair's resolved choice (the fit's prior).
        fit: the fit (:func:`specband.sim.acceptance_fit.fit_acceptance`).
    """
    prior = f"{'borrowed ' if base.borrowed else ''}profile {base.profile}"
    return AcceptanceChoice(
        base.profile,
        fit.params,
        base.workload,
        False,
        f"acceptance {fit.label} (parameters {', '.join(fit.free)} fitted; the rest from {prior})",
        fit,
    )

"""specband's requirements stay installable beside the newest sglang release (issue 22).

Offline: sglang's own metadata (``importlib.metadata.requires("sglang")``; CI installs the
release ``.ci/install-sglang`` pins, with ``--no-deps``) against ``pyproject.toml``. For every
package both name, the two specifier sets must share a version: a specband lower or upper
bound that excludes every version sglang allows fails here. The same holds one level down for
the packages sglang pins exactly (``transformers==X``) when that version is installed here, so
that, e.g., transformers' own ``huggingface-hub`` range is checked too. Markers are evaluated
for the GPU box sglang serves on: Linux, x86_64, this Python.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
GPU_BOX = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "extra": ""}


def _applies(req: Requirement) -> bool:
    return req.marker is None or req.marker.evaluate(GPU_BOX)


def specifiers_overlap(a: SpecifierSet, b: SpecifierSet) -> bool:
    """Whether some version satisfies both sets. Candidates: every version either names, a
    point just above and just below each (``X.0.0.1``, ``X`` minus a patch step), ``0`` and a
    very large version; enough for the ``==``, ``>=``, ``>``, ``<``, ``<=``, ``~=`` and
    ``!=`` bounds requirements use."""
    named: list[Version] = []
    for spec in (*a, *b):
        try:
            named.append(Version(spec.version.replace(".*", "")))
        except InvalidVersion:
            continue
    candidates = {Version("0"), Version("99999")}
    for v in named:
        candidates.add(v)
        candidates.add(Version(f"{v.base_version}.0.0.1"))
        release = list(v.release) + [0] * (3 - len(v.release))
        for i in range(len(release)):  # the next release at each level: 1.2.3 -> 2, 1.3, 1.2.4
            bumped = [*release[:i], release[i] + 1]
            candidates.add(Version(".".join(map(str, bumped))))
        if any(release):
            idx = max(i for i, x in enumerate(release) if x)
            lower = [*release[:idx], release[idx] - 1, 999]
            candidates.add(Version(".".join(map(str, lower))))
    return any(a.contains(c, prereleases=True) and b.contains(c, prereleases=True) for c in candidates)


def _specband_requirements() -> dict[str, SpecifierSet]:
    """Every requirement of pyproject.toml (dependencies and every extra), by package name,
    the specifier sets of repeated names combined."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for reqs in project.get("optional-dependencies", {}).values():
        texts.extend(reqs)
    out: dict[str, SpecifierSet] = {}
    for text in texts:
        req = Requirement(text)
        if _applies(req):
            name = canonicalize_name(req.name)
            out[name] = out.get(name, SpecifierSet()) & req.specifier
    return out


def _conflicts(mine: dict[str, SpecifierSet], theirs: list[str], who: str) -> list[str]:
    out = []
    for text in theirs:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if name in mine and _applies(req) and not specifiers_overlap(mine[name], req.specifier):
            out.append(f"{name}: specband wants {mine[name] or 'any'}, {who} wants {req.specifier}")
    return out


def test_overlap_finds_real_conflicts() -> None:
    assert specifiers_overlap(SpecifierSet(">=1.24"), SpecifierSet("==2.4.6"))
    assert specifiers_overlap(SpecifierSet(">=2.2"), SpecifierSet("==2.14.1"))
    assert specifiers_overlap(SpecifierSet(">=0.34"), SpecifierSet(">=1.5.0,<2.0"))
    assert specifiers_overlap(SpecifierSet(">1.2"), SpecifierSet("<1.3"))
    assert specifiers_overlap(SpecifierSet("~=1.4"), SpecifierSet("!=1.5.0"))
    assert specifiers_overlap(SpecifierSet("<3"), SpecifierSet(""))
    assert not specifiers_overlap(SpecifierSet(">=1.15"), SpecifierSet("==1.14.1"))
    assert not specifiers_overlap(SpecifierSet("<2"), SpecifierSet(">=2.1"))
    assert not specifiers_overlap(SpecifierSet(">=0.34,<1"), SpecifierSet(">=1.5.0,<2.0"))
    assert not specifiers_overlap(SpecifierSet("==2.13.0"), SpecifierSet("==2.14.1"))
    assert _conflicts({"torch": SpecifierSet("<2.14")}, ["torch==2.14.1"], "sglang") == [
        "torch: specband wants <2.14, sglang wants ==2.14.1"
    ]


def _ci_sglang_version() -> str:
    text = (ROOT / ".ci" / "install-sglang").read_text()
    found = re.search(r"sglang==([0-9][0-9A-Za-z.]*)", text)
    assert found, ".ci/install-sglang names no sglang==X"
    return found.group(1)


def test_requirements_compatible_with_newest_sglang_pins() -> None:
    try:
        installed = md.version("sglang")
    except md.PackageNotFoundError:
        if os.environ.get("SPECBAND_REQUIRE_SGLANG") == "1":
            pytest.fail("SPECBAND_REQUIRE_SGLANG=1 but sglang is not installed (see README 'Test')")
        pytest.skip("sglang is not installed (.ci/install-sglang)")
    assert installed == _ci_sglang_version(), f"installed sglang {installed} is not the one CI pins"
    mine = _specband_requirements()
    sglang_reqs = md.requires("sglang") or []
    shared = {canonicalize_name(Requirement(t).name) for t in sglang_reqs} & set(mine)
    # the packages both name today; a rename on either side shows up here
    assert {"numpy", "scipy", "torch", "nvidia-ml-py", "prometheus-client"} <= shared, shared
    problems = _conflicts(mine, sglang_reqs, f"sglang {installed}")
    checked_below = []
    for text in sglang_reqs:  # one level down, for what sglang pins exactly
        req = Requirement(text)
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if not pins or not _applies(req):
            continue
        try:
            version = md.version(req.name)
        except md.PackageNotFoundError:
            continue
        if Version(version) != Version(pins[0]):
            continue
        checked_below.append(req.name)
        problems += _conflicts(mine, md.requires(req.name) or [], f"{req.name} {version} (pinned by sglang)")
    assert "transformers" in checked_below or os.environ.get("SPECBAND_REQUIRE_SGLANG") != "1", checked_below
    assert problems == []

"""A Hugging Face hub cache built in a temporary folder (refs, snapshots, blobs), as
``huggingface_hub`` lays it out, so hub ids resolve offline (conftest sets HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

POLICY_REPO = "Pradheep1647/eagle3-speculative-decoding-policy"
DATASET_REPO = "Pradheep1647/eagle3-speculative-decoding-energy-sweep"
PUBLISHED_TARGET_RAW = "bundled target"


def add_snapshot(
    cache: Path,
    repo_id: str,
    files: Mapping[str, bytes],
    *,
    repo_type: str = "model",
    ref: str = "main",
    commit: str | None = None,
) -> Path:
    """Add one revision of a repo to the cache: blobs named by their sha256, snapshot files
    as relative symlinks to them, and ``refs/<ref>`` holding the commit. Returns the snapshot."""
    kind = {"model": "models", "dataset": "datasets"}[repo_type]
    repo = cache / f"{kind}--{repo_id.replace('/', '--')}"
    commit = commit or hashlib.sha1(f"{repo_id}@{ref}".encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (len(Path(name).parts) + 1), "blobs", blob.name))
    ref_file = repo / "refs" / ref
    ref_file.parent.mkdir(parents=True, exist_ok=True)
    ref_file.write_text(commit)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache that huggingface_hub (and specband) use for this test."""
    cache = tmp_path / "hf-home" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HOME", str(cache.parent))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture(scope="session")
def model_card_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The eight files of the study's model card, as `specband train` writes them (no
    manifest, no sidecars, no skops copies: what the hub repo holds)."""
    from specband.artifacts.folder import ARTIFACT_FILES
    from specband.cli import main

    out = tmp_path_factory.mktemp("card") / "models"
    try:
        main(["train", "--features", "contract", "--out", str(out)])
    except SystemExit as exc:
        assert exc.code == 0
    return {rel: (out / rel).read_bytes() for rel in ARTIFACT_FILES.values()}


def config_bytes(config: Mapping) -> bytes:
    return json.dumps(config).encode()


MakeRepo = Callable[..., Path]

"""Install paths (issue 22): ``pip install specband`` without torch runs the torch-free
commands, and a torch folder or algorithm fails with one line naming ``specband[torch]``.

Two tests of it:

* in-process cheap: a subprocess whose ``import torch`` raises ImportError (a meta-path
  finder), running the CLI;
* a fresh venv with no torch at all (marked ``fresh_venv``, about a minute): specband's wheel
  and its dependencies' wheels, repacked offline from the distributions installed here, go in
  with ``pip install --no-index --find-links``, so pip's resolver checks that specband's
  metadata asks for nothing that is missing (torch in particular).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
TARGET = "unsloth/Llama-3.2-1B-Instruct"
DRAFT = "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct"
PICK_FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
EXTRA_LINE = "pip install 'specband[torch]'"

BLOCK_TORCH = """
import importlib.abc, sys
class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, _NoTorch())
from specband.cli import main
sys.argv = ["specband", *sys.argv[1:]]
main()
"""


def _run_without_torch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "notorch.py"
    script.write_text(BLOCK_TORCH)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )


def _assert_pick_line(stdout: str) -> None:
    line = next(ln for ln in stdout.splitlines() if "--speculative-num-steps" in ln)
    for flag in PICK_FLAGS:
        value = line.split(flag + " ", 1)[1].split()[0]
        assert int(value) >= 1, line


def test_torch_free_commands_run_with_torch_blocked(tmp_path: Path) -> None:
    rec = _run_without_torch(tmp_path, "recommend", "-b", "16")
    assert rec.returncode == 0, rec.stderr
    assert "--speculative-algorithm EAGLE3" in rec.stdout
    _assert_pick_line(rec.stdout)

    launch = _run_without_torch(tmp_path, "launch", "--dry-run", "--target", TARGET, "--draft", DRAFT, "-b", "16")
    assert launch.returncode == 0, launch.stderr
    assert "sglang.launch_server" in launch.stdout and f"--speculative-draft-model-path {DRAFT}" in launch.stdout
    _assert_pick_line(launch.stdout)

    # plain `train`: the five torch-free algorithms, one line naming the three skipped
    train = _run_without_torch(tmp_path, "train", "--out", "models")
    assert train.returncode == 0, train.stderr
    skipped = [ln for ln in train.stderr.splitlines() if "skipped" in ln]
    assert skipped == [f"note: skipped mlp_bandit, cql, bcq: their policy.pth files need torch: {EXTRA_LINE}"]
    assert "trained 5 algorithm(s)" in train.stdout
    assert sorted(p.name for p in (tmp_path / "models").iterdir() if p.is_dir()) == [
        "doubly_robust",
        "gbt",
        "linucb",
        "lookup_table",
        "thompson_sampling",
    ]
    rec_folder = _run_without_torch(tmp_path, "recommend", "-b", "4", "--models", "models", "--algo", "linucb")
    assert rec_folder.returncode == 0, rec_folder.stderr
    _assert_pick_line(rec_folder.stdout)

    # evaluation trains the NumPy networks in memory: all eight, no torch
    ev = _run_without_torch(tmp_path, "evaluate", "--holdout", "none", "--algo", "cql", "--algo", "lookup_table")
    assert ev.returncode == 0, ev.stderr
    assert "cql" in ev.stdout and "lookup_table" in ev.stdout


def test_torch_algorithm_or_bare_pth_fails_with_one_line(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    trained_models = tmp_path / "trained"  # with torch, in this process
    assert run_cli("train", "--algo", "mlp_bandit", "--algo", "bcq", "--out", str(trained_models)).exit_code == 0
    train = _run_without_torch(tmp_path, "train", "--out", "m", "--algo", "lookup_table", "--algo", "cql")
    assert train.returncode == 2
    assert train.stderr.splitlines() == [
        f"error: --algo cql (its policy.pth) needs torch, which is not installed: {EXTRA_LINE}"
    ]
    assert not (tmp_path / "m").exists()  # nothing written half-way

    # a folder specband wrote carries a .safetensors copy of each .pth: read without torch
    ok = _run_without_torch(tmp_path, "recommend", "-b", "16", "--models", str(trained_models), "--algo", "bcq")
    assert ok.returncode == 0, ok.stderr
    _assert_pick_line(ok.stdout)

    # the study's own layout: a bare policy.pth needs torch
    bare = tmp_path / "bare"
    shutil.copytree(trained_models, bare)
    (bare / "mlp_bandit" / "policy.safetensors").unlink()
    rec = _run_without_torch(tmp_path, "recommend", "-b", "16", "--models", str(bare), "--algo", "mlp_bandit")
    assert rec.returncode == 2
    pth = bare / "mlp_bandit" / "policy.pth"
    assert rec.stderr.splitlines()[-1] == (
        f"error: {pth} (a .pth file without a .safetensors copy) needs torch, which is not installed: {EXTRA_LINE}"
    )
    assert "Traceback" not in rec.stderr


# ---------------------------------------------------------------------- a fresh venv
def _requirements_closure(names: list[str]) -> dict[str, md.Distribution]:
    """The installed distributions ``names`` need, recursively (no extras)."""
    out: dict[str, md.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in out:
            continue
        dist = md.distribution(name)
        out[name] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return out


def _repack_wheel(dist: md.Distribution, out_dir: Path) -> Path:
    """A wheel of an installed distribution: its RECORD's files under site-packages, with a
    fresh RECORD (scripts and files outside site-packages left out; pip makes the scripts)."""
    info = Path(str(dist._path))  # type: ignore[attr-defined]
    site = info.parent
    wheel_meta = (info / "WHEEL").read_text()
    tags = [ln.split(":", 1)[1].strip().split("-") for ln in wheel_meta.splitlines() if ln.startswith("Tag:")]
    tag = "-".join(".".join(sorted({t[i] for t in tags})) for i in range(3))  # py2.py3-none-any
    name = dist.metadata["Name"].replace("-", "_")
    path = out_dir / f"{name}-{dist.version}-{tag}.whl"
    record_name = f"{info.name}/RECORD"
    lines = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for file in dist.files or []:
            rel = file.as_posix()
            if rel.startswith("..") or "__pycache__" in rel or rel == record_name or rel.endswith("/INSTALLER"):
                continue
            if rel.endswith(("/direct_url.json", "/REQUESTED")):
                continue
            src = site / rel
            if not src.is_file():
                continue
            data = src.read_bytes()
            zf.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            lines.append(f"{rel},sha256={digest},{len(data)}")
        lines.append(f"{record_name},,")
        zf.writestr(record_name, "\n".join(lines) + "\n")
    return path


def _specband_requirements() -> list[str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = []
    for text in project["dependencies"]:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate():
            out.append(req.name)
    return out


@pytest.mark.fresh_venv
def test_fresh_venv_without_torch_runs_recommend_and_launch(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", reason="the wheel builds offline with setuptools (the test extra)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    deps = _requirements_closure(_specband_requirements())
    assert "torch" not in deps, "a specband requirement pulls in torch"
    for dist in deps.values():
        _repack_wheel(dist, wheels)
    # specband's own wheel, built from a copy of the tree (no build/ or egg-info left here)
    src = tmp_path / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    pip_env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    pip_env.pop("PYTHONPATH", None)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["-w", str(wheels), str(src)],
        capture_output=True,
        text=True,
        env=pip_env,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    bindir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / "python"
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-compile",
            "--no-index",
            "--find-links",
            str(wheels),
            "specband",
        ],
        capture_output=True,
        text=True,
        env=pip_env,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
        env=pip_env,
        timeout=60,
    )
    assert probe.stdout.strip() == "True", "torch is importable in the fresh venv"

    run_env = {**pip_env, "NO_COLOR": "1", "HF_HUB_OFFLINE": "1", "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    work = tmp_path / "work"
    work.mkdir()
    specband = str(bindir / "specband")
    rec = subprocess.run(
        [specband, "recommend", "-b", "16"], capture_output=True, text=True, env=run_env, cwd=work, timeout=300
    )
    assert rec.returncode == 0, rec.stderr
    assert "--speculative-algorithm EAGLE3" in rec.stdout
    _assert_pick_line(rec.stdout)
    launch = subprocess.run(
        [specband, "launch", "--dry-run", "--target", TARGET, "--draft", DRAFT, "-b", "16"],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=work,
        timeout=300,
    )
    assert launch.returncode == 0, launch.stderr
    assert "-m sglang.launch_server" in launch.stdout
    assert f"--speculative-draft-model-path {DRAFT}" in launch.stdout
    _assert_pick_line(launch.stdout)
    # and the one line naming the extra when a torch algorithm is asked for
    train = subprocess.run(
        [specband, "train", "--algo", "mlp_bandit", "--out", "m"],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=work,
        timeout=300,
    )
    assert train.returncode == 2
    assert train.stderr.strip().splitlines()[-1].endswith(EXTRA_LINE)

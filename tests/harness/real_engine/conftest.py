"""Fixtures of the real-engine tests (marker ``real_engine``): the engines' interpreters, the
tiny model pairs, and servers shared across tests.

The engines live in their own venvs (``.ci/install-engines``); the tests find their interpreters
through ``SPECBAND_SGLANG_PYTHON`` and ``SPECBAND_VLLM_PYTHON``. Without one the tests skip, or
fail when ``SPECBAND_REQUIRE_REAL_ENGINES=1`` (CI sets it). On a CPU without AMX (no
``amx_tile``) sglang's servers get ``SPECBAND_SGLANG_ASSUME_AMX=1`` from specband's CPU preset
(:func:`specband.engines.cpu.sglang_cpu_preset`), which the install's one-line edit of sglang
reads; on a CPU without AVX-512 BF16 + VNNI the install skips sglang, and its tests skip, naming the
CPU flags, even under ``SPECBAND_REQUIRE_REAL_ENGINES=1`` (sglang's kernel cannot run there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from specband.engines.cpu import cpu_has_avx512_bf16

REQUIRE_ENV = "SPECBAND_REQUIRE_REAL_ENGINES"
ENGINE_ENV = {"sglang": "SPECBAND_SGLANG_PYTHON", "vllm": "SPECBAND_VLLM_PYTHON"}
BUILDER = Path(__file__).with_name("build_tiny_models.py")
RECORDED = Path(__file__).with_name("recorded")


def engine_python(engine: str) -> str:
    """The interpreter of ``engine``'s venv; skips (or fails under ``SPECBAND_REQUIRE_REAL_ENGINES=1``)
    when it is not there. sglang on a CPU without AVX-512 BF16 + VNNI always skips, naming the
    flags: ``.ci/install-engines`` skips it there, as its kernel cannot run."""
    var = ENGINE_ENV[engine]
    python = os.environ.get(var, "")
    if python and os.access(python, os.X_OK):
        return python
    why = f"{var} is {'unset' if not python else repr(python) + ', not an executable'} (.ci/install-engines)"
    if engine == "sglang" and not cpu_has_avx512_bf16():
        # the install skips sglang on such a CPU (its kernel would die with SIGILL): nothing to require
        pytest.skip(f"{why}: this CPU lacks avx512_bf16/avx512_vnni, which sglang's CPU kernel executes")
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {why}")
    pytest.skip(why)


def engine_cache_env(tmp_root: Path) -> dict[str, str]:
    """Cache folders for an engine run, out of $HOME (the CI install's cache, else tmp)."""
    cache = Path(os.environ.get("SPECBAND_ENGINES_CACHE") or tmp_root)
    return {
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "SGLANG_CACHE_DIR": str(cache / "sglang"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "XDG_CACHE_HOME": str(cache / "xdg"),
        "HF_HOME": str(cache / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


@dataclass(frozen=True)
class ModelPair:
    """A tiny target and its EAGLE3 draft (folders)."""

    target: Path
    draft: Path


@dataclass(frozen=True)
class TinyModels:
    """The two pairs and the token the predictable target always generates."""

    random: ModelPair
    predictable: ModelPair
    predicted_token: int


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """Both pairs, built offline in seconds by ``build_tiny_models.py`` with an engine's interpreter
    (it has torch, transformers, tokenizers and safetensors)."""
    pythons = [os.environ.get(v, "") for v in (ENGINE_ENV["vllm"], ENGINE_ENV["sglang"])]
    python = next((p for p in pythons if p and os.access(p, os.X_OK)), None)
    if python is None:
        engine_python("vllm")  # skips or fails with the reason
        python = sys.executable
    out = tmp_path_factory.mktemp("tiny-models")
    proc = subprocess.run(
        [python, str(BUILDER), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **engine_cache_env(out / "cache")},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    pair = {k: ModelPair(out / k / "target", out / k / "draft") for k in ("random", "predictable")}
    return TinyModels(pair["random"], pair["predictable"], int(info["predicted_token"]))


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The vLLM venv's interpreter."""
    return engine_python("vllm")


@pytest.fixture(scope="session")
def sglang_python() -> str:
    """The sglang venv's interpreter."""
    return engine_python("sglang")


@pytest.fixture(scope="session")
def engine_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A session folder for server logs and caches."""
    yield tmp_path_factory.mktemp("engines")

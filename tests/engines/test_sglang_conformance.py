"""Every launch line specband builds goes through sglang's own parser, resolution and
checks (``prepare_server_args``, ``ServerArgs.resolve_once``, ``check_server_args``):
19 actions x batch sizes 1, 4, 8, 16 x first and retry mem fraction x both attention-
backend modes. A line sglang refuses, or a flag specband set that sglang resolves to
another value, fails. The emulator's strict parser is held to sglang's parser too.

Needs sglang installed (``.ci/run`` installs it, pinned, without its CUDA dependency
tree; docs/real-engines.md). Locally the tests skip when sglang cannot be imported; with
``SPECBAND_REQUIRE_SGLANG=1`` (set by ``.ci/run``) they fail instead.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specband.contract.actions import ACTIONS, EXTENDED_ACTIONS
from specband.engines.serverconfig import ServerConfig, build_launch_command
from specband.engines.sglang_flags import (
    ATTENTION_BACKEND_CHOICES,
    DTYPE_CHOICES,
    NEWEST_VERSION,
    STRICT_FLAGS_FILE,
    field_for,
    flag_table_from_sglang,
    parse_version,
    strict_parser,
)

_TARGET_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}
_DRAFT_CONFIG = {
    **{k: v for k, v in _TARGET_CONFIG.items() if k not in ("rope_scaling", "tie_word_embeddings")},
    "architectures": ["LlamaForCausalLMEagle3"],
    "num_hidden_layers": 1,
    "draft_vocab_size": 32000,
    "torch_dtype": "float16",
}


class _ModuleStub(types.ModuleType):
    """A module whose every attribute is a placeholder (for torchvision, below)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder()


class _Placeholder:
    def __getattr__(self, name: str) -> Any:
        return _Placeholder()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _Placeholder()

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _TorchvisionStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """sglang's config modules import torchvision (image processors of multimodal
    models); the package index's torchvision does not load against CPU torch and an
    unpinned one replaces torch. Launch-line resolution never uses it, so a placeholder
    stands in, installed after transformers decided torchvision is absent."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _ModuleStub(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def sglang(require_module: Callable[..., Any]) -> Iterator[Any]:
    """``sglang.srt.server_args`` (imported once), or a skip / failure without sglang
    (``require_module``); the torchvision placeholder is removed again after this module's tests."""
    sglang_pkg = require_module("sglang", "pip install --no-deps sglang==0.5.23; see docs/real-engines.md")
    os.environ.setdefault("SGLANG_LOG_LEVEL", "error")
    stub = None
    if importlib.util.find_spec("torchvision") is None:
        import transformers.utils.import_utils  # noqa: F401 (decides torchvision is absent first)

        stub = _TorchvisionStub()
        sys.meta_path.insert(0, stub)
    try:
        from sglang.srt import server_args

        assert sglang_pkg.__version__ == NEWEST_VERSION, f"the test pins sglang {NEWEST_VERSION}"
        # resolution imports more of sglang on first use: run one while the stub is in place
        yield server_args
    finally:
        if stub is not None:  # later tests in this session must not see a placeholder torchvision
            sys.meta_path.remove(stub)
            for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
                del sys.modules[name]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """Target and draft folders holding only a ``config.json``."""
    root = tmp_path_factory.mktemp("models")
    for name, config in (("target", _TARGET_CONFIG), ("draft", _DRAFT_CONFIG)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
    return str(root / "target"), str(root / "draft")


def _dest_by_flag(server_args: Any) -> dict[str, str]:
    parser = argparse.ArgumentParser(prog="sglang serve")
    server_args.ServerArgs.add_cli_args(parser)
    return {flag: action.dest for action in parser._actions for flag in action.option_strings}


def _set_flags(argv: list[str], dest_by_flag: dict[str, str]) -> dict[str, str]:
    """``{dest: value}`` of every ``--flag value`` specband set."""
    out = {}
    for i, arg in enumerate(argv):
        if arg in dest_by_flag and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[dest_by_flag[arg]] = argv[i + 1]
    return out


def _same(resolved: Any, given: str) -> bool:
    if isinstance(resolved, bool) or resolved is None:
        return False
    if isinstance(resolved, (int, float)):
        return float(resolved) == float(given)
    return str(resolved) == given


def test_every_launch_line_parses_resolves_and_keeps_its_values_in_sglang(sglang, models):
    """Every action of both sets (the extended one holds the contract's 19 first)."""
    target, draft = models
    dest_by_flag = _dest_by_flag(sglang)
    logging.disable(logging.WARNING)
    checked = 0
    try:
        for backend in ("flashinfer", "auto"):
            config = ServerConfig(
                model_path=target, draft_model_path=draft, attention_backend=backend, engine_version=NEWEST_VERSION
            )
            for bs in (1, 4, 8, 16):
                for mem in (0.65, 0.55):
                    for action in EXTENDED_ACTIONS:
                        line = build_launch_command(config, action, bs, mem)
                        argv = line[line.index("--model-path") :] + ["--device", "cuda"]
                        try:
                            args = sglang.prepare_server_args(argv)
                        except SystemExit as exc:
                            pytest.fail(f"sglang refuses {' '.join(argv)} (exit {exc.code})")
                        args.resolve_once()
                        args.check_server_args()
                        resolved = args.resolved_dict()
                        for dest, value in _set_flags(argv, dest_by_flag).items():
                            if dest == "device":
                                continue
                            assert _same(resolved[dest], value), (
                                f"{' '.join(argv)}: sglang resolves {dest} to {resolved[dest]!r}, specband set {value}"
                            )
                        checked += 1
    finally:
        logging.disable(logging.NOTSET)
    assert EXTENDED_ACTIONS[: len(ACTIONS)] == ACTIONS
    assert checked == 2 * 4 * 2 * len(EXTENDED_ACTIONS) == 704


def test_the_old_flag_spelling_is_what_sglang_refuses(sglang, models, capsys):
    """The bug this guards against: ``--cuda-graph-max-bs`` is ambiguous in 0.5.23."""
    target, _ = models
    with pytest.raises(SystemExit) as info:
        sglang.prepare_server_args(["--model-path", target, "--cuda-graph-max-bs", "16"])
    assert info.value.code == 2
    assert "ambiguous option: --cuda-graph-max-bs could match" in capsys.readouterr().err
    assert field_for("cuda_graph_max_bs", parse_version(NEWEST_VERSION)) in _dest_by_flag(sglang).values()


def test_the_strict_flag_table_is_sglangs_parser(sglang):
    """The emulator's strict parser (without sglang) is built from this file: it must
    list exactly sglang's options (regenerate: ``python -m specband.engines.sglang_flags``)."""
    lines = [json.loads(line) for line in Path(STRICT_FLAGS_FILE).read_text().splitlines() if line.strip()]
    assert lines == flag_table_from_sglang()


def test_specbands_dtype_and_attention_backend_choices_are_sglangs(sglang, models):
    """``--dtype``/``--attention-backend`` values specband takes (checked before a line is
    printed or started) are exactly the choices of sglang's own parser; each of them parses there."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    sglang.ServerArgs.add_cli_args(parser)
    choices = {action.dest: action.choices for action in parser._actions}
    assert tuple(choices["dtype"]) == DTYPE_CHOICES
    assert tuple(choices["attention_backend"]) == ATTENTION_BACKEND_CHOICES
    target, _ = models
    for flag, value in (("--dtype", DTYPE_CHOICES[-1]), ("--attention-backend", ATTENTION_BACKEND_CHOICES[-1])):
        assert getattr(parser.parse_args(["--model-path", target, flag, value]), flag[2:].replace("-", "_")) == value


@pytest.mark.parametrize(
    "argv",
    [
        ["--cuda-graph-max-bs", "16"],
        ["--bogus-flag", "1"],
        ["--port", "x"],
        ["--dtype", "float99"],
        ["--cuda-graph-max-bs-d", "4"],
        ["--speculative-num-steps"],
    ],
)
def test_the_strict_parser_refuses_what_sglang_refuses_with_its_message(sglang, models, capsys, argv):
    target, _ = models
    full = ["--model-path", target, *argv]
    outcomes = []
    for parse in (sglang.prepare_server_args, strict_parser().parse_args):
        try:
            parse(full)
            outcomes.append((0, ""))
        except SystemExit as exc:
            err = capsys.readouterr().err
            outcomes.append((exc.code, err.strip().splitlines()[-1]))
    assert outcomes[0] == outcomes[1]


def test_the_emulator_uses_sglangs_parser_and_resolves_as_sglang(sglang, models, monkeypatch, capsys):
    from specband.core.errors import ConfigError
    from specband.emulator.launchargs import SGLANG_PARSER_ENV, parse_launch_args

    target, draft = models
    monkeypatch.setenv(SGLANG_PARSER_ENV, "1")
    spec = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", draft]
    assert tuple(parse_launch_args(["--model-path", target, *spec]).action) == (5, 4, 8)  # Llama: sglang's default
    args = parse_launch_args(
        [
            "--model-path",
            target,
            *spec,
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "8",
            "--cuda-graph-max-bs-decode",
            "4",
            "--enable-metrics",
        ]
    )
    assert tuple(args.action) == (3, 1, 4) and args.cuda_graph_max_bs == 4 and args.max_running_requests == 4
    with pytest.raises(ConfigError, match="only some speculative flags"):
        parse_launch_args(["--model-path", target, *spec, "--speculative-num-steps", "3"])
    with pytest.raises(SystemExit) as info:
        parse_launch_args(["--model-path", target, "--cuda-graph-max-bs", "4"])
    assert info.value.code == 2 and "ambiguous option: --cuda-graph-max-bs" in capsys.readouterr().err


_WITHOUT_SGLANG = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "sglang" or name.startswith("sglang."):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Hide())
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", sys.argv[1], "-k", "old_flag_spelling"]))
"""


@pytest.mark.parametrize(("require", "outcome"), [("1", "1 error"), ("", "1 skipped")])
def test_without_sglang_ci_fails_and_a_local_run_skips(tmp_path, require, outcome):
    """``.ci/run`` sets SPECBAND_REQUIRE_SGLANG=1: a CI without sglang must fail."""
    import subprocess

    env = {**os.environ, "SPECBAND_REQUIRE_SGLANG": require}
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_SGLANG, __file__],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert outcome in done.stdout, done.stdout + done.stderr
    assert ("SPECBAND_REQUIRE_SGLANG=1 but sglang is not installed" in done.stdout) == (require == "1")

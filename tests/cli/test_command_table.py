"""The command table (lazy registration) and recommend's plain-option fast path (issue 12,
item 7): the fast path gives exactly what typer gives, and a cold recommend imports no
pydantic."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from typer.main import get_command

import specband.cli
from specband.cli import COMMANDS, FAST_COMMANDS, build_app
from specband.cli.plain_options import parse_plain


def _commands(app: Any) -> set[str]:
    return set(get_command(app).commands)  # type: ignore[attr-defined]


def test_the_table_names_every_registered_command_and_its_module() -> None:
    assert _commands(build_app()) == set(COMMANDS)
    for name, module in COMMANDS.items():
        registered = _commands(build_app(name))
        assert name in registered
        assert all(COMMANDS[other] == module for other in registered), (name, registered)


def test_an_unknown_command_registers_all_and_typer_says_so(run_cli: Any) -> None:
    res = run_cli("no-such-command")
    assert res.exit_code == 2 and "No such command 'no-such-command'" in res.stderr


def _recommend() -> Any:
    return get_command(build_app("recommend")).commands["recommend"]  # type: ignore[attr-defined]


def test_plain_options_parse_to_the_callback_arguments() -> None:
    values = parse_plain(_recommend(), ["-b16", "--format=json", "--state", "40", "2048.5", "7", "--models", "m"])
    assert values == {
        "batch_size": "16",  # a list (issue 35): the request parses it
        "algo": "lookup_table",
        "models": "m",  # a path's raw text: the request's build checks it and makes the Path
        "state": (40.0, 2048.5, 7.0),
        "output_format": "json",
        "draft_model": None,
        "data": None,
        "max_speed_loss": 0.02,
        "batch_mix": None,
        "batch_mix_from": None,
        "trust_pickle": False,
        "actions": "contract",
        "allow_modified": False,
        "target": None,
        "gpu": None,
        "target_config": None,
        "draft_config": None,
        "acceptance_from": None,
        "allow_transfer": False,
        "engine": "sglang",  # the text given: the request resolves it to the engine
        "prompt_tokens": None,
        "output_tokens": None,
        "explain": False,
    }


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["-b"],  # a value is missing: typer says so
        ["-b", "16", "--no-such-option"],
        ["-b", "16", "--state", "1", "2"],
        ["--batch"],  # no abbreviations (click has none)
    ],
)
def test_anything_unusual_is_left_to_typer(args: list[str]) -> None:
    assert parse_plain(_recommend(), args) is None


@pytest.mark.parametrize(
    "args",
    [
        ["-b", "16"],
        ["--batch-size=4", "--format", "json"],
        ["-b", "3", "--algo", "lookup_table", "--draft-model", "my/draft head", "-f", "json"],
        ["-b", "16", "--state", "55", "1024", "3", "--format", "json"],
        ["-b", "16", "--state", "-300", "0", "0"],
        ["-b", "4", "--algo", "dqn"],
        ["-b", "0"],
        ["-b", str(10**30)],
        ["-b", "+16"],
        ["-b", "16", "--state", "nan", "0", "0"],
        ["-b", "16", "-b", "8"],
        [],  # neither --batch-size nor a batch mix: the command's own one-line error
        ["--help"],
    ],
)
def test_the_fast_path_prints_exactly_what_typer_prints(run_cli: Any, monkeypatch: Any, args: list[str]) -> None:
    fast = run_cli("recommend", *args)
    monkeypatch.setattr(specband.cli, "FAST_COMMANDS", frozenset())
    typer_only = run_cli("recommend", *args)
    assert (fast.exit_code, fast.stdout, fast.stderr) == (typer_only.exit_code, typer_only.stdout, typer_only.stderr)


def test_recommend_is_a_fast_command() -> None:
    assert "recommend" in FAST_COMMANDS


COLD = """
import sys
from specband.cli import main
try:
    main(["recommend", "-b", "16"])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
loaded = sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'numpy', 'torch', 'rich'})
print('LOADED', loaded, sorted(m for m in sys.modules if m.startswith('specband.cli.')))
"""


def test_a_cold_recommend_imports_no_pydantic_and_no_other_command(tmp_path: Any) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", COLD], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    assert proc.returncode == 0, proc.stderr
    # cli.output, cli.params, cli.answer_table: the shared printing, option and table modules (no other
    # command's code)
    assert (
        proc.stdout.splitlines()[-1]
        == "LOADED [] ['specband.cli.answer_table', 'specband.cli.core', 'specband.cli.output', 'specband.cli.params', "
        "'specband.cli.plain_options']"
    )

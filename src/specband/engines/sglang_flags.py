"""What sglang accepts: its versions, each launch flag's spelling per version, and a
strict copy of its command-line parser.

Truth comes from sglang itself (docs: README "sglang versions"):

* :data:`FLAG_SPELLINGS` gives, for every flag specband sets, its spelling from each
  release on. History (sgl-project/sglang ``python/sglang/srt/server_args.py``):
  ``--cuda-graph-max-bs`` was the flag up to 0.5.13; 0.5.14 added
  ``--cuda-graph-max-bs-decode`` (and ``-prefill``) and kept the old name as a
  deprecated alias until 0.5.19; 0.5.20 removed it, and since sglang's parser allows
  abbreviations the old name is then *ambiguous* (exit 2). The other flags kept their
  names from 0.5.4 to 0.5.23.
* :data:`STRICT_FLAGS_FILE` holds every option of the newest supported release's
  parser (``sglang serve``), one JSON object a line, written by
  :func:`flag_table_from_sglang` (``python -m specband.engines.sglang_flags > FILE``);
  the conformance test holds the file to sglang's parser. :func:`strict_parser`
  rebuilds an ``argparse`` parser from it, so an unknown or ambiguous flag gives
  sglang's own message and exit status 2 without importing sglang. Adding a flag is
  adding one line.

Only the standard library is imported at module level.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.core.errors import ConfigError

if TYPE_CHECKING:  # argparse and subprocess load where a parser is built or a version probed
    import argparse

__all__ = [
    "ATTENTION_BACKEND_CHOICES",
    "DTYPE_CHOICES",
    "FLAG_SPELLINGS",
    "NEWEST_VERSION",
    "OLDEST_VERSION",
    "STRICT_FLAGS_FILE",
    "detect_sglang_version",
    "flag_for",
    "flag_table_from_sglang",
    "newer_version_note",
    "parse_version",
    "resolve_sglang_version",
    "strict_parser",
]

#: The oldest and newest sglang releases specband builds launch lines for.
OLDEST_VERSION = "0.5.4"
NEWEST_VERSION = "0.5.23"
#: Every option of sglang ``NEWEST_VERSION``'s parser (one JSON object a line).
STRICT_FLAGS_FILE = Path(__file__).resolve().parent.parent / "data" / f"sglang_flags_{NEWEST_VERSION}.jsonl"

Version = tuple[int, int, int]

#: ``--dtype``'s choices in sglang ``NEWEST_VERSION`` (``ServerArgs.add_cli_args``; the
#: conformance test holds them to the installed sglang's parser).
DTYPE_CHOICES: tuple[str, ...] = ("auto", "half", "float16", "bfloat16", "float", "float32")
#: ``--attention-backend``'s choices in sglang ``NEWEST_VERSION`` (its
#: ``ATTENTION_BACKEND_CHOICES``, read by its parser; held to it by the conformance test).
ATTENTION_BACKEND_CHOICES: tuple[str, ...] = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4",
    "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
    "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend",
    "intel_xpu",
)  # fmt: skip

#: ServerArgs field -> ((first release, spelling), ...), oldest first. A field absent
#: here is spelled ``--`` + the field with ``-`` for ``_`` in every supported release.
FLAG_SPELLINGS: dict[str, tuple[tuple[Version, str], ...]] = {
    # 0.5.14-0.5.19 still took --cuda-graph-max-bs as a deprecated alias of the decode
    # flag (same resolved value); from 0.5.20 on it is ambiguous and refused
    "cuda_graph_max_bs": (((0, 5, 4), "--cuda-graph-max-bs"), ((0, 5, 14), "--cuda-graph-max-bs-decode")),
}

#: Which attribute of sglang's parsed arguments holds each specband-set field, per
#: release (the field name otherwise).
FIELD_NAMES: dict[str, tuple[tuple[Version, str], ...]] = {
    "cuda_graph_max_bs": (((0, 5, 4), "cuda_graph_max_bs"), ((0, 5, 14), "cuda_graph_max_bs_decode")),
}


def parse_version(text: str, *, option: str = "--sglang-version") -> Version:
    """``"0.5.23"`` (or ``"0.5.23.post1"``, ``"0.5.23rc0"``) -> ``(0, 5, 23)``.

    Raises:
        ConfigError: not a version, or outside ``OLDEST_VERSION``..``NEWEST_VERSION``
            for a 0.5 release before the oldest (a newer release gets the newest
            spellings).
    """
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text).strip())
    if match is None:
        raise ConfigError(f"{option} {text!r}: expected a sglang version like {NEWEST_VERSION}")
    major, minor, patch = int(match[1]), int(match[2]), int(match[3] or 0)
    version = (major, minor, patch)
    if version < _as_tuple(OLDEST_VERSION):
        raise ConfigError(
            f"{option} {text}: sglang releases before {OLDEST_VERSION} are not supported "
            f"(supported: {OLDEST_VERSION} .. {NEWEST_VERSION})"
        )
    return version


def newer_version_note(version: str) -> str | None:
    """The note for a sglang release newer than :data:`NEWEST_VERSION` (its flags are spelled
    as in the newest release specband knows: :data:`FLAG_SPELLINGS` ends there), else ``None``.

    Raises:
        ConfigError: ``version`` is not a supported version (:func:`parse_version`).
    """
    if parse_version(version) <= _as_tuple(NEWEST_VERSION):
        return None
    return (
        f"sglang {version} is newer than the newest release specband knows ({NEWEST_VERSION}): "
        f"flags are spelled as in sglang {NEWEST_VERSION}"
    )


def _as_tuple(text: str) -> Version:
    major, minor, patch = (int(p) for p in text.split("."))
    return major, minor, patch


def _pick(table: Mapping[str, tuple[tuple[Version, str], ...]], name: str, version: Version, default: str) -> str:
    chosen = default
    for first, value in table.get(name, ()):
        if version >= first:
            chosen = value
    return chosen


def flag_for(field: str, version: Version) -> str:
    """The spelling of ServerArgs ``field`` in sglang ``version``
    (``flag_for("cuda_graph_max_bs", (0, 5, 23)) == "--cuda-graph-max-bs-decode"``)."""
    return _pick(FLAG_SPELLINGS, field, version, "--" + field.replace("_", "-"))


def field_for(field: str, version: Version) -> str:
    """The ServerArgs attribute that holds specband's ``field`` in sglang ``version``."""
    return _pick(FIELD_NAMES, field, version, field)


_VERSION_PROBE = "import importlib.metadata as m; print(m.version('sglang'))"


def detect_sglang_version(command: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """sglang's version in the interpreter the server command runs, or ``None``.

    The command's first word is taken as that interpreter when its name starts with
    ``python`` (``python -m sglang.launch_server``, ``python -m specband emulate``), else
    the interpreter of its ``#!`` line (``sglang serve``: the entry script pip wrote);
    it is asked for the installed ``sglang`` distribution's version (30 s at most).

    Args:
        command: the server command, split (``python`` already replaced by the path of
            the interpreter to use).
        env: its environment (``None``: this process's).
    """
    interpreter = _interpreter(command[0]) if command else None
    if interpreter is None:
        return None
    return run_version_probe(interpreter, _VERSION_PROBE, env)


def run_version_probe(interpreter: str, probe: str, env: Mapping[str, str] | None = None) -> str | None:
    """What ``interpreter -c probe`` prints (stripped; 30 s at most, no stdin), or ``None``
    when it cannot start, times out, fails or prints nothing. Used for the engines' versions."""
    import subprocess  # a version probe only: off the engine's cold path (recommend's flags)

    try:
        done = subprocess.run(
            [interpreter, "-c", probe],
            capture_output=True,
            text=True,
            timeout=30,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    return text if done.returncode == 0 and text else None


def _interpreter(executable: str) -> str | None:
    """``executable`` when it is a Python interpreter, else the Python interpreter named by
    its ``#!`` line (``#!/usr/bin/env python3`` included), else ``None``."""
    if Path(executable).name.startswith("python"):
        return executable
    path = shutil.which(executable)
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace")
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env":
        words = words[1:]
    return words[0] if words and Path(words[0]).name.startswith("python") else None


def resolve_sglang_version(
    given: str | None, server_command: str, env: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The sglang version launch lines are built for, and where it came from.

    Args:
        given: ``--sglang-version`` (``None``: detect).
        server_command: ``--server-command``.
        env: the server's environment.

    Returns:
        ``(version, source)``; source is ``"--sglang-version"``, ``"detected"`` or
        ``"assumed"`` (sglang not found: the newest supported release, which the
        emulator emulates).

    Raises:
        ConfigError: ``given`` (or the detected version) is not a supported version.
    """
    if given is not None:
        parse_version(given)
        return given.strip(), "--sglang-version"
    try:
        command = shlex.split(server_command)
    except ValueError:
        command = []
    if command and command[0] in ("python", "python3"):
        command[0] = sys.executable
    found = detect_sglang_version(command, env)
    if found is None:
        return NEWEST_VERSION, "assumed"
    parse_version(found, option=f"sglang {found} (found in --server-command's interpreter)")
    return found, "detected"


# ---------------------------------------------------------------- the strict parser
def _kind(action: argparse.Action) -> str:
    import argparse  # where a parser is read: off the engine's cold path (recommend's flags)

    if isinstance(action, argparse.BooleanOptionalAction):
        return "bool"
    if action.nargs == 0:
        return "flag"
    return "value" if action.nargs is None else str(action.nargs)


def flag_table_from_sglang() -> list[dict[str, Any]]:
    """Every option of the installed sglang's ``sglang serve`` parser, as rows of
    :data:`STRICT_FLAGS_FILE`: ``flags`` (option strings; for a ``--x/--no-x`` pair only
    ``--x``), ``dest``, ``kind`` (``value``, ``flag``, ``bool``, ``+``, ``*``, ``?``),
    ``type`` (``int``, ``float`` or ``null``: not checked) and ``choices``.

    Raises:
        ImportError: sglang is not installed.
    """
    import argparse  # where a parser is built: off the engine's cold path (recommend's flags)

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        kind = _kind(action)
        flags = [f for f in action.option_strings if kind != "bool" or not f.startswith("--no-")]
        type_name = getattr(action.type, "__name__", None)
        rows.append(
            {
                "flags": flags,
                "dest": action.dest,
                "kind": kind,
                "type": type_name if type_name in ("int", "float") else None,
                "choices": _choices(action),
            }
        )
    return rows


def _choices(action: argparse.Action) -> list[str] | None:
    """An option's string choices in sglang's order (its error message lists them),
    sorted when sglang keeps them in a set; ``None`` when any is not a string."""
    choices = list(action.choices) if action.choices is not None else None
    if choices is None or not all(isinstance(c, str) for c in choices):
        return None
    return choices if isinstance(action.choices, (list, tuple)) else sorted(choices)


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, Any], ...]:
    with open(STRICT_FLAGS_FILE, encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


def strict_parser() -> argparse.ArgumentParser:
    """A parser that accepts exactly what sglang :data:`NEWEST_VERSION` accepts
    (abbreviations included), built from :data:`STRICT_FLAGS_FILE`. Values are strings
    except ``int``/``float`` options; unset options are ``None`` (``False`` for flags).

    ``parse_args`` exits 2 with ``sglang serve: error: ...`` on an unknown, ambiguous or
    badly typed flag, as sglang does.
    """
    import argparse  # where a parser is built: off the engine's cold path (recommend's flags)

    parser = argparse.ArgumentParser(prog="sglang serve", add_help=False)  # sglang's prog: its messages
    types = {"int": int, "float": float}
    for row in _table():
        kwargs: dict[str, Any] = {"dest": row["dest"], "default": None}
        if row["kind"] == "flag":
            kwargs.update(action="store_true", default=False)
        elif row["kind"] == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            if row["kind"] != "value":
                kwargs["nargs"] = row["kind"]
            if row["type"] in types:
                kwargs["type"] = types[row["type"]]
            if row["choices"] is not None:
                kwargs["choices"] = row["choices"]
        parser.add_argument(*row["flags"], **kwargs)
    return parser


def write_flag_table(out: Any = None) -> None:
    """Print :func:`flag_table_from_sglang` as :data:`STRICT_FLAGS_FILE`'s lines."""
    out = out or sys.stdout
    for row in flag_table_from_sglang():
        out.write(json.dumps(row, sort_keys=True) + "\n")


if __name__ == "__main__":  # pragma: no cover (regenerates the data file)
    os.environ.setdefault("SGLANG_LOG_LEVEL", "error")
    write_flag_table()

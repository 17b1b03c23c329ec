"""The sweep's workload: the user's own traffic sample (``sweep --prompts FILE``).

Speculation's benefit depends on the text, so a sweep can time the user's prompts
instead of the four built-in ones (:data:`specband.harness.client.PROMPTS`). Formats:

* JSONL, one object a line: ``{"prompt": "..."}``, or OpenAI-style
  ``{"messages": [{"role": "user", "content": "..."}, ...]}``, rendered through the
  target's chat template (``transformers``' ``apply_chat_template`` with
  ``add_generation_prompt=True``, from the target folder, no code from it run), as
  sglang's ``/v1/chat/completions`` renders real chat traffic;
* a ShareGPT JSON file: a list of ``{"conversations": [{"from": "human", "value":
  "..."}, ...]}``; each conversation's first human turn is a prompt (as sglang's
  ``bench_serving.py`` takes it).

Rows record the workload's name (the file name) and the SHA-256 of its prompts
(:attr:`specband.harness.runner.MeasureSettings.workload_sha256`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.errors import ConfigError, DataError
from specband.jsonl import parse_jsonl

__all__ = ["Workload", "load_prompts"]

_HUMAN = ("human", "user")


@dataclass(frozen=True)
class Workload:
    """A prompt cycle and its name.

    Attributes:
        name: the file name.
        prompts: the prompts (text sent to ``/generate``), in file order.
    """

    name: str
    prompts: tuple[str, ...]


def load_prompts(path: Path, target: str) -> Workload:
    """Read ``--prompts FILE``.

    Args:
        path: the file (``.json``: ShareGPT; else JSONL).
        target: the target model folder (its chat template renders ``messages``).

    Raises:
        ConfigError: the file cannot be read, or ``messages`` need a chat template the
            target does not provide.
        DataError: a line or item that is not one of the formats (naming file, line
            and field), or no prompt at all.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--prompts {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    stripped = text.lstrip()
    prompts = _sharegpt(path, text) if stripped.startswith("[") else _jsonl(path, text, target)
    if not prompts:
        raise DataError("no prompt in the file", path=path)
    return Workload(Path(path).name, tuple(prompts))


def _sharegpt(path: Path, text: str) -> list[str]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg})", path=path, line=exc.lineno) from None
    prompts = []
    for i, item in enumerate(items):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise DataError(
                f"item {i}: expected an object with a 'conversations' list", path=path, field="conversations"
            )
        first = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") in _HUMAN), None)
        if isinstance(first, str) and first:
            prompts.append(first)
    return prompts


def _jsonl(path: Path, text: str, target: str) -> list[str]:
    prompts: list[str] = []
    template = None
    for lineno, row in parse_jsonl(text, path):
        if isinstance(row, dict) and isinstance(row.get("prompt"), str) and row["prompt"]:
            prompts.append(row["prompt"])
        elif isinstance(row, dict) and "messages" in row:
            _check_messages(row["messages"], path, lineno)
            template = template or _chat_template(target, path, lineno)
            prompts.append(template(row["messages"]))
        else:
            raise DataError(
                'expected {"prompt": "<text>"} or {"messages": [...]}', path=path, line=lineno, field="prompt"
            )
    return prompts


def _check_messages(messages: Any, path: Path, lineno: int) -> None:
    ok = (
        isinstance(messages, list)
        and messages
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        )
    )
    if not ok:
        raise DataError(
            'expected a non-empty list of {"role": ..., "content": ...}', path=path, line=lineno, field="messages"
        )


def _chat_template(target: str, path: Path, lineno: int) -> Any:
    """A function rendering ``messages`` with the target tokenizer's chat template.

    Raises:
        ConfigError: transformers is missing, or the target has no loadable tokenizer
            with a chat template.
    """
    where = f"--prompts {path}:{lineno}: messages need the target's chat template"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError(f"{where}, which needs transformers (pip install transformers)") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=True, trust_remote_code=False)
    except Exception as exc:
        raise ConfigError(f"{where}: cannot load the tokenizer of --target {target} ({type(exc).__name__})") from None
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"{where}: --target {target} has no chat template")

    def render(messages: Sequence[dict[str, str]]) -> str:
        return str(tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True))

    return render

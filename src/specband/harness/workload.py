"""The sweep's workload: the user's own traffic sample (``sweep --prompts FILE``).

Speculation's benefit depends on the text, so a sweep can time the user's prompts
instead of the four built-in ones (:data:`specband.engines.client.PROMPTS`). Formats:

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

from specband.core.errors import ConfigError, DataError
from specband.core.limits import MAX_DATA_FILE_BYTES
from specband.files.bounded import CHAT_TEMPLATE_MEMORY_BYTES, CHAT_TEMPLATE_TIME_S, run_bounded
from specband.files.fileio import read_text_bounded
from specband.files.jsonl import parse_jsonl

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
        text = read_text_bounded(path, limit=MAX_DATA_FILE_BYTES, kind="prompts file", error=ConfigError)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--prompts {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    stripped = text.lstrip()
    prompts = _sharegpt(path, text) if stripped.startswith("[") else _jsonl(path, text, target)
    if not prompts:
        raise DataError("no prompt in the file", path=path)
    check_context(prompts, target, path)
    return Workload(Path(path).name, tuple(prompts))


def target_context(target: str) -> int | None:
    """The target's context length (``max_position_embeddings`` of its local
    ``config.json``), or ``None`` when it has none that can be read."""
    config = Path(target) / "config.json"
    try:
        data = json.loads(read_text_bounded(config, limit=1 << 20, kind="model config file", error=ConfigError))
    except (OSError, ValueError, RecursionError, ConfigError):
        return None
    value = data.get("max_position_embeddings") if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def check_context(prompts: Sequence[str], target: str, path: Path) -> None:
    """Refuse a prompt longer than the target's context (tokens counted with the target's
    own tokenizer, in a bounded child: :func:`specband.files.bounded.run_bounded`). Nothing is
    checked for a target without a local ``config.json`` and tokenizer, or without
    transformers.

    Raises:
        DataError: ``"<path>: prompt <n>: <t> tokens, longer than the target's context of
            <c> (max_position_embeddings)"``.
        ConfigError: the tokenizer failed or ran past its limits (one line).
    """
    import importlib.util

    context = target_context(target)
    folder = Path(target)
    has_tokenizer = (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()
    if context is None or not has_tokenizer or importlib.util.find_spec("transformers") is None:
        return
    counts = run_bounded(
        "count_tokens",
        [target, list(prompts)],
        what=f"--prompts {path}: counting tokens with the tokenizer of --target {target}",
        time_s=CHAT_TEMPLATE_TIME_S,
        memory_bytes=CHAT_TEMPLATE_MEMORY_BYTES,
    )
    for n, count in enumerate(counts if isinstance(counts, list) else [], start=1):
        if isinstance(count, int) and count > context:
            raise DataError(
                f"prompt {n}: {count} tokens, longer than the target's context of {context} "
                "(max_position_embeddings in its config.json)",
                path=path,
            )


def _sharegpt(path: Path, text: str) -> list[str]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg})", path=path, line=exc.lineno) from None
    except RecursionError:
        raise DataError("not valid JSON (nested too deeply)", path=path) from None
    if not isinstance(items, list):
        raise DataError("expected a JSON list of ShareGPT conversations", path=path)
    prompts = []
    for i, item in enumerate(items):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise DataError(
                f"item {i}: expected an object with a 'conversations' list", path=path, field="conversations"
            )
        first = next((t.get("value") for t in turns if isinstance(t, dict) and t.get("from") in _HUMAN), None)
        if isinstance(first, str) and first.strip():
            prompts.append(first)
    return prompts


def _jsonl(path: Path, text: str, target: str) -> list[str]:
    prompts: list[str | None] = []
    conversations: list[tuple[int, int, Any]] = []  # (slot in prompts, line, messages)
    for lineno, row in parse_jsonl(text, path):
        if isinstance(row, dict) and isinstance(row.get("prompt"), str) and row["prompt"]:
            if not row["prompt"].strip():  # the server would decode from nothing (S34)
                raise DataError(
                    "the prompt is only whitespace: no text to decode from", path=path, line=lineno, field="prompt"
                )
            prompts.append(row["prompt"])
        elif isinstance(row, dict) and "messages" in row:
            _check_messages(row["messages"], path, lineno)
            conversations.append((len(prompts), lineno, row["messages"]))
            prompts.append(None)
        else:
            raise DataError(
                'expected {"prompt": "<text>"} or {"messages": [...]}', path=path, line=lineno, field="prompt"
            )
    if conversations:
        rendered = _chat_template(target, path, conversations[0][1])([m for _, _, m in conversations])
        for (slot, lineno, _), text_ in zip(conversations, rendered, strict=True):
            if not text_.strip():  # a template that drops the messages: '' measured as a workload (S34)
                raise ConfigError(
                    f"--prompts {path}:{lineno}: the chat template of --target {target} rendered "
                    f"{'nothing' if not text_ else 'only whitespace'} for these messages; no prompt to send"
                )
            prompts[slot] = text_
    return [p for p in prompts if p is not None]


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
    """A function rendering a list of ``messages`` lists with the target tokenizer's chat
    template, in a child process under a time and memory limit
    (:func:`specband.files.bounded.run_bounded`: the Jinja sandbox bounds neither).

    Raises:
        ConfigError: transformers is missing; the target has no loadable tokenizer with a
            chat template; the template raised (``raise_exception``, an undefined
            attribute, a sandbox refusal), ran past the time limit or exceeded the memory
            limit (one line each).
    """
    import importlib.util

    where = f"--prompts {path}:{lineno}: messages need the target's chat template"
    if importlib.util.find_spec("transformers") is None:
        raise ConfigError(f"{where}, which needs transformers (pip install transformers)")

    def render(conversations: Sequence[Sequence[dict[str, str]]]) -> list[str]:
        out = run_bounded(
            "render_chat_template",
            [target, [list(m) for m in conversations]],
            what=f"{where} (--target {target})",
            time_s=CHAT_TEMPLATE_TIME_S,
            memory_bytes=CHAT_TEMPLATE_MEMORY_BYTES,
        )
        if not isinstance(out, list) or len(out) != len(conversations) or not all(isinstance(t, str) for t in out):
            raise ConfigError(f"--prompts {path}: the chat template of --target {target} rendered no text")
        return out

    return render

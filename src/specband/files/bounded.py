"""Work on untrusted input in a child process under a time and memory limit.

A Jinja sandbox (the one ``transformers`` renders chat templates in) blocks escapes, not
CPU or memory: a target's chat template with nested loops hangs the caller, ``'x' * 2e10``
exhausts its memory. :func:`run_bounded` runs one of this module's known functions
(:data:`FUNCTIONS`) in a fresh Python process (``subprocess``; arguments and result as
JSON over stdin/stdout) with ``RLIMIT_AS`` (memory) and ``RLIMIT_CPU`` set, and kills it at
the wall-clock limit. Exceeding a limit, or an error inside, is one :class:`SpecbandError`
line.

Only the standard library is imported at module level.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError, SpecbandError

__all__ = [
    "CHAT_TEMPLATE_MEMORY_BYTES",
    "CHAT_TEMPLATE_TIME_S",
    "FUNCTIONS",
    "BoundedError",
    "count_tokens",
    "render_chat_template",
    "render_jinja_sandboxed",
    "run_bounded",
]

#: Wall-clock limit of rendering a workload's chat templates (or counting its tokens),
#: real seconds. Basis: a Llama 3 template renders a conversation in under 1 ms; importing
#: transformers and loading a tokenizer takes 2-5 s idle and was seen at ~35 s on a
#: 2-core machine under load: 300 s bounds a hostile template without failing a slow start.
CHAT_TEMPLATE_TIME_S = 300.0
#: Address-space limit of the rendering child, bytes (2 GiB: Python, transformers and a
#: tokenizer need ~600 MiB; the prompts file is bounded at 1 GiB of text).
CHAT_TEMPLATE_MEMORY_BYTES = 2 << 30
#: Largest result read back from the child, bytes.
MAX_RESULT_BYTES = 1 << 30


class BoundedError(ConfigError):
    """The bounded work failed, ran past its time limit or exceeded its memory limit."""


def render_jinja_sandboxed(template: str, conversations: list[list[dict[str, str]]]) -> list[str]:
    """Render ``template`` for each conversation in jinja2's immutable sandbox (the
    environment ``transformers`` uses), with ``messages`` and ``add_generation_prompt=True``.
    Runs in the child (see :func:`run_bounded`)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)
    return [compiled.render(messages=m, add_generation_prompt=True) for m in conversations]


def render_chat_template(target: str, conversations: list[list[dict[str, str]]]) -> list[str]:
    """Render each conversation with the target tokenizer's own chat template
    (``transformers``' ``apply_chat_template(..., tokenize=False,
    add_generation_prompt=True)``, ``local_files_only``, no remote code). Runs in the child."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=True, trust_remote_code=False)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"--target {target} has no chat template")
    return [
        str(tokenizer.apply_chat_template(list(m), tokenize=False, add_generation_prompt=True)) for m in conversations
    ]


def count_tokens(target: str, prompts: list[str]) -> list[int]:
    """The number of tokens the target's tokenizer makes of each prompt (as sglang
    tokenizes ``/generate`` text: special tokens added). Runs in the child."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target, local_files_only=True, trust_remote_code=False)
    return [len(tokenizer(p)["input_ids"]) for p in prompts]


#: The functions a child may run, by name.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "render_jinja_sandboxed": render_jinja_sandboxed,
    "render_chat_template": render_chat_template,
    "count_tokens": count_tokens,
}


def _child() -> None:  # pragma: no cover - runs in the child process
    """Entry point of the child: limits, then ``{"ok": result}`` or ``{"error": text}``."""
    import resource

    request = json.loads(sys.stdin.buffer.read())
    memory = int(request["memory_bytes"])
    seconds = int(request["cpu_s"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    try:
        result: dict[str, Any] = {"ok": FUNCTIONS[request["function"]](*request["args"])}
    except MemoryError:
        result = {"error": "memory", "detail": ""}
    except RecursionError:
        result = {"error": "failed", "detail": "RecursionError: nested too deeply"}
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        result = {"error": "failed", "detail": f"{type(exc).__name__}: {first}" if first else type(exc).__name__}
    try:
        out = json.dumps(result).encode("utf-8")
    except MemoryError:
        out = b'{"error": "memory", "detail": ""}'
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()


def run_bounded(
    function: str,
    args: list[Any],
    *,
    what: str,
    time_s: float,
    memory_bytes: int,
    error: type[SpecbandError] = BoundedError,
) -> Any:
    """Run ``FUNCTIONS[function](*args)`` in a child process under the limits.

    Args:
        function: a key of :data:`FUNCTIONS`.
        args: JSON-ready arguments.
        what: names the work in messages (``"--prompts p.jsonl: the chat template of m"``).
        time_s: wall-clock limit, real seconds (CPU limit as well).
        memory_bytes: address-space limit of the child, bytes.
        error: the :class:`SpecbandError` subclass raised.

    Returns:
        the function's JSON result.

    Raises:
        error: ``"<what>: took longer than <t> s (killed)"``, ``"<what>: needed more than
            <n> MiB of memory"``, or ``"<what>: <Exception>: <message>"``.
    """
    if function not in FUNCTIONS:
        raise ValueError(f"unknown bounded function {function!r}")
    request = json.dumps(
        {"function": function, "args": args, "memory_bytes": memory_bytes, "cpu_s": max(1, int(time_s) + 1)}
    ).encode("utf-8")
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    code = "import specband.files.bounded as b; b._child()"
    mib = memory_bytes >> 20
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            input=request,
            capture_output=True,
            timeout=time_s,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise error(f"{what}: took longer than {time_s:g} s (killed)") from None
    except OSError as exc:
        raise error(f"{what}: cannot start the rendering process ({exc.strerror or exc})") from None
    try:
        result = json.loads(proc.stdout[:MAX_RESULT_BYTES]) if proc.stdout else None
    except ValueError:
        result = None
    if isinstance(result, dict) and "ok" in result:
        return result["ok"]
    if isinstance(result, dict) and result.get("error") == "memory":
        raise error(f"{what}: needed more than {mib} MiB of memory (stopped)")
    if isinstance(result, dict) and result.get("error") == "failed":
        raise error(f"{what}: {result.get('detail')}")
    if proc.returncode is not None and proc.returncode < 0:
        raise error(
            f"{what}: exceeded its limits ({time_s:g} s, {mib} MiB) and was stopped (signal {-proc.returncode})"
        )
    tail = (proc.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1][:300]
    if "MemoryError" in tail:
        raise error(f"{what}: needed more than {mib} MiB of memory (stopped)")
    raise error(f"{what}: failed (exit {proc.returncode}: {tail})")

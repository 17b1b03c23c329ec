"""A target's chat template is rendered in a child process under a time and memory limit;
what it raises is one error line (issue 16 items 6 and 9)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specband.core.errors import ConfigError
from specband.files.bounded import BoundedError, run_bounded
from specband.harness.workload import load_prompts

MESSAGES = [[{"role": "user", "content": "hi"}]]


def _render(template: str, *, time_s: float = 120.0, memory_bytes: int = 1 << 30) -> Any:
    return run_bounded(
        "render_jinja_sandboxed",
        [template, MESSAGES],
        what="template",
        time_s=time_s,
        memory_bytes=memory_bytes,
    )


def test_a_plain_template_renders() -> None:
    assert _render("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}") == ["<user>hi"]


def test_nested_loops_are_stopped_at_the_time_limit() -> None:
    loop = "{% for a in range(100000) %}"
    hang = loop * 3 + "{% endfor %}" * 3
    with pytest.raises(BoundedError, match=r"^template: (took longer than 3 s|exceeded its limits)"):
        _render(hang, time_s=3.0)


def test_a_huge_string_is_stopped_at_the_memory_limit() -> None:
    with pytest.raises(BoundedError, match=r"^template: (needed more than 512 MiB|exceeded its limits)") as exc:
        _render("{{ 'x' * 20000000000 }}", memory_bytes=512 << 20)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "template, message",
    [
        ("{{ raise_exception('no system role') }}", "no system role"),
        ("{{ messages[0].content.nope.deeper }}", "UndefinedError"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "SecurityError"),
        ("{% for %}", "TemplateSyntaxError"),
        ("{{ messages.append(1) }}", "SecurityError"),
    ],
)
def test_template_errors_are_one_line(template: str, message: str) -> None:
    with pytest.raises(BoundedError, match=message) as exc:
        _render(template)
    assert "\n" not in str(exc.value) and str(exc.value).startswith("template: ")


def _target(tmp_path: Path, template: str, require_module: Any) -> Path:
    require_module("tokenizers")
    require_module("transformers")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")), unk_token="<unk>"
    )
    tok.chat_template = template
    folder = tmp_path / "target"
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "template, message",
    [
        ("{{ raise_exception('roles must alternate') }}", "roles must alternate"),
        ("{{ ''.__class__.__mro__ }}", "SecurityError"),
    ],
)
def test_a_targets_hostile_template_is_one_error_line(
    tmp_path: Path, require_module: Any, template: str, message: str
) -> None:
    target = _target(tmp_path, template, require_module)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"messages": MESSAGES[0]}) + "\n")
    with pytest.raises(ConfigError, match=message) as exc:
        load_prompts(prompts, str(target))
    assert "\n" not in str(exc.value) and str(prompts) in str(exc.value)


def test_a_prompt_longer_than_the_targets_context_is_refused(tmp_path: Path, require_module: Any) -> None:
    require_module("tokenizers")
    require_module("transformers")
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from specband.core.errors import DataError

    inner = Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    target = tmp_path / "target"
    PreTrainedTokenizerFast(tokenizer_object=inner, unk_token="<unk>").save_pretrained(target)
    (target / "config.json").write_text(json.dumps({"max_position_embeddings": 4}))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "a b"}) + "\n" + json.dumps({"prompt": "a b c d e f"}) + "\n")
    with pytest.raises(DataError, match=r"prompt 2: 6 tokens, longer than the target's context of 4"):
        load_prompts(prompts, str(target))
    prompts.write_text(json.dumps({"prompt": "a b"}) + "\n")
    assert load_prompts(prompts, str(target)).prompts == ("a b",)


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("{% for m in messages %}{% endfor %}", "rendered nothing"),
        ("{% for m in messages %} \n{% endfor %}", "only whitespace"),
    ],
)
def test_a_template_that_renders_no_text_is_refused(
    tmp_path: Path, require_module: Any, template: str, says: str
) -> None:
    """S34: a template that drops the messages gave Workload(prompts=('', '')), and the sweep
    measured decoding from nothing."""
    target = _target(tmp_path, template, require_module)
    prompts = tmp_path / "msgs.jsonl"
    prompts.write_text(json.dumps({"prompt": "fine"}) + "\n" + json.dumps({"messages": MESSAGES[0]}) + "\n")
    with pytest.raises(ConfigError, match=f"^--prompts {prompts}:2: the chat template of --target .* {says}"):
        load_prompts(prompts, str(target))


@pytest.mark.parametrize(("rendered", "says"), [("", "rendered nothing"), (" \n\t", "rendered only whitespace")])
def test_a_rendered_conversation_without_text_names_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rendered: str, says: str
) -> None:
    """The same check without transformers: the renderer stands in for the template."""
    import specband.harness.workload as workload

    monkeypatch.setattr(workload, "_chat_template", lambda target, path, line: lambda convs: ["ok", rendered])
    prompts = tmp_path / "msgs.jsonl"
    prompts.write_text("".join(json.dumps({"messages": MESSAGES[0]}) + "\n" for _ in range(2)))
    with pytest.raises(ConfigError, match=f"^--prompts {prompts}:2: the chat template of --target t {says}"):
        load_prompts(prompts, "t")


@pytest.mark.parametrize("text", ["   ", "\n", "\t \u3000"])
def test_a_whitespace_prompt_is_refused_like_an_empty_one(run_cli: Any, tmp_path: Path, text: str) -> None:
    """S34: {"prompt": "   "} passed the dry run while {"prompt": ""} was refused."""
    from specband.core.errors import DataError

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "fine"}) + "\n" + json.dumps({"prompt": text}) + "\n")
    with pytest.raises(DataError, match=r"p\.jsonl:2: field 'prompt': the prompt is only whitespace"):
        load_prompts(prompts, "m")
    result = run_cli(
        "sweep", "--target", "m", "--draft", "d", "--batch-sizes", "1", "--actions", "0", "--device", "none",
        "--server-command", "python -m specband emulate", "--prompts", prompts, "--dry-run",
        "--out", tmp_path / "s.jsonl",
    )  # fmt: skip
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "only whitespace" in line

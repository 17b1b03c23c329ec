"""``sweep --prompts FILE``: the user's own traffic sample (JSONL prompts, chat messages
through the target's chat template, ShareGPT)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.servers import one_error_line

from specband.core.errors import ConfigError, DataError
from specband.engines.serverconfig import ServerConfig
from specband.harness.runner import MeasureSettings
from specband.harness.workload import load_prompts

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture
def chat_target(tmp_path: Path, require_module: Any) -> Path:
    """A target folder holding a tiny tokenizer with a chat template (built offline); needs
    transformers and tokenizers (installed with sglang: a skip without them, a failure in CI)."""
    require_module("tokenizers")
    require_module("transformers")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")), unk_token="<unk>"
    )
    tok.chat_template = TEMPLATE
    folder = tmp_path / "target"
    tok.save_pretrained(folder)
    return folder


def test_jsonl_prompts_and_sharegpt(tmp_path):
    jsonl = tmp_path / "traffic.jsonl"
    jsonl.write_text('{"prompt": "Summarise this."}\n\n{"prompt": "Write a poem."}\n')
    assert load_prompts(jsonl, "m").prompts == ("Summarise this.", "Write a poem.")
    share = tmp_path / "sg.json"
    share.write_text(
        json.dumps(
            [
                {"conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello"}]},
                {"conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "Why?"}]},
                {"conversations": [{"from": "gpt", "value": "no human turn"}]},
            ]
        )
    )
    workload = load_prompts(share, "m")
    assert workload.prompts == ("Hi there", "Why?") and workload.name == "sg.json"


def test_messages_go_through_the_targets_chat_template(tmp_path, chat_target):
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text(
        json.dumps({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}) + "\n"
    )
    (prompt,) = load_prompts(jsonl, str(chat_target)).prompts
    assert prompt == "<|system|>Be brief.\n<|user|>Hi\n<|assistant|>"


def test_bad_workload_files_name_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "x"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: field 'prompt'"):
        load_prompts(bad, "m")
    bad.write_text('{"messages": [{"role": "user"}]}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:1: field 'messages'"):
        load_prompts(bad, "m")
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(ConfigError, match="messages need the target's chat template"):
        load_prompts(bad, str(tmp_path / "no-such-target"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="no prompt"):
        load_prompts(empty, "m")


def test_the_workload_hash_tells_prompt_sets_apart():
    server = ServerConfig(model_path="m")
    a = MeasureSettings(server=server)
    b = MeasureSettings(server=server, prompts=("other",), workload="x.jsonl")
    assert a.workload_sha256 != b.workload_sha256 and len(a.workload_sha256) == 64
    assert b.run_settings()["workload"] == "x.jsonl"


def test_a_sweep_with_prompts_records_the_workload_and_resume_refuses_another(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text('{"prompt": "Summarise this."}\n')
    res = run_cli(
        *sweep_args, "--batch-sizes", "1", "--actions", "0 3,1,4", "--repeats", "1", "--out", out, "--prompts", traffic
    )
    assert res.exit_code == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["workload"] for r in rows} == {"traffic.jsonl"}
    spec = next(r for r in rows if r["steps"])
    assert spec["accept_length_source"] == "meta_info"  # the timed batch's own spec_verify_ct
    traffic.write_text('{"prompt": "Something else."}\n')
    res = run_cli(
        *sweep_args,
        "--batch-sizes",
        "1",
        "--actions",
        "0 3,1,4",
        "--repeats",
        "2",
        "--out",
        out,
        "--prompts",
        traffic,
        "--resume",
    )
    assert res.exit_code == 2
    assert "cannot resume: its rows have workload_sha256=" in one_error_line(res.stderr)

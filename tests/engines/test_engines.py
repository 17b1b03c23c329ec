"""The engine registry (:mod:`specband.engines.base`) and each engine behind the one
interface: sglang's and vLLM's launch lines, action checks, accept probes and schedules."""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from specband.contract.actions import Action
from specband.core.errors import ConfigError
from specband.engines.base import ENGINE_NAMES, ENGINES, Engine, LaunchSchedule, get_engine
from specband.engines.client import BatchResult
from specband.engines.serverconfig import ServerConfig, build_launch_command

SRC = Path(__file__).resolve().parents[2] / "src" / "specband"


def test_both_engines_are_registered_and_each_is_one_object() -> None:
    assert ENGINE_NAMES == ("sglang", "vllm") == tuple(ENGINES)
    sglang, vllm = get_engine("sglang"), get_engine("vllm")
    assert (sglang.name, sglang.display_name) == ("sglang", "sglang")
    assert (vllm.name, vllm.display_name) == ("vllm", "vLLM")
    assert get_engine("vllm") is vllm  # chosen once: the same engine on every lookup


def test_each_engine_has_every_member_of_the_interface() -> None:
    members = {name for name, _ in inspect.getmembers(Engine) if not name.startswith("_")}
    members |= set(Engine.__annotations__)
    assert {"launch_command", "accept_probe", "launch_schedule", "name", "actions"} <= members
    for name in ENGINE_NAMES:
        missing = sorted(m for m in members if not hasattr(get_engine(name), m))
        assert missing == [], f"{name} lacks {missing}"


@pytest.mark.parametrize("name", ["trt", "", "VLLM"])
def test_an_unknown_engine_is_one_config_error(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        get_engine(name)
    assert str(info.value) == f"--engine must be one of sglang, vllm, got {name!r}"
    with pytest.raises(ConfigError, match="--engine must be one of sglang, vllm"):
        ServerConfig(model_path="/t", server_command="python -m x", engine=name)


def test_an_unknown_engine_on_the_command_line_is_one_error_line(run_cli: Any, tmp_path: Path) -> None:
    res = run_cli("schedule", "--engine", "trt", "--out", str(tmp_path / "s.json"))
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == ["error: --engine must be one of sglang, vllm, got 'trt'"]


def test_the_launch_line_is_the_engines_own() -> None:
    chain = Action(3, 1, 4)
    common = {"model_path": "/t", "draft_model_path": "/d", "server_command": "python -m x"}
    sglang = build_launch_command(ServerConfig(**common), chain, 8, 0.6)
    assert sglang[sglang.index("--model-path") + 1] == "/t"
    assert sglang[sglang.index("--cuda-graph-max-bs-decode") + 1] == "8"
    assert sglang[sglang.index("--speculative-num-steps") + 1] == "3"
    vllm = build_launch_command(ServerConfig(**common, engine="vllm"), chain, 8, 0.6)
    assert vllm[vllm.index("--max-num-seqs") + 1] == "8"
    assert vllm[vllm.index("--gpu-memory-utilization") + 1] == "0.6"
    spec = json.loads(vllm[vllm.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}
    assert "--model-path" not in vllm and "--speculative-num-steps" not in vllm


def test_vllm_refuses_a_tree_and_sglang_runs_it() -> None:
    tree = Action(3, 2, 4)
    get_engine("sglang").check_actions([tree])
    with pytest.raises(ConfigError, match=r"^--actions: \(3,2,4\) is a tree \(topk 2\)"):
        get_engine("vllm").check_actions([tree])
    assert len(get_engine("sglang").actions) == 19
    assert [tuple(a) for a in get_engine("vllm").actions] == [(0, 0, 0), (1, 1, 2), (3, 1, 4), (5, 1, 6)]


def test_the_rows_name_the_release_of_the_engine_that_ran_them() -> None:
    config = ServerConfig(model_path="/t", server_command="python -m x", sglang_version="0.5.20")
    assert tuple(get_engine("sglang").row_columns(config)) == ("0.5.20", None, "flashinfer")
    vllm_config = ServerConfig(model_path="/t", server_command="python -m x", engine="vllm", vllm_version="0.32.0")
    assert tuple(get_engine("vllm").row_columns(vllm_config)) == (None, "0.32.0", None)


@pytest.fixture
def pages() -> Iterator[tuple[str, dict[str, str]]]:
    """A local HTTP server answering ``GET <path>`` with ``pages[path]`` (a test sets them)."""
    served: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = served.get(self.path)
            self.send_response(200 if body is not None else 404)
            data = (body or "").encode()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_sglangs_probe_reads_server_info_around_the_timed_batch(pages: tuple[str, dict[str, str]]) -> None:
    url, served = pages
    state = {"avg_spec_accept_length": 2.5, "step_time_dict": {"4": [0.5, 0.02]}}
    served["/get_server_info"] = json.dumps({"internal_states": [state]})
    probe = get_engine("sglang").accept_probe(url, Action(3, 1, 4), 4)
    probe.before()
    state["step_time_dict"] = {"4": [0.5, 0.02, 0.9, 0.021, 0.019]}
    served["/get_server_info"] = json.dumps({"internal_states": [state]})
    no_verify_ct = BatchResult(completed=4, total_output_tokens=2048, elapsed_real_s=1.0, spec_verify_ct=None)
    # no spec_verify_ct in meta_info: server_info's accept length; the step times of the batch only
    assert probe.after(no_verify_ct) == (2.5, "server_info", [0.021, 0.019])


def _metrics(drafts: float, accepted: float) -> str:
    labels = 'engine="0",model_name="m"'
    return (
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}\n"
        f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {3 * drafts}\n"
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}\n"
    )


def test_vllms_probe_reads_the_metrics_counters_around_the_timed_batch(pages: tuple[str, dict[str, str]]) -> None:
    url, served = pages
    served["/metrics"] = _metrics(10.0, 5.0)
    probe = get_engine("vllm").accept_probe(url, Action(3, 1, 4), 4)
    probe.before()
    served["/metrics"] = _metrics(30.0, 45.0)  # the batch: 20 verify steps, 40 tokens accepted
    batch = BatchResult(completed=4, total_output_tokens=2048, elapsed_real_s=1.0, spec_verify_ct=None)
    assert probe.after(batch) == (3.0, "metrics", [])  # 1 + 40 / 20; vLLM records no step times
    baseline = get_engine("vllm").accept_probe(url, Action(0, 0, 0), 4)
    assert baseline.after(batch) == (1.0, "baseline", [])


def test_each_engine_reads_its_own_schedule_file(tmp_path: Path) -> None:
    sglang_file = tmp_path / "adaptive.json"
    sglang_file.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}}))
    notes: list[str] = []
    sglang = get_engine("sglang").launch_schedule(
        str(sglang_file), None, draft="/d", notes=notes, auto_file=None, log=tmp_path / "log"
    )
    assert sglang.action == Action(1, 1, 2)  # sglang's middle of the candidate steps {0, 1, 3}
    assert sglang.extra_args == ("--speculative-adaptive", "--speculative-adaptive-config", str(sglang_file))
    assert get_engine("sglang").schedule_json(sglang)["tiers"]["8"]["candidate_steps"] == [0, 1]
    vllm_file = tmp_path / "vllm.json"
    ranges = [[1, 4, 3], [5, 16, 1]]
    vllm_file.write_text(json.dumps({"method": "eagle3", "num_speculative_tokens": 3,
                                     "num_speculative_tokens_per_batch_size": ranges}))  # fmt: skip
    vllm = get_engine("vllm").launch_schedule(
        str(vllm_file), None, draft="/d", notes=notes, auto_file=None, log=tmp_path / "log"
    )
    assert vllm.action == Action(3, 1, 4) and vllm.ranges == ((1, 4, 3), (5, 16, 1))
    assert vllm.speculative_config is not None and vllm.speculative_config["model"] == "/d"
    assert get_engine("vllm").schedule_note(vllm, vllm.action) == (
        f"vLLM per-batch-size K with {vllm_file}: [start, end, K] [[1, 4, 3], [5, 16, 1]]"
    )
    assert notes == []
    with pytest.raises(ConfigError, match="not a vLLM --speculative-config"):
        get_engine("vllm").launch_schedule(str(sglang_file), None, draft=None, notes=[], auto_file=None, log=Path())


def test_a_schedules_server_fields_are_the_engines() -> None:
    config = ServerConfig(model_path="/t", server_command="python -m x", extra_args=("--log-level", "info"))
    sglang = LaunchSchedule("a.json", Action(1, 1, 2), extra_args=("--speculative-adaptive",))
    assert get_engine("sglang").schedule_server_fields(config, sglang, 8) == {
        "extra_args": ("--speculative-adaptive", "--max-running-requests", "8", "--log-level", "info")
    }
    vllm = LaunchSchedule("auto", Action(3, 1, 4), speculative_config={"num_speculative_tokens": 3})
    assert get_engine("vllm").schedule_server_fields(config, vllm, None) == {
        "speculative_config": {"num_speculative_tokens": 3},
        "extra_args": ("--log-level", "info"),
    }


#: An engine-name comparison: ``== "vllm"``, ``!= "sglang"``, ``in ("vllm", ...)`` and alike.
_NAME_COMPARISON = re.compile(
    r"""(==|!=)\s*["'](sglang|vllm)["']|["'](sglang|vllm)["']\s*(==|!=)|in \(["'](sglang|vllm)"""
)


def test_no_module_outside_engines_compares_engine_names() -> None:
    found = [
        f"{path.relative_to(SRC)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if "engines" not in path.relative_to(SRC).parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if _NAME_COMPARISON.search(line)
    ]
    assert len(list(SRC.rglob("*.py"))) > 100  # the package, not an empty folder
    for branch in ('if engine == "vllm":', "engine != 'sglang'", 'if "vllm" == e', 'engine in ("vllm", "x")'):
        assert _NAME_COMPARISON.search(branch), branch
    assert found == []

"""The engine registry (:mod:`specband.core.engine_table`, :mod:`specband.engines.base`) and each
engine behind the one interface: sglang's and vLLM's flags, launch lines, action checks, accept
probes and schedules."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from specband.contract.actions import Action
from specband.core.engine_table import ENGINE_TABLE_FILE, default_engine_name, engine_entries
from specband.core.errors import ConfigError, DataError
from specband.engines.base import Engine, EngineServing, LaunchSchedule, engine_names, get_engine
from specband.engines.client import BatchResult
from specband.engines.serverconfig import ServerConfig, build_launch_command

SRC = Path(__file__).resolve().parents[2] / "src" / "specband"


def test_both_engines_are_registered_as_data_and_each_is_one_object() -> None:
    listed = json.loads(ENGINE_TABLE_FILE.read_text())
    assert [e["name"] for e in listed["engines"]] == ["sglang", "vllm"] == list(engine_names()[:2])
    assert default_engine_name() == listed["default"] == "sglang"
    assert {e.name: e.version_column for e in engine_entries()[:2]} == {
        "sglang": "sglang_version",
        "vllm": "vllm_version",
    }
    sglang, vllm = get_engine("sglang"), get_engine("vllm")
    assert (sglang.name, sglang.display_name) == ("sglang", "sglang")
    assert (vllm.name, vllm.display_name) == ("vllm", "vLLM")
    assert get_engine("vllm") is vllm  # chosen once: the same engine on every lookup
    assert get_engine(vllm) is vllm  # an engine passes through: whoever is given either resolves once


def test_each_engine_has_every_member_of_the_interface() -> None:
    for interface, of in ((Engine, lambda e: e), (EngineServing, lambda e: e.serving)):
        members = {name for name, _ in inspect.getmembers(interface) if not name.startswith("_")}
        members |= set(interface.__annotations__)
        for name in ("sglang", "vllm"):
            missing = sorted(m for m in members if not hasattr(of(get_engine(name)), m))
            assert missing == [], f"{name} lacks {missing}"
    assert {"speculative_flags", "serving", "runs"} <= set(dir(Engine)) and {"name", "actions"} <= set(
        Engine.__annotations__
    )
    assert {"launch_command", "accept_probe", "launch_schedule"} <= set(dir(EngineServing))


def test_a_pick_needs_only_the_light_half_of_an_engine() -> None:
    """The flags of a pick come from the engine module alone: ``recommend`` imports no launch
    line, HTTP client or CPU preset (the serving half loads when something serves)."""
    code = (
        "import sys; from specband.engines import get_engine; from specband.contract.actions import Action\n"
        "e = get_engine('vllm'); f = e.speculative_flags(Action(3, 1, 4), None)\n"
        "print(sorted(m for m in sys.modules if m.startswith('specband.engines.')), f)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert (
        out.split("] ")[1].strip() == '[\'--speculative-config\', \'{"method":"eagle3","num_speculative_tokens":3}\']'
    )
    loaded = out.split("] ")[0]
    assert "specband.engines.vllm'" in loaded
    for heavy in ("vllm_serving", "serverconfig", "client", "cpu", "sglang_flags"):
        assert f"specband.engines.{heavy}'" not in loaded


def test_each_engine_spells_a_pick_its_own_way() -> None:
    chain = Action(3, 1, 4)
    assert get_engine("sglang").speculative_flags(chain, "/d") == [
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    ]  # fmt: skip
    vllm = get_engine("vllm").speculative_flags(chain, "/d")
    assert vllm[0] == "--speculative-config"
    assert json.loads(vllm[1]) == {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}
    assert get_engine("vllm").speculative_kwargs(chain, None) == {
        "speculative_config": {"method": "eagle3", "num_speculative_tokens": 3}
    }
    assert get_engine("vllm").speculative_flags(Action(0, 0, 0), "/d") == []
    with pytest.raises(ConfigError, match=r"\(3,2,4\) is a tree"):
        get_engine("vllm").speculative_flags(Action(3, 2, 4), "/d")


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


def test_the_rows_name_the_engine_and_the_release_that_ran_them() -> None:
    config = ServerConfig(model_path="/t", server_command="python -m x", engine_version="0.5.20")
    assert config.engine is get_engine("sglang")  # the default engine, resolved
    assert tuple(config.engine.serving.row_columns(config)) == ("sglang", "0.5.20", "flashinfer")
    vllm_config = ServerConfig(model_path="/t", server_command="python -m x", engine="vllm", engine_version="0.32.0")
    assert vllm_config.engine is get_engine("vllm")
    assert tuple(vllm_config.engine.serving.row_columns(vllm_config)) == ("vllm", "0.32.0", None)
    assert ServerConfig(model_path="/t", engine="vllm").server_command == "python -m vllm.entrypoints.openai.api_server"
    assert ServerConfig(model_path="/t").engine_version == get_engine("sglang").serving.default_version


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
    probe = get_engine("sglang").serving.accept_probe(url, Action(3, 1, 4), 4)
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
    probe = get_engine("vllm").serving.accept_probe(url, Action(3, 1, 4), 4)
    probe.before()
    served["/metrics"] = _metrics(30.0, 45.0)  # the batch: 20 verify steps, 40 tokens accepted
    batch = BatchResult(completed=4, total_output_tokens=2048, elapsed_real_s=1.0, spec_verify_ct=None)
    assert probe.after(batch) == (3.0, "metrics", [])  # 1 + 40 / 20; vLLM records no step times
    baseline = get_engine("vllm").serving.accept_probe(url, Action(0, 0, 0), 4)
    assert baseline.after(batch) == (1.0, "baseline", [])


def test_each_engine_reads_its_own_schedule_file(tmp_path: Path) -> None:
    sglang_file = tmp_path / "adaptive.json"
    sglang_file.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}}))
    notes: list[str] = []
    sglang = get_engine("sglang").serving.launch_schedule(
        str(sglang_file), None, draft="/d", notes=notes, auto_file=None, log=tmp_path / "log"
    )
    assert sglang.action == Action(1, 1, 2)  # sglang's middle of the candidate steps {0, 1, 3}
    assert sglang.extra_args == ("--speculative-adaptive", "--speculative-adaptive-config", str(sglang_file))
    assert get_engine("sglang").serving.schedule_json(sglang)["tiers"]["8"]["candidate_steps"] == [0, 1]
    vllm_file = tmp_path / "vllm.json"
    ranges = [[1, 4, 3], [5, 16, 1]]
    vllm_file.write_text(json.dumps({"method": "eagle3", "num_speculative_tokens": 3,
                                     "num_speculative_tokens_per_batch_size": ranges}))  # fmt: skip
    vllm = get_engine("vllm").serving.launch_schedule(
        str(vllm_file), None, draft="/d", notes=notes, auto_file=None, log=tmp_path / "log"
    )
    assert vllm.action == Action(3, 1, 4) and vllm.ranges == ((1, 4, 3), (5, 16, 1))
    assert vllm.speculative_config is not None and vllm.speculative_config["model"] == "/d"
    assert get_engine("vllm").serving.schedule_note(vllm, vllm.action) == (
        f"vLLM per-batch-size K with {vllm_file}: [start, end, K] [[1, 4, 3], [5, 16, 1]]"
    )
    assert notes == []
    with pytest.raises(ConfigError, match="not a vLLM --speculative-config"):
        get_engine("vllm").serving.launch_schedule(
            str(sglang_file), None, draft=None, notes=[], auto_file=None, log=Path()
        )


def test_a_schedules_server_fields_are_the_engines() -> None:
    config = ServerConfig(model_path="/t", server_command="python -m x", extra_args=("--log-level", "info"))
    sglang = LaunchSchedule("a.json", Action(1, 1, 2), extra_args=("--speculative-adaptive",))
    assert get_engine("sglang").serving.schedule_server_fields(config, sglang, 8) == {
        "extra_args": ("--speculative-adaptive", "--max-running-requests", "8", "--log-level", "info")
    }
    vllm = LaunchSchedule("auto", Action(3, 1, 4), speculative_config={"num_speculative_tokens": 3})
    assert get_engine("vllm").serving.schedule_server_fields(config, vllm, None) == {
        "speculative_config": {"num_speculative_tokens": 3},
        "extra_args": ("--log-level", "info"),
    }


#: The most engine-name string literals (``"sglang"``, ``"vllm"``, any case, the whole string) the
#: package may hold outside ``engines/`` and ``cli/`` (the engine list is data: core/engine_table).
MAX_ENGINE_NAME_LITERALS = 3


def _engine_name_uses(tree: ast.AST, names: set[str]) -> tuple[list[int], list[int]]:
    """``(lines of engine-name string literals, lines of tables keyed by engine names)`` in ``tree``:
    a dict whose keys are engine names (``{"sglang": ..}``), ``dict(sglang=..)``, or a comparison
    with one (``engine == "vllm"``, ``in ("sglang", ..)``)."""
    literals, tables = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in names:
            literals.append(node.lineno)
        keys: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
            and any(k.arg is not None and k.arg.lower() in names for k in node.keywords)
        ):
            tables.append(node.lineno)
        if any(isinstance(k, ast.Constant) and str(k.value).lower() in names for k in keys):
            tables.append(node.lineno)
    return literals, tables


def test_no_stage_names_an_engine() -> None:
    """Outside ``engines/`` (and the CLI's option defaults) the engine travels as a value: at most
    :data:`MAX_ENGINE_NAME_LITERALS` engine-name literals, and no table keyed by engine names."""
    names = {n.lower() for n in engine_names()} | {"sglang", "vllm"}
    literals, tables = [], []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] in ("engines", "cli"):
            continue
        found_literals, found_tables = _engine_name_uses(ast.parse(path.read_text(encoding="utf-8")), names)
        literals += [f"{path.relative_to(SRC)}:{n}" for n in found_literals]
        tables += [f"{path.relative_to(SRC)}:{n}" for n in found_tables]
    assert len(list(SRC.rglob("*.py"))) > 100  # the package, not an empty folder
    assert len(literals) <= MAX_ENGINE_NAME_LITERALS, literals
    assert tables == []


@pytest.mark.parametrize(
    ("code", "literals", "tables"),
    [
        ('if engine == "vllm": pass', 1, 0),
        ("x = {'SGLang': 1, 'other': 2}", 1, 1),
        ("x = dict(vllm=1)", 0, 1),
        ('labels = {"sglang": "sglang"}', 2, 1),
        ('engine = "sglang-fork"', 0, 0),
    ],
)
def test_the_engine_name_check_finds_names_and_tables(code: str, literals: int, tables: int) -> None:
    found = _engine_name_uses(ast.parse(code), {"sglang", "vllm"})
    assert (len(found[0]), len(found[1])) == (literals, tables)


def test_rows_name_their_engine_and_old_rows_still_read(tmp_path: Path) -> None:
    from specband.contract.record import RUN_COLUMNS, row_engine
    from specband.sweeps.dataset import load_sweep

    assert {"engine", "engine_version"} <= set(RUN_COLUMNS)
    assert not {"sglang_version", "vllm_version"} & set(RUN_COLUMNS)  # one pair of columns for every engine
    assert row_engine({"engine": "vllm", "engine_version": "0.32.0"}) == ("vllm", "0.32.0")
    assert row_engine({"sglang_version": "0.5.18"}) == ("sglang", "0.5.18")  # written before the columns
    assert row_engine({"engine": "vllm", "sglang_version": None, "vllm_version": "0.32.0"}) == ("vllm", "0.32.0")
    assert row_engine({}) == ("sglang", None) and row_engine({}, default=False) == (None, None)
    base = {"index": 0, "repeat": 0, "batch_size": 1, "steps": 0, "topk": 0, "num_draft_tokens": 0,
            "is_baseline": True, "error": None, "speed_tok_s": 50.0, "accept_length": 1.0}  # fmt: skip
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({**base, "engine": "vllm", "sglang_version": None, "vllm_version": "0.32.0"}) + "\n")
    assert load_sweep(old).rows[0].raw["vllm_version"] == "0.32.0"
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({**base, "engine": "trt"}) + "\n")
    with pytest.raises(DataError, match=r"engine must be one of sglang, vllm, got 'trt'"):
        load_sweep(unknown)

"""``specband probe --url`` against hostile servers (hostile trial round 3: P02, P07, P08, P09,
P13, P15): one error line with the engine's status (3) or bad input (2), and no probe file
written half-way or holding what its own reader (``--acceptance-from``) refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.safety.hostile_http import hostile_server, sglang_info

from specband.core.errors import DataError
from specband.engines.probe_file import PROBE_VERSION, check_probe_file


def _one_error_line(result: Any) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("mode", ["drip", "driphdr"])
def test_a_server_that_drips_its_answer_is_cut_at_the_timeout(run_cli: Any, tmp_path: Path, mode: str) -> None:
    """P02: a byte (or a header line) every 0.2 s resets each read's timeout; --timeout bounds
    the whole request, so the probe gives up with one line (the server drips for 40 s)."""
    out = tmp_path / "p.json"
    with hostile_server({mode: True}) as url:
        result = run_cli("probe", "--url", url, "--out", out, "--timeout", "1")
    assert result.exit_code == 3
    line = _one_error_line(result)
    assert "did not answer in full within --timeout 1 s" in line
    assert not out.exists()


@pytest.mark.parametrize("url", ["http://[::1:32701", "http://[zz]:1", "http://[::1]x:1"])
def test_a_malformed_ipv6_url_is_one_error_line(run_cli: Any, tmp_path: Path, url: str) -> None:
    """P15: urllib's ValueError on a broken bracketed host is an --url error, not a traceback."""
    result = run_cli("probe", "--url", url, "--out", tmp_path / "u.json", "--timeout", "3")
    assert result.exit_code == 2
    assert "--url" in _one_error_line(result)
    assert not (tmp_path / "u.json").exists()


def test_a_bracketed_ipv6_url_is_still_read(run_cli: Any, tmp_path: Path) -> None:
    """The fix keeps a well-formed IPv6 address (nothing listens on the port: the engine's 3)."""
    result = run_cli("probe", "--url", "http://[::1]:1", "--out", tmp_path / "u.json", "--timeout", "3")
    assert result.exit_code == 3
    assert "http://[::1]:1 does not answer" in _one_error_line(result)


def _probe(run_cli: Any, tmp_path: Path, mode: dict[str, Any], *args: str) -> tuple[Any, Path]:
    out = tmp_path / "p.json"
    with hostile_server(mode) as url:
        result = run_cli("probe", "--url", url, "--out", out, "--timeout", "10", "--watch", "0", *args)
    return result, out


_NEGATIVE = sglang_info(speculative_num_steps=-3, speculative_num_draft_tokens=-1)
_HUGE = sglang_info(
    speculative_num_steps=10**30,
    speculative_eagle_topk=10**30,
    speculative_num_draft_tokens=10**30,
    internal_states=[{"avg_spec_accept_length": 1e308}],
)


@pytest.mark.parametrize(
    ("info", "field"),
    [
        (_NEGATIVE, "speculative_num_steps = -3"),
        (sglang_info(speculative_num_steps="3; rm -rf /"), "speculative_num_steps = '3; rm -rf /'"),
        (sglang_info(speculative_eagle_topk=[1]), "speculative_eagle_topk = [1]"),
        (sglang_info(speculative_num_draft_tokens={"a": 1}), "speculative_num_draft_tokens = {'a': 1}"),
        (sglang_info(speculative_num_steps=True), "speculative_num_steps = True"),
        (_HUGE, "speculative_num_steps = 1000000000000000000000000000000"),
        (sglang_info(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=9), "(3, 1, 9)"),
    ],
)
def test_a_config_that_no_server_runs_is_refused_not_read_as_plain(
    run_cli: Any, tmp_path: Path, info: dict[str, Any], field: str
) -> None:
    """P07, P08: negative, type-confused or huge speculative flags were read as plain decoding
    (or written as 31-digit steps); the probe refuses them with the field named."""
    result, out = _probe(run_cli, tmp_path, {"server_info": info}, "--max-requests", "0")
    assert result.exit_code == 3
    line = _one_error_line(result)
    assert field in line or "not a valid config" in line, line
    assert not out.exists()


def test_a_plain_server_with_missing_flags_is_still_plain(run_cli: Any, tmp_path: Path) -> None:
    info = sglang_info(speculative_algorithm=None, speculative_num_steps=None, internal_states=[{}])
    result, out = _probe(run_cli, tmp_path, {"server_info": info})
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())["action"] == [0, 0, 0]


def test_an_accept_length_above_steps_plus_one_is_refused(run_cli: Any, tmp_path: Path) -> None:
    """P09, the server's metric: 7.5 tokens per verify step for (3, 1, 4), at most 4."""
    info = sglang_info(internal_states=[{"avg_spec_accept_length": 7.5}])
    result, out = _probe(run_cli, tmp_path, {"server_info": info}, "--max-requests", "0")
    assert result.exit_code == 3
    assert "accept length (server metrics) 7.5 is outside [1, steps + 1 = 4]" in _one_error_line(result)
    assert not out.exists()


def test_a_huge_accept_length_with_a_valid_config_is_refused(run_cli: Any, tmp_path: Path) -> None:
    """P08's accept length 1e308, with a config the server could run."""
    info = sglang_info(internal_states=[{"avg_spec_accept_length": 1e308}])
    result, out = _probe(run_cli, tmp_path, {"server_info": info}, "--max-requests", "0", "--gpu", "h200")
    assert result.exit_code == 3
    assert "1e+308 is outside [1, steps + 1 = 4]" in _one_error_line(result)
    assert not out.exists()


def test_generate_histograms_longer_than_the_chain_are_refused(run_cli: Any, tmp_path: Path) -> None:
    """P09, the probe's own requests: 8-bin histograms and 8 tokens per verify step for 3 steps."""
    info = sglang_info(internal_states=[{}])
    meta = {"completion_tokens": 32, "spec_verify_ct": 4, "spec_accept_histogram": [0, 0, 0, 0, 0, 0, 0, 4]}
    result, out = _probe(run_cli, tmp_path, {"server_info": info, "generate": {"text": "x", "meta_info": meta}})
    assert result.exit_code == 3
    assert "accept length (probe requests) 8 is outside [1, steps + 1 = 4]" in _one_error_line(result)
    assert not out.exists()


def test_a_histogram_with_more_bins_than_steps_plus_one_is_refused(run_cli: Any, tmp_path: Path) -> None:
    info = sglang_info(internal_states=[{}])
    meta = {"completion_tokens": 8, "spec_verify_ct": 4, "spec_accept_histogram": [0, 4, 0, 0, 0, 0]}
    result, out = _probe(run_cli, tmp_path, {"server_info": info, "generate": {"text": "x", "meta_info": meta}})
    assert result.exit_code == 3
    assert "accept histogram (probe requests) has 6 bins for (3, 1, 4)" in _one_error_line(result)
    assert not out.exists()


def test_a_completion_count_beyond_what_was_asked_is_refused(run_cli: Any, tmp_path: Path) -> None:
    """A 400-digit completion_tokens would overflow the float division (a traceback)."""
    info = sglang_info(internal_states=[{}])
    meta = {"completion_tokens": 10**400, "spec_verify_ct": 1}
    result, out = _probe(run_cli, tmp_path, {"server_info": info, "generate": {"text": "x", "meta_info": meta}})
    assert result.exit_code == 3
    assert "not what it decoded" in _one_error_line(result)
    assert not out.exists()


def test_a_valid_reading_is_still_written(run_cli: Any, tmp_path: Path) -> None:
    info = sglang_info(internal_states=[{}])
    meta = {"completion_tokens": 9, "spec_verify_ct": 4, "spec_accept_histogram": [1, 1, 1, 1]}
    result, out = _probe(run_cli, tmp_path, {"server_info": info, "generate": {"text": "x", "meta_info": meta}})
    assert result.exit_code == 0, result.stderr
    acceptance = json.loads(out.read_text())["acceptance"]
    assert acceptance["accept_length"] == pytest.approx(9 / 4)
    assert acceptance["position_accept"] == pytest.approx([0.75, 0.5, 0.25])


@pytest.mark.parametrize("value", ["1e308", "-5", "NaN", "2.5"])
@pytest.mark.parametrize("gpu", [(), ("--gpu", "h200")])
def test_a_running_requests_gauge_that_is_no_count_is_refused(
    run_cli: Any, tmp_path: Path, value: str, gpu: tuple[str, ...]
) -> None:
    """P13: sglang:num_running_reqs 1e308 was written as a 309-digit batch size (and crashed
    the simulation under --gpu with an OverflowError); -5 and NaN read as an idle server."""
    info = sglang_info(speculative_algorithm=None, internal_states=[{}])
    metrics = f'sglang:num_running_reqs{{model_name="m"}} {value}\n'
    result, out = _probe(run_cli, tmp_path, {"server_info": info, "metrics": metrics}, *gpu)
    assert result.exit_code == 3
    assert f"sglang:num_running_reqs is {float(value):g}, not a count of running requests" in _one_error_line(result)
    assert not out.exists()


def test_a_step_time_dict_with_a_huge_batch_size_is_refused(run_cli: Any, tmp_path: Path) -> None:
    info = sglang_info(internal_states=[{"avg_spec_accept_length": 2.5, "step_time_dict": {str(10**30): [0.01]}}])
    result, out = _probe(run_cli, tmp_path, {"server_info": info}, "--max-requests", "0")
    assert result.exit_code == 3
    assert "step_time_dict holds batch size 1000000000000000000000000000000" in _one_error_line(result)
    assert not out.exists()


def _written_probe(run_cli: Any, tmp_path: Path) -> dict[str, Any]:
    info = sglang_info(internal_states=[{}])
    meta = {"completion_tokens": 9, "spec_verify_ct": 4, "spec_accept_histogram": [1, 1, 1, 1]}
    result, out = _probe(run_cli, tmp_path, {"server_info": info, "generate": {"text": "x", "meta_info": meta}})
    assert result.exit_code == 0, result.stderr
    return json.loads(out.read_text())


def test_a_probe_file_is_written_with_its_provenance_and_the_readings_digest(run_cli: Any, tmp_path: Path) -> None:
    data = _written_probe(run_cli, tmp_path)
    assert data["version"] == PROBE_VERSION == 2
    assert data["provenance"] == "measured"  # no emulator header on this server's answers
    check_probe_file(data, "p.json")


@pytest.mark.parametrize(
    ("edit", "field", "says"),
    [
        ({"version": 99}, "version", "version 99 is newer than this specband reads"),
        ({"version": "1"}, "version", "version '1' is not one this specband reads"),
        ({"action": [7, 8, 32]}, "reading_sha256", "edited after specband probe wrote it"),
        ({"engine": "vllm"}, "reading_sha256", "edited after specband probe wrote it"),
        ({"acceptance": None}, "reading_sha256", "edited after specband probe wrote it"),
        ({"engine": "trtllm"}, "engine", "unknown engine 'trtllm'"),
        ({"provenance": "simulated"}, "provenance", "expected one of measured, emulated"),
        ({"extra": 1}, "extra", "not a key of a probe file (version 2)"),
        ({"format": "specband-probe2"}, "format", "unknown format"),
    ],
)
def test_a_hand_edited_probe_file_is_refused_by_its_frame(
    run_cli: Any, tmp_path: Path, edit: dict[str, Any], field: str, says: str
) -> None:
    """A08: version 99, an action changed with the histogram kept, engine changed with the other
    engine's flags and extra keys were read silently; the format's check names each."""
    data = {**_written_probe(run_cli, tmp_path), **edit}
    with pytest.raises(DataError) as info:
        check_probe_file(data, "p.json")
    assert info.value.field == field and says in str(info.value), str(info.value)


def test_a_missing_key_is_named(run_cli: Any, tmp_path: Path) -> None:
    data = _written_probe(run_cli, tmp_path)
    del data["flags"]
    with pytest.raises(DataError, match="field 'flags': required field is missing"):
        check_probe_file(data, "p.json")


def test_a_version_1_file_is_still_read_without_the_digest(run_cli: Any, tmp_path: Path) -> None:
    data = _written_probe(run_cli, tmp_path)
    del data["provenance"], data["reading_sha256"]
    check_probe_file({**data, "version": 1}, "p.json")
    with pytest.raises(DataError, match="field 'provenance': not a key of a probe file \\(version 1\\)"):
        check_probe_file({**data, "version": 1, "provenance": "measured"}, "p.json")

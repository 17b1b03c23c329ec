"""``specband probe --url`` against hostile servers (hostile trial round 3: P02, P07, P08, P09,
P13, P15): one error line with the engine's status (3) or bad input (2), and no probe file
written half-way or holding what its own reader (``--acceptance-from``) refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.safety.hostile_http import hostile_server, sglang_info


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

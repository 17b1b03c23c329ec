"""Hostile trial E05: a hub endpoint that answers the HEAD probe at once but never a GET held
``recommend --models org/name`` forever (huggingface_hub sends its repo look-up with no
timeout). Every look-up now has a total deadline (``SPECBAND_HUB_DEADLINE_S``): past it, one
line and the download's exit status (5), and the endpoint counts as unreachable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.safety.hostile_http import hostile_server

from specband.files import hub


@pytest.fixture
def stalling_hub(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """HF_ENDPOINT at a loopback server whose HEAD answers 501 at once and whose GETs stall."""
    with hostile_server({"stall_get": True}) as endpoint:
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", endpoint)
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        monkeypatch.setattr(hub, "_reachable", {})
        monkeypatch.setenv(hub.HUB_DEADLINE_ENV, "2")
        yield endpoint


@pytest.mark.parametrize("command", [("recommend", "-b", "1"), ("launch", "-b", "1", "--dry-run")])
def test_a_hub_that_stalls_its_gets_ends_at_the_deadline(
    run_cli: Any, stalling_hub: str, command: tuple[str, ...]
) -> None:
    extra = ("--target", "m", "--draft", "d", "--device", "none") if command[0] == "launch" else ()
    result = run_cli(*command, *extra, "--models", "someorg/somerepo")
    assert result.exit_code == 5
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert lines == [
        f"error: someorg/somerepo: the hub ({stalling_hub}) did not finish the look-up within 2 s "
        "(SPECBAND_HUB_DEADLINE_S sets the bound); nothing was taken from it"
    ]
    assert "Traceback" not in result.stderr
    assert hub._reachable[stalling_hub] is False  # the next look-up answers from the cache at once


def test_a_config_file_look_up_has_the_deadline_too(stalling_hub: str) -> None:
    with pytest.raises(hub.HubUnreachableError, match="did not finish the look-up within 2 s"):
        hub.resolve_config_file("someorg/somemodel")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "abc", "1e400"])
def test_a_bad_deadline_setting_is_one_line(
    run_cli: Any, stalling_hub: str, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(hub.HUB_DEADLINE_ENV, value)
    result = run_cli("recommend", "-b", "1", "--models", "someorg/somerepo")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: SPECBAND_HUB_DEADLINE_S={value!r}: must be")

"""Issue 18 item 5: hub look-ups that never stall. A hub that does not answer counts as
offline after the 2 s probe and the cache answers; a look-up over 1 s prints a progress line;
a mistyped local folder is "no such folder"; launch says when it skips the RoPE check. The
"hub" here is a socket on 127.0.0.1 that accepts connections and never answers (no network)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specband.core.errors import ConfigError
from specband.files import hub

from .conftest import add_snapshot, config_bytes


@pytest.fixture
def silent_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """HF_ENDPOINT at a loopback socket that never answers, and HF_HUB_OFFLINE off."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    endpoint = f"http://127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", endpoint)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_reachable", {})
    try:
        yield endpoint
    finally:
        server.close()


def test_a_silent_hub_is_offline_after_the_probe_and_the_cache_answers(
    hub_cache: Path, silent_hub: str, capsys: pytest.CaptureFixture[str]
) -> None:
    add_snapshot(hub_cache, "org/model", {"config.json": config_bytes({"hidden_size": 8})})
    start = time.monotonic()
    path = hub.resolve_config_file("org/model")
    elapsed = time.monotonic() - start
    assert path.read_bytes() == config_bytes({"hidden_size": 8})
    assert hub._reachable == {silent_hub: False}
    # the probe gives up at 2 s (huggingface_hub alone retried for about 23 s per look-up)
    assert hub.HUB_PROBE_TIMEOUT_S <= elapsed < hub.HUB_PROBE_TIMEOUT_S + 8
    assert capsys.readouterr().err == "note: looking up org/model on the Hugging Face hub ...\n"
    # remembered for the process: a second look-up does not probe again, and prints nothing
    start = time.monotonic()
    hub.resolve_config_file("org/model")
    assert time.monotonic() - start < hub.HUB_PROBE_TIMEOUT_S
    assert capsys.readouterr().err == ""


def test_a_miss_behind_a_silent_hub_says_it_did_not_answer(hub_cache: Path, silent_hub: str) -> None:
    with pytest.raises(hub.HubError) as info:
        hub.resolve_folder("org/absent")
    assert str(info.value) == (
        f"org/absent: not in the local Hugging Face cache ({hub_cache}) and the hub ({silent_hub}) "
        "did not answer within 2 s"
    )


def test_a_mistyped_local_folder_is_no_such_folder(run_cli) -> None:  # type: ignore[no-untyped-def]
    Path("models").mkdir()
    res = run_cli("recommend", "-b", "16", "--models", "models/mine")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: models/mine: no such folder (not looked up on the hub as org/name: ./models is a folder here)"
    ]
    with pytest.raises(ConfigError, match="no such file or folder"):
        hub.resolve_data_file("models/sweep.jsonl")


def test_launch_says_on_stderr_that_it_skipped_the_rope_check(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "launch", "--target", "org/not-cached", "--draft", "org/draft", "-b", "4",
        "--device", "none", "--dry-run", "--allow-transfer", "--sglang-version", "0.5.6",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    skipped = [line for line in res.stderr.splitlines() if "RoPE check" in line]
    assert len(skipped) == 1
    assert skipped[0].startswith(
        "note: RoPE check of the target and draft skipped: their config.json could not be read"
    )


def test_a_refused_connection_says_what_happened(hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe that fails at once (nothing listens on the port: connection refused) names its
    error, and is not reported as a hub that "did not answer within 2 s"."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # bound then closed: a connection to it is refused
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", endpoint)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_reachable", {})
    monkeypatch.setattr(hub, "_probe_errors", {})
    import httpx  # noqa: F401  (imported before the probe's 2 s start)

    with pytest.raises(hub.HubError) as info:
        hub.resolve_folder("org/absent")
    message = str(info.value)
    prefix = (
        f"org/absent: not in the local Hugging Face cache ({hub_cache}) and the hub ({endpoint}) could not be reached ("
    )
    assert message.startswith(prefix), message
    assert "ConnectError" in message and "refused" in message.lower()
    assert "did not answer" not in message

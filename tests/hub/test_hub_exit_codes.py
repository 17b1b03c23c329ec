"""Issue 27 item 9: a hub id the hub does not know is bad input (exit 2), a download that
could not happen (the hub unreachable, or ``HF_HUB_OFFLINE=1``, and the id not cached) is a
failed operation (exit 5). The hub here is a local HTTP server that answers the probe and
knows no repo, or a closed port (connection refused): no network."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from specband.core.exitcodes import ExitCode
from specband.files import hub


class _HubWithoutRepos(http.server.BaseHTTPRequestHandler):
    """Answers the probe (``HEAD /``); every repo, revision and file is the hub's 404
    ``RepoNotFound``, as huggingface.co answers for an id it does not have."""

    def _not_found(self, body: bytes) -> None:
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("X-Error-Message", "Repository not found")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        if self.path == "/":
            self.send_response(200)
            self.end_headers()
        else:
            self._not_found(b"")

    def do_GET(self) -> None:
        self._not_found(b'{"error": "Repository not found"}')

    def log_message(self, *args: object) -> None:
        pass


def _hub_at(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", endpoint)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_reachable", {})
    monkeypatch.setattr(hub, "_probe_errors", {})


@pytest.fixture
def hub_without_repos(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HubWithoutRepos)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    _hub_at(monkeypatch, endpoint)
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()


def _error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def test_an_id_the_hub_does_not_know_is_bad_input(run_cli, hub_cache: Path, hub_without_repos: str) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("recommend", "--models", "org/typo", "-b", "4")
    assert res.exit_code == ExitCode.BAD_INPUT == 2 and res.stdout == ""
    assert _error_lines(res.stderr) == ["error: org/typo: no such hub repo or revision"]
    with pytest.raises(hub.HubError) as info:
        hub.resolve_data_file("datasets/org/typo")
    assert not isinstance(info.value, hub.HubUnreachableError)


def test_an_unreachable_hub_is_a_failed_download(run_cli, hub_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # bound then closed: a connection to it is refused
    _hub_at(monkeypatch, endpoint)
    import httpx  # noqa: F401  (imported before the probe's 2 s start)

    res = run_cli("recommend", "--models", "org/absent", "-b", "4")
    assert res.exit_code == ExitCode.DOWNLOAD_FAILED == 5 and res.stdout == ""
    (line,) = _error_lines(res.stderr)
    assert line.startswith(
        f"error: org/absent: not in the local Hugging Face cache ({hub_cache}) and the hub ({endpoint}) could not "
        "be reached ("
    ), line

"""Channels: a sandbox without network reaches exactly one controller service through a
relayed unix socket, and the command keeps its own exit code."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from evalrunner_assets.execution.bubblewrap import BubblewrapBackend
from evalrunner_assets.execution.channel import UnixForwarder
from evalrunner_assets.execution.sandbox import Channel, NetworkPolicy, RepoExport, SandboxRequest, SandboxStatus


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture()
def backend(tmp_path):
    b = BubblewrapBackend(staging_dir=str(tmp_path / "staging"))
    b.preflight()
    return b


def _export(tmp_path) -> RepoExport:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    return RepoExport(repo="acme/agent", commit="0" * 40, path=str(repo), tree_digest="")


FETCH = (
    "import sys, urllib.request\n"
    "print(urllib.request.urlopen(f'http://127.0.0.1:{sys.argv[1]}/x', timeout=10).read().decode())\n"
)


def test_sandbox_reaches_the_controller_service_through_its_channel(backend, http_server, tmp_path):
    with UnixForwarder("127.0.0.1", http_server.server_address[1]) as fwd:
        req = SandboxRequest(
            argv=("python", "-c", FETCH, "18080"), export=_export(tmp_path), channels=(fwd.channel(18080),)
        )
        result = backend.run(req)
    assert result.status is SandboxStatus.OK, result.stderr_tail
    assert result.stdout.decode().strip() == "hello /x"


def test_without_a_channel_the_same_service_is_unreachable(backend, http_server, tmp_path):
    # The host's loopback port itself is not visible from the sandbox's network namespace.
    port = http_server.server_address[1]
    req = SandboxRequest(argv=("python", "-c", FETCH, str(port)), export=_export(tmp_path), network=NetworkPolicy.NONE)
    result = backend.run(req)
    assert result.status is SandboxStatus.EXIT_NONZERO
    assert "Connection refused" in result.stderr_tail or "Errno" in result.stderr_tail


def test_the_command_keeps_its_exit_code_behind_the_relay(backend, http_server, tmp_path):
    with UnixForwarder("127.0.0.1", http_server.server_address[1]) as fwd:
        req = SandboxRequest(
            argv=("python", "-c", "import sys; sys.exit(7)"), export=_export(tmp_path), channels=(fwd.channel(18081),)
        )
        result = backend.run(req)
    assert result.status is SandboxStatus.EXIT_NONZERO
    assert result.exit_code == 7


def test_a_channel_whose_socket_is_gone_refuses_connections(backend, tmp_path):
    sock_dir = tmp_path / "s"
    sock_dir.mkdir()
    path = sock_dir / "gone.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.close()  # the file stays, nobody listens
    req = SandboxRequest(
        argv=("python", "-c", FETCH, "18082"),
        export=_export(tmp_path),
        channels=(Channel(socket_path=str(path), port=18082),),
    )
    result = backend.run(req)
    assert result.status is SandboxStatus.EXIT_NONZERO


def test_channel_ports_are_validated():
    with pytest.raises(ValueError, match="port"):
        Channel(socket_path="/tmp/x.sock", port=80)

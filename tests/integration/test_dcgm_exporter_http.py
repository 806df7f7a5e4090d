"""gpuscope.agent.devices.dcgm_exporter against a real HTTP server on loopback: the recorded
dcgm-exporter page read over HTTP, bad pages and a refused connection as one-line
SourceErrors, a borrowed client left open."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest

from gpuscope.agent.devices.dcgm_exporter import DcgmExporterSource
from gpuscope.core.errors import SourceError
from tests.unit.test_dcgm import A10G, SAMPLE, T4_A, T4_B

pytestmark = pytest.mark.integration


class _Handler(http.server.BaseHTTPRequestHandler):
    pages: Mapping[str, tuple[int, str]] = {
        "/metrics": (200, SAMPLE.read_text()),
        "/html": (200, "<!DOCTYPE html>\n<html><body>Login</body></html>\n"),
        "/error": (500, "boom"),
        "/node": (200, "# TYPE node_load1 gauge\nnode_load1 0.5\n"),
    }

    def do_GET(self) -> None:
        status, body = self.pages.get(self.path, (404, "not found"))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_exporter_source_reads_the_sample_over_http(server_url: str) -> None:
    """A real GET of the sample page gives the same three GPUs as the translation."""
    source = DcgmExporterSource(f"{server_url}/metrics")
    try:
        readings = {r.uuid: r for r in source.read()}
    finally:
        source.close()
    assert source.name == "dcgm-exporter"
    assert set(readings) == {T4_A, T4_B, A10G}
    assert readings[T4_A].power_watts == pytest.approx(8.969)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/html", "not a Prometheus text page"),
        ("/error", "HTTP 500"),
        ("/node", "no DCGM_FI_"),
    ],
)
def test_exporter_source_bad_pages_raise_source_error(
    server_url: str, path: str, reason: str
) -> None:
    """An HTML page, a 500 or a non-DCGM page is a one-line SourceError naming the URL."""
    source = DcgmExporterSource(f"{server_url}{path}")
    with pytest.raises(SourceError) as info:
        source.read()
    message = str(info.value)
    assert f"{server_url}{path}" in message
    assert reason in message
    assert "\n" not in message
    source.close()


def test_exporter_source_unreachable_raises_source_error() -> None:
    """A refused connection is a SourceError, not an httpx exception."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    source = DcgmExporterSource(f"http://127.0.0.1:{port}/metrics", timeout=1.0)
    with pytest.raises(SourceError, match=f"127.0.0.1:{port}"):
        source.read()
    source.close()


def test_exporter_source_leaves_a_borrowed_client_open(server_url: str) -> None:
    """close() does not close a client the caller passed in."""
    with httpx.Client() as client:
        source = DcgmExporterSource(f"{server_url}/metrics", client=client)
        source.close()
        assert not client.is_closed
        assert len(source.read()) == 3

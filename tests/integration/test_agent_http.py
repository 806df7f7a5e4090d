"""The agent's own HTTP/1.1 server (gpuscope/agent/serving/server.py, on socketserver rather than
http.server): what a scraper sends is answered, anything else gets one status and a closed
connection, and the module loads neither http.server, email nor OpenSSL (issue 24)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.agent.serving.server import AgentHttpServer

pytestmark = pytest.mark.integration


@pytest.fixture
def port() -> Iterator[int]:
    collector = AgentCollector("node-a", None, None, None)
    server = AgentHttpServer(("127.0.0.1", 0), None, collector, process_metrics=False)
    server.start_in_thread()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        collector.close()


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data``, read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        out = b""
        while chunk := conn.recv(65536):
            out += chunk
    return out


def statuses(answer: bytes) -> list[str]:
    """The status codes of the answers in ``answer``, in order."""
    return [
        m.decode()
        for m in re.findall(rb"HTTP/1\.1 (\d{3}) [^\r\n]*\r\nServer: gpuscope-agent\r\n", answer)
    ]


def test_keep_alive_until_the_scraper_says_close(port: int) -> None:
    """Several requests on one connection, answered in order; `Connection: close` ends it."""
    answer = exchange(
        port,
        b"GET /metrics HTTP/1.1\r\nHost: a\r\nAccept-Encoding: identity\r\n\r\n"
        b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
        b"GET /nothing?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    assert statuses(answer) == ["200", "200", "404"]
    assert b"gpuscope_agent_info{" in answer and b'"status": "ok"' in answer
    assert answer.count(b"Connection: close") == 1


def test_http_1_0_closes_after_one_answer(port: int) -> None:
    assert statuses(exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n")) == ["200"]


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi", "501"),
        (b"not a request\r\n\r\n", "400"),
        (b"GET /metrics HTTP/2.0\r\n\r\n", "505"),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", "400"),
        (b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", "431"),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", "400"),
        (b"GET /metrics HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", "413"),
        (b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "501"),
    ],
)
def test_anything_else_is_one_status_and_a_closed_connection(
    port: int, request_bytes: bytes, status: str
) -> None:
    """Even with a good request queued behind it: the bad one ends the connection."""
    answer = exchange(port, request_bytes + b"GET /healthz HTTP/1.1\r\n\r\n")
    assert statuses(answer) == [status]
    assert b"Connection: close" in answer


def test_the_server_loads_no_http_server_email_or_openssl() -> None:
    code = (
        "import sys, gpuscope.agent.serving.server\n"
        "heavy = {'http.server', 'http.client', 'email', 'ssl'} & set(sys.modules)\n"
        "print(sorted(heavy)); sys.exit(1 if heavy else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr

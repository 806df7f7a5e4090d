"""The tests' own plumbing for loopback servers: a port handed out is no other worker's, and
a server started on a port another process answers on fails at once, not later as wrong
data (a test once read another test's VictoriaMetrics, its failure an odd count far from
the cause)."""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests import conftest
from tests.conftest import PORT_BASE, PORT_BLOCK, free_port
from tests.integration.helpers import listening_pids, served


def test_each_worker_hands_out_ports_from_its_own_block_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocks = {}
    for worker in ("gw0", "gw1", "gw3"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        blocks[worker] = {free_port() for _ in range(20)}
    for worker, ports in blocks.items():
        first = PORT_BASE + int(worker[2:]) * PORT_BLOCK
        assert all(first <= p < first + PORT_BLOCK for p in ports), worker
        assert max(ports) < 32768  # Linux's ephemeral range starts there
    assert not blocks["gw0"] & blocks["gw1"] and not blocks["gw1"] & blocks["gw3"]


def test_a_port_in_use_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    with socket.socket() as held:
        port = free_port()
        held.bind(("127.0.0.1", port))
        held.listen()
        for _ in range(PORT_BLOCK - 1):
            assert free_port() != port
    assert conftest._worker_index() == 2


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_server_whose_port_another_process_answers_on_fails_at_once() -> None:
    """This test's own HTTP server holds the port; the process started on it cannot bind,
    but the readiness check is answered (by the wrong server): served() must refuse."""
    other = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    port = other.server_address[1]
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        assert listening_pids(port) is not None
        argv = [
            sys.executable,
            "-c",
            f"import time, socket; socket.socket().bind(('127.0.0.1', {port})); time.sleep(30)",
        ]
        with (
            pytest.raises(RuntimeError, match="answered by another process"),
            served(argv, port, "/"),
        ):
            pass
    finally:
        other.shutdown()
        other.server_close()

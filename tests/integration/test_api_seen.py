"""What was seen against the collector's API (issue 25), over real HTTP under uvicorn.

Seen: ``POST /api/v1/silences`` with ``"duration": NaN`` or a matcher with a lone surrogate
(``"a=\\ud800"``) answered 500 and logged an 80-line traceback each time; every reused
connection waited ~45 ms (the listening socket never set TCP_NODELAY).
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import httpx
import pytest

from gpuscope.collector.serving import bind_listen
from tests import loopback
from tests.conftest import free_port
from tests.integration.test_api_input import AUTH, NOW, Served, served  # noqa: F401  (fixture)

BODIES = [
    b'{"matchers": ["a=\\"b\\""], "duration": NaN}',
    b'{"matchers": ["a=\\"b\\""], "duration": Infinity}',
    b'{"matchers": ["a=\\ud800"], "duration": "1h"}',
    b'{"matchers": ["a=\\"b\\""], "duration": "1h", "comment": "\\udfff"}',
]


@pytest.mark.parametrize("body", BODIES, ids=["nan", "infinity", "surrogate", "comment"])
def test_silence_bodies_json_allows_but_text_cannot_hold_are_422(
    served: Served,  # noqa: F811
    body: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    headers = {**AUTH, "Content-Type": "application/json"}
    with caplog.at_level(logging.WARNING):
        r = loopback.post(f"{served.url}/api/v1/silences", content=body, headers=headers)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["detail"]  # valid JSON, whatever the input echoed
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert served.store.silences(NOW.replace(tzinfo=None), include_expired=True) == []


def test_the_api_socket_sends_without_waiting_for_acks() -> None:
    """The listening socket says TCP (asyncio then sets TCP_NODELAY on each connection)
    and carries TCP_NODELAY itself, which accepted connections inherit."""
    port = free_port()
    listener = bind_listen("127.0.0.1", port, f"127.0.0.1:{port}")
    try:
        listener.listen()
        assert listener.proto == socket.IPPROTO_TCP
        with socket.create_connection(("127.0.0.1", port)):
            conn, _ = listener.accept()
            with conn:
                assert conn.proto == socket.IPPROTO_TCP
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        listener.close()


def test_each_answer_goes_out_in_one_write(tmp_path: Path) -> None:
    """The head and the body of an answer are one write on the socket's transport (they
    were two: with Nagle's algorithm the body waited for the client's delayed ACK)."""
    import asyncio
    import threading
    import time

    import uvicorn

    from gpuscope.collector.gauges.metrics import CollectorMetrics
    from gpuscope.collector.http_api.api import ApiState, create_app
    from gpuscope.collector.http_api.api_http import OneWriteH11Protocol
    from gpuscope.collector.scraping.targets import TargetRegistry
    from gpuscope.collector.storage.store import Store

    writes: list[bytes] = []

    class Recording:
        def __init__(self, transport: asyncio.Transport) -> None:
            self._t = transport

        def write(self, data: bytes) -> None:
            writes.append(bytes(data))
            self._t.write(data)

        def __getattr__(self, name: str) -> object:
            return getattr(self._t, name)

    class Counted(OneWriteH11Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(Recording(transport))  # type: ignore[arg-type]

    store = Store.open(tmp_path / "w.duckdb")
    state = ApiState(store=store, targets=TargetRegistry(), metrics=CollectorMetrics())
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning",
                       lifespan="off", http=Counted)
    )  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            for path in ("/healthz", "/api/v1/status", "/healthz", "/nope"):
                assert client.get(path).status_code in (200, 404)
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()
    answers = [w for w in writes if w]
    assert len(answers) == 4, [w[:30] for w in answers]
    assert all(w.startswith(b"HTTP/1.1 ") and b"\r\n\r\n" in w for w in answers)
    assert all(w.split(b"\r\n\r\n", 1)[1] for w in answers)  # the body is in the same write

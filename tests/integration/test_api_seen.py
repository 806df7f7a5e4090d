"""What was seen against the collector's API (issue 25), over real HTTP under uvicorn.

Seen: ``POST /api/v1/silences`` with ``"duration": NaN`` or a matcher with a lone surrogate
(``"a=\\ud800"``) answered 500 and logged an 80-line traceback each time; every reused
connection waited ~45 ms (the listening socket never set TCP_NODELAY).
"""

from __future__ import annotations

import logging
import socket

import httpx
import pytest

from gpuscope.collector.service import bind_listen
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
        r = httpx.post(f"{served.url}/api/v1/silences", content=body, headers=headers)
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

"""The API server's housekeeping loop: a tick every few seconds, a stop that wakes it, and
a Date header stamped per response.

Issue 27: uvicorn's ten wake-ups a second were a quarter of the collector's CPU per stored
sample on the 32-agent benchmark.
"""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest
import uvicorn

from gpuscope.collector.http_api import api_server
from gpuscope.collector.http_api.api_server import QuietServer


async def _app(scope: object, receive: object, send: object) -> None:  # never called
    raise AssertionError("no request in these tests")


def _server() -> QuietServer:
    return QuietServer(uvicorn.Config(_app, lifespan="off", log_level="warning"))


def _run_main_loop(server: QuietServer, ticks: list[int]) -> threading.Thread:
    """Run ``server.main_loop`` in a thread; record each tick's counter; the test stops it."""
    real = server.on_tick

    async def on_tick(counter: int) -> bool:
        ticks.append(counter)
        return await real(counter)

    server.on_tick = on_tick  # type: ignore[method-assign]
    thread = threading.Thread(target=lambda: asyncio.run(server.main_loop()), daemon=True)
    thread.start()
    return thread


def test_stop_from_another_thread_wakes_the_loop_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """With an hour between ticks, only the wake-up can end the loop within the join."""
    monkeypatch.setattr(api_server, "TICK_SECONDS", 3600.0)
    server, ticks = _server(), []
    thread = _run_main_loop(server, ticks)
    while not ticks:  # the first tick has run: the loop waits for the next
        thread.join(0.01)
    server.stop()
    thread.join(60)
    assert not thread.is_alive()
    assert server.should_exit
    assert len(ticks) == 2  # the first, and the one after the wake-up that sees the stop


def test_a_signal_stops_it_as_uvicorn_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api_server, "TICK_SECONDS", 3600.0)
    server, ticks = _server(), []
    thread = _run_main_loop(server, ticks)
    while not ticks:
        thread.join(0.01)
    server.handle_exit(signal.SIGTERM, None)
    thread.join(60)
    assert not thread.is_alive()
    assert server._captured_signals == [signal.SIGTERM]  # raised again after serving


def test_every_tick_refreshes_the_date_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """uvicorn refreshes its Date header when the tick counter is a multiple of 10."""
    monkeypatch.setattr(api_server, "TICK_SECONDS", 0.0)
    server, ticks = _server(), []
    thread = _run_main_loop(server, ticks)
    while len(ticks) < 5:
        thread.join(0.01)
    server.stop()
    thread.join(60)
    assert not thread.is_alive()
    assert ticks[:5] == [0, 10, 20, 30, 40]
    assert any(name == b"date" for name, _ in server.server_state.default_headers)


def _run_app(app: api_server.ASGIApp, scope_type: str = "http") -> list[dict[str, object]]:
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b""}

    async def send(message: object) -> None:
        sent.append(dict(message))  # type: ignore[call-overload]

    asyncio.run(app({"type": scope_type}, receive, send))
    return sent


async def _app_with_headers(scope: object, receive: object, send: api_server.Send) -> None:
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/plain"), (b"Date", b"stale")],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": b"ok"})


def test_each_response_gets_one_date_of_its_own_moment() -> None:
    """Dated stamps the response start with the injected clock's time as an HTTP date,
    keeps the app's other headers, replaces a date the app set, leaves the body alone."""
    dated = api_server.Dated(_app_with_headers, clock=lambda: 1_741_000_000.0)
    start, body = _run_app(dated)
    assert start["headers"] == [
        (b"content-type", b"text/plain"),
        (b"date", b"Mon, 03 Mar 2025 11:06:40 GMT"),
    ]
    assert body == {"type": "http.response.body", "body": b"ok"}


def test_a_scope_other_than_http_passes_through_unstamped() -> None:
    dated = api_server.Dated(_app_with_headers, clock=lambda: 0.0)
    start, _ = _run_app(dated, "websocket")
    assert (b"Date", b"stale") in start["headers"]  # type: ignore[operator]

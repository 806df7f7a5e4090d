"""uvicorn's server, woken every few seconds for its housekeeping instead of ten times a second.

uvicorn's main loop sleeps a tenth of a second between ticks, to refresh the Date header
(once a second) and to notice a stop request. On a collector that is otherwise waiting for
its next scrape, those ten wake-ups a second were about 1.8 ms of CPU a second: a quarter
of the collector's CPU per stored sample on the 32-agent benchmark (issue 27,
bench/collector_process.py), and one a second still about 0.3 ms (6 %). Here the loop
ticks every :data:`TICK_SECONDS`, a stop request (a signal, or :meth:`QuietServer.stop`
from another thread) wakes it at once, so the server stops as soon as it did, and each
response gets its own Date header from :class:`Dated` (serve with uvicorn's
``date_header=False``): a tick-refreshed one would be up to a tick old.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, MutableMapping
from email.utils import formatdate
from types import FrameType
from typing import Any

import uvicorn

#: Seconds between housekeeping ticks (nothing in them is due sooner: the Date header is
#: :class:`Dated`'s, and a stop wakes the loop).
TICK_SECONDS = 5.0

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


class Dated:
    """An ASGI app whose every HTTP response carries a Date header of the moment it starts
    (RFC 9110 asks an origin server with a clock for one), stamped here rather than by
    uvicorn, whose own is refreshed only on a housekeeping tick."""

    def __init__(self, app: ASGIApp, clock: Callable[[], float] = time.time) -> None:
        self.app, self.clock = app, clock

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_dated(message: Message) -> None:
            if message["type"] == "http.response.start":
                date = formatdate(self.clock(), usegmt=True).encode("latin-1")
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"date"]
                message = {**message, "headers": [*headers, (b"date", date)]}
            await send(message)

        await self.app(scope, receive, send_dated)


class QuietServer(uvicorn.Server):
    """:class:`uvicorn.Server` with a one-second tick and a stop that wakes it."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            # every tick is a whole second apart: a multiple of 10 makes uvicorn refresh
            # its Date header at each, as it does once in ten of its own ticks
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_SECONDS)
            should_exit = await self.on_tick(counter)

    def stop(self) -> None:
        """Stop serving: safe from any thread and from a signal handler."""
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(wake.set)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self.stop()

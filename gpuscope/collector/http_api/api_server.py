"""uvicorn's server, woken once a second for its housekeeping instead of ten times.

uvicorn's main loop sleeps a tenth of a second between ticks, to refresh the Date header
(once a second) and to notice a stop request. On a collector that is otherwise waiting for
its next scrape, those ten wake-ups a second were about 1.8 ms of CPU a second: a quarter
of the collector's CPU per stored sample on the 32-agent benchmark (issue 27,
bench/collector_process.py). Here the loop ticks once a second, and a stop request (a
signal, or :meth:`QuietServer.stop` from another thread) wakes it at once, so the server
stops as soon as it did.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import FrameType

import uvicorn

#: Seconds between housekeeping ticks; uvicorn's Date header has one-second resolution.
TICK_SECONDS = 1.0


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

"""The scrape loop's writer closes a group as soon as every scrape of the tick is in."""

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Sequence

from gpuscope.collector.scrape import ScrapeOutcome, Target
from gpuscope.collector.scrape_loop import ScrapeLoop

TARGETS = [Target(f"http://10.0.0.{i}:9835/metrics") for i in range(5)]


class InstantScraper:
    """Answers every target as soon as all of them have asked (the loop's only use of a
    scraper: client, scrape_one and forget)."""

    def __init__(self) -> None:
        self.started = 0
        self.all_started: asyncio.Event | None = None

    def client(self) -> contextlib.AbstractAsyncContextManager[None]:
        @contextlib.asynccontextmanager
        async def nothing() -> AsyncIterator[None]:
            yield None

        return nothing()

    async def scrape_one(self, client: None, target: Target) -> ScrapeOutcome:
        if self.all_started is None:
            self.all_started = asyncio.Event()
        self.started += 1
        if self.started == len(TARGETS):
            self.all_started.set()
        await self.all_started.wait()
        return ScrapeOutcome(target, time.time(), 0.0, True)

    def forget(self, keep: Sequence[Target]) -> None:
        pass


def test_a_tick_is_written_when_its_last_scrape_is_in_not_after_the_group_time() -> None:
    """Before: the writer waited ``group_seconds`` after the first page of a tick (0.1 s of
    a 0.12 s cycle at 1,000 GPUs). With a 60 s group time, a group that waited for it
    would not arrive within the 30 s this test waits."""
    groups: list[list[str]] = []
    written = threading.Event()

    def write(group: Sequence[ScrapeOutcome]) -> None:
        groups.append([o.target.url for o in group])
        written.set()

    loop = ScrapeLoop(
        InstantScraper(),  # type: ignore[arg-type]
        lambda: TARGETS,
        write,
        3600.0,  # one tick only: the first scrape is at once
        on_fatal=lambda message: None,
        group_seconds=60.0,
    )
    loop.start()
    try:
        assert written.wait(30), "the group waited for its group time"
    finally:
        loop.stop(timeout=30)
    assert sorted(groups[0]) == sorted(t.url for t in TARGETS)

"""The scrape loop's writer closes a group as soon as every scrape of the tick is in."""

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Iterable, Sequence

import pytest

from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.scrape_loop import ScrapeLoop

TARGETS = [Target(f"http://10.0.0.{i}:9835/metrics") for i in range(5)]


class NoClient:
    """The loop's only use of a client besides handing it to scrape_one."""

    def keep(self, urls: Iterable[str]) -> None:
        list(urls)


class InstantScraper:
    """Answers every target as soon as all of them have asked (the loop's only use of a
    scraper: client, scrape_one and forget)."""

    def __init__(self) -> None:
        self.started = 0
        self.all_started: asyncio.Event | None = None

    def client(self) -> contextlib.AbstractAsyncContextManager[NoClient]:
        @contextlib.asynccontextmanager
        async def nothing() -> AsyncIterator[NoClient]:
            yield NoClient()

        return nothing()

    async def scrape_one(self, client: NoClient, target: Target) -> ScrapeOutcome:
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


def test_next_tick_counts_the_ticks_a_late_scrape_ran_past() -> None:
    from gpuscope.collector.scraping.scrape_loop import next_tick

    assert next_tick(100.0, 100.3, 1.0) == (101.0, 0)  # on time: no tick skipped
    assert next_tick(100.0, 101.0, 1.0) == (102.0, 1)  # ended on the next tick: it is gone
    assert next_tick(100.0, 102.7, 1.0) == (103.0, 2)  # ran past 101 and 102
    tick, skipped = next_tick(100.0, 100.05, 0.2)
    assert (tick, skipped) == (pytest.approx(100.2), 0)
    tick, skipped = next_tick(100.0, 100.65, 0.2)
    assert (tick, skipped) == (pytest.approx(100.8), 3)  # 100.2, 100.4 and 100.6


class SometimesSlowScraper(InstantScraper):
    """Every third scrape of a target takes longer than two intervals."""

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval
        self.calls: dict[str, int] = {}

    async def scrape_one(self, client: NoClient, target: Target) -> ScrapeOutcome:
        n = self.calls[target.url] = self.calls.get(target.url, 0) + 1
        if n % 3 == 0:
            await asyncio.sleep(2.5 * self.interval)
        return ScrapeOutcome(target, time.time(), 0.0, n % 4 != 0)


def test_every_tick_is_a_scrape_or_a_counted_skip() -> None:
    """However late the scrapes run (slow targets, a starved process), the outcomes account
    for every tick of each target's schedule between its first and last scrape."""
    interval = 0.2
    outcomes: list[ScrapeOutcome] = []
    enough = threading.Event()

    def write(group: Sequence[ScrapeOutcome]) -> None:
        outcomes.extend(group)
        if len(outcomes) >= 24:
            enough.set()

    loop = ScrapeLoop(
        SometimesSlowScraper(interval),  # type: ignore[arg-type]
        lambda: TARGETS[:2],
        write,
        interval,
        on_fatal=lambda message: None,
    )
    loop.start()
    try:
        assert enough.wait(120)
    finally:
        loop.stop(timeout=30)
    for target in TARGETS[:2]:
        mine = sorted((o for o in outcomes if o.target == target), key=lambda o: o.scheduled_at)
        assert len(mine) >= 5
        ticks = round((mine[-1].scheduled_at - mine[0].scheduled_at) / interval) + 1
        # the first outcome's skips happened before the first tick counted here
        assert sum(1 + o.skipped_ticks for o in mine[1:]) + 1 == ticks
        assert sum(o.skipped_ticks for o in mine) >= 2  # the slow scrapes did skip ticks


class BatchScraper(InstantScraper):
    """Every target answers at once with a page of 10 samples."""

    async def scrape_one(self, client: NoClient, target: Target) -> ScrapeOutcome:
        from gpuscope.collector.scraping.batch import Batch

        await super().scrape_one(client, target)
        batch = Batch(
            target=target.url,
            ts_ms=0,
            names=["m"] * 10,
            labels=[(("i", str(i)),) for i in range(10)],
            values=[0.0] * 10,
        )
        return ScrapeOutcome(target, time.time(), 0.0, True, batch=batch)


def test_a_group_closes_at_its_sample_bound() -> None:
    """A transaction holds at most about ``max_group_samples``: a tick of 5 pages of 10
    samples with a bound of 20 is stored as groups of 2, 2 and 1 pages."""
    groups: list[int] = []
    done = threading.Event()

    def write(group: Sequence[ScrapeOutcome]) -> None:
        groups.append(len(group))
        if sum(groups) >= len(TARGETS):
            done.set()

    loop = ScrapeLoop(
        BatchScraper(),  # type: ignore[arg-type]
        lambda: TARGETS,
        write,
        3600.0,
        on_fatal=lambda message: None,
        group_seconds=60.0,
        max_group_samples=20,
    )
    loop.start()
    try:
        assert done.wait(30)
    finally:
        loop.stop(timeout=30)
    assert sorted(groups) == [1, 2, 2]


def test_the_group_wait_is_at_most_half_the_interval() -> None:
    loop = ScrapeLoop(
        InstantScraper(),  # type: ignore[arg-type]
        lambda: TARGETS,
        lambda group: None,
        0.4,
        on_fatal=lambda message: None,
    )
    assert loop.group_seconds == pytest.approx(0.2)
    assert ScrapeLoop(
        InstantScraper(),  # type: ignore[arg-type]
        lambda: TARGETS,
        lambda group: None,
        15.0,
        on_fatal=lambda message: None,
    ).group_seconds == pytest.approx(0.5)


def test_ticks_committed_together_by_the_interval() -> None:
    """Held at most 10 s, at most 3 ticks a commit; at the default 15 s none waits."""
    from gpuscope.collector.scraping.scrape_loop import commit_ticks

    assert [commit_ticks(s) for s in (1.0, 5.0, 6.0, 10.0, 15.0, 60.0)] == [3, 3, 2, 2, 1, 1]


def test_a_few_ticks_are_written_together_each_targets_pages_in_order() -> None:
    """With ``commit_ticks=3`` the first tick is written alone (readiness waits for a
    commit), then three ticks a write, each target's pages in the order of their ticks;
    what is held when the loop stops is written too. The writer's clock is frozen, so the
    hold's deadline (2.5 intervals) never passes and only the count of ticks closes a
    write: on a loaded machine, late ticks had let the deadline close a write of two."""
    writes: list[list[ScrapeOutcome]] = []
    enough = threading.Event()

    def write(group: Sequence[ScrapeOutcome]) -> None:
        writes.append(list(group))
        if len(writes) >= 3:
            enough.set()

    loop = ScrapeLoop(
        BatchScraper(),  # type: ignore[arg-type]
        lambda: TARGETS,
        write,
        1.0,
        on_fatal=lambda message: None,
        commit_ticks=3,
        monotonic=lambda: 0.0,
    )
    loop.start()
    try:
        assert enough.wait(60)
    finally:
        loop.stop(timeout=30)
    for w in writes:
        for target in TARGETS:
            mine = [o.scheduled_at for o in w if o.target == target]
            assert mine == sorted(mine)
    per_target = [max(sum(o.target == t for o in w) for t in TARGETS) for w in writes]
    assert per_target[0] == 1
    assert per_target[1] == 3
    assert max(per_target) == 3
    assert sum(len(w) for w in writes) == sum(per_target) * len(TARGETS)  # nothing lost at the stop

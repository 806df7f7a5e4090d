"""A small page's parse never waits for a big page's (issue 38).

Seen: on a starved CPU (the collector at nice 10 beside a busy loop) a churning target's
page (20,000 new label sets) held the process-wide parse lock for seconds of wall time, and
every healthy target's page of that tick waited behind it past its timeout ("scrape took
2.58s, past its 1.8s timeout"). Small and big pages now parse in lanes of their own, one
page at a time in each. The big parse here is held on an event, not timed.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from gpuscope.collector.scraping import scrape
from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.scrape import INLINE_PARSE_BYTES, Scraper

SMALL = Target("http://10.0.0.1:9835/metrics")
SMALL_2 = Target("http://10.0.0.2:9835/metrics")
BIG = Target("http://10.0.0.9:9835/metrics")


def _page(size: int, name: str = "m_ratio") -> bytes:
    out, i, n = [], 0, 0
    while n < size:
        line = f'{name}{{id="{i}"}} 0.5\n'.encode()
        out.append(line)
        n += len(line)
        i += 1
    return b"".join(out)


def test_a_small_page_is_parsed_while_a_big_page_parse_is_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    big_page, small_page = _page(INLINE_PARSE_BYTES * 3, "evil_ratio"), _page(4096)
    pages = {BIG.url: big_page, SMALL.url: small_page, SMALL_2.url: small_page}
    big_started, release = threading.Event(), threading.Event()
    real = scrape.page_to_outcome

    async def fake_fetch(client: Any, url: str, limit: int) -> bytes:
        return pages[url]

    def held(target: Target, body: bytes, *args: Any, **kwargs: Any) -> Any:
        if target == BIG:  # a big parse that lasts until the test lets it end
            big_started.set()
            release.wait(60)
        return real(target, body, *args, **kwargs)

    monkeypatch.setattr(scrape, "fetch_page", fake_fetch)
    monkeypatch.setattr(scrape, "page_to_outcome", held)
    scraper = Scraper()

    async def run() -> tuple[bool, list[bool], bool]:
        big = asyncio.create_task(scraper.scrape_one(None, BIG))  # type: ignore[arg-type]
        while not big_started.is_set():
            await asyncio.sleep(0.01)
        smalls = []
        try:  # both small pages, while the big parse still holds its lane
            for target in (SMALL, SMALL_2):
                outcome = await asyncio.wait_for(
                    scraper.scrape_one(None, target),  # type: ignore[arg-type]
                    timeout=30,
                )
                smalls.append(outcome.up and outcome.samples > 0)
            still_held = not big.done()
        except TimeoutError:
            still_held = True
        finally:
            release.set()
        big_outcome = await big
        return still_held, smalls, big_outcome.up

    still_held, smalls, big_up = asyncio.run(run())
    assert smalls == [True, True], "the small pages waited for the big page's parse"
    assert still_held
    assert big_up


def test_big_pages_still_parse_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory bound of a lane: a second big page waits for the first one's parse."""
    other = Target("http://10.0.0.8:9835/metrics")
    big_page = _page(INLINE_PARSE_BYTES * 2, "evil_ratio")
    first_started, release = threading.Event(), threading.Event()
    running: list[str] = []
    most = [0]
    real = scrape.page_to_outcome

    async def fake_fetch(client: Any, url: str, limit: int) -> bytes:
        return big_page

    def counted(target: Target, body: bytes, *args: Any, **kwargs: Any) -> Any:
        running.append(target.url)
        most[0] = max(most[0], len(running))
        if target == BIG:
            first_started.set()
            release.wait(60)
        try:
            return real(target, body, *args, **kwargs)
        finally:
            running.remove(target.url)

    monkeypatch.setattr(scrape, "fetch_page", fake_fetch)
    monkeypatch.setattr(scrape, "page_to_outcome", counted)
    scraper = Scraper()

    async def run() -> list[bool]:
        first = asyncio.create_task(scraper.scrape_one(None, BIG))  # type: ignore[arg-type]
        while not first_started.is_set():
            await asyncio.sleep(0.01)
        second = asyncio.create_task(scraper.scrape_one(None, other))  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        release.set()
        return [o.up for o in await asyncio.gather(first, second)]

    assert asyncio.run(run()) == [True, True]
    assert most[0] == 1

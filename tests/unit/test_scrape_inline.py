"""Where a page is parsed: a small page in the event loop, a big one in a worker thread.

Issue 27: the collector spent about a sixth of its CPU handing each agent's small page to a
worker thread and back. A small page is now parsed in the event loop; a big page, or any
page while another parse holds the parse lock, still goes to a thread, so the event loop
never waits on a long parse.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from gpuscope.collector.scraping import scrape
from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.scrape import INLINE_PARSE_BYTES, Scraper

TARGET = Target("http://10.0.0.1:9835/metrics")


def _page(size: int) -> bytes:
    line = b'm_ratio{gpu="%d"} 0.5\n'
    out, i = [], 0
    while sum(map(len, out)) < size:
        out.append(line % i)
        i += 1
    return b"".join(out)


def _parse_threads(monkeypatch: pytest.MonkeyPatch, body: bytes, hold_lock: bool) -> list[bool]:
    """Scrape a target answering ``body`` twice; for each parse, whether it ran in the
    event loop's thread."""
    seen: list[int] = []
    real = scrape.page_to_outcome

    async def fake_fetch(client: Any, url: str, limit: int) -> bytes:
        return body

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(scrape, "fetch_page", fake_fetch)
    monkeypatch.setattr(scrape, "page_to_outcome", spy)
    scraper = Scraper()

    async def run() -> int:
        for _ in range(2):
            outcome = await scraper.scrape_one(None, TARGET)  # type: ignore[arg-type]
            assert outcome.up and outcome.samples > 0, outcome.error
        return threading.get_ident()

    if hold_lock:  # another page's parse is running in a worker thread
        with scrape._PARSE_LOCK:
            held = threading.Event()
            result: list[int] = []
            t = threading.Thread(
                target=lambda: result.append(asyncio.run(_release_later(run, held)))
            )
            t.start()
            held.wait(30)
        t.join(10)
        loop = result[0]
    else:
        loop = asyncio.run(run())
    return [ident == loop for ident in seen]


async def _release_later(run: Any, held: threading.Event) -> int:
    # the lock is released by the test thread once the first parse is waiting for it
    asyncio.get_running_loop().call_later(0.05, held.set)
    return await run()  # type: ignore[no-any-return]


def test_a_small_page_is_parsed_in_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _parse_threads(monkeypatch, _page(4096), hold_lock=False) == [True, True]


def test_a_big_page_is_parsed_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    body = _page(INLINE_PARSE_BYTES + 1)
    assert len(body) > INLINE_PARSE_BYTES
    assert _parse_threads(monkeypatch, body, hold_lock=False) == [False, False]


def test_a_small_page_never_waits_for_another_parse_in_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While another parse holds the lock, a small page goes to a worker thread (which
    waits for the lock) instead of blocking the event loop on it."""
    assert _parse_threads(monkeypatch, _page(4096), hold_lock=True)[0] is False

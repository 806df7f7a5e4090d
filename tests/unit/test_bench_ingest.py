"""bench/ingest.py: its timed scraper tallies every page's parse, whichever lane parses it."""

from __future__ import annotations

import asyncio

import pytest

from bench.ingest import Tally, TimedScraper
from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.scrape import INLINE_PARSE_BYTES

PAGE = b"".join(
    b'gpuscope_gpu_utilization_ratio{gpu="%d",uuid="GPU-%d"} 0.5\n' % (i, i) for i in range(64)
)


class _PageClient:
    """Stands in for the HTTP client: fetch_page's caller only needs the page back."""


def test_a_small_page_parsed_in_the_event_loop_is_tallied(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page under INLINE_PARSE_BYTES never goes through Scraper._ingest (it is parsed in
    the event loop): the bench's parse figure divided by zero when only _ingest was timed."""
    from gpuscope.collector.scraping import scrape

    assert len(PAGE) <= INLINE_PARSE_BYTES

    async def fetch_page(client: object, url: str, max_bytes: int) -> bytes:
        return PAGE

    monkeypatch.setattr(scrape, "fetch_page", fetch_page)
    scraper = TimedScraper(timeout_seconds=5.0, clock=lambda: 100.0)
    scraper.tally = Tally(interval=1)
    target = Target("http://node-0:9400/metrics")
    outcome = asyncio.run(scraper.scrape_one(_PageClient(), target))  # type: ignore[arg-type]
    assert outcome.up and outcome.samples == 64
    assert scraper.tally.cycle(100.0).parse_s > 0.0

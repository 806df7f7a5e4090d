"""Scraping: fetch targets concurrently, each with its own deadline, into checked batches.

One ingest path for two kinds of page: a gpuscope agent's (already in catalogue terms) and a
dcgm-exporter's (translated). Every scrape gives an outcome with ``up``; a target that fails
gives no samples at all, so its last values are never repeated as if fresh (staleness is
visible as a gap plus ``up = 0``). A page is fetched with its size capped while it inflates
(gpuscope/collector/scraping/fetch.py), parsed one page at a time per lane (a big page in
a worker thread, so that it neither blocks the other targets' I/O nor doubles the memory
peak; a small one in the event loop, where a hand-off to a thread would cost more than its
parse; a small page never waits for a big one's parse),
and checked against the limits (gpuscope/collector/scraping/limits.py) before it becomes a
batch: bad input never reaches the store half-way.

``page_to_outcome`` (gpuscope/collector/scraping/page_outcome.py) is named here too:
the scraper calls it by this name, and tests replace it here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence

import aiohttp

from gpuscope.collector.scraping.cpu_budget import Meter, page_cost
from gpuscope.collector.scraping.fetch import ACCEPT, Client, ScrapeError, fetch_page, redact_url
from gpuscope.collector.scraping.limits import IngestLimits, LimitExceeded
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target, past_timeout
from gpuscope.collector.scraping.page_outcome import TargetCache, page_to_outcome

__all__ = ["ScrapeError", "Scraper", "page_to_outcome", "redact_url"]

log = logging.getLogger(__name__)


#: One small page (up to INLINE_PARSE_BYTES) is parsed at a time in the whole process, and
#: one big page: what parses hold in memory (the pages' text, lines and samples) is then
#: bounded by one page of each lane, not by targets. Two lanes, so that a small page never
#: waits for a big page's parse: on a starved CPU a churning target's page (20,000 new label
#: sets, ~600 KB, 0.1-0.2 s of CPU) held the one lock for seconds of wall time, and every
#: healthy target's page of the tick missed its timeout behind it (issue 38). A small page's
#: parse is short by its size (a 128 KB page of new label sets takes ~0.04 s of CPU).
_PARSE_LOCK = threading.Lock()
_BIG_PARSE_LOCK = threading.Lock()
#: A page up to this size (inflated) is parsed in the event loop when no other small page's
#: parse runs: even a first, full-grammar parse of it takes a few milliseconds, and an
#: agent's steady page (~45 KB) a tenth of one, against the thread hand-off's own cost.
INLINE_PARSE_BYTES = 128 * 1024


class Scraper:
    """Scrapes targets concurrently; never raises for a target's failure."""

    def __init__(
        self,
        *,
        timeout_seconds: float = 5.0,
        max_series: int | None = None,
        max_body_bytes: int | None = None,
        max_label_value_bytes: int | None = None,
        limits: IngestLimits | None = None,
        concurrency: int = 64,
        clock: Callable[[], float] = time.time,
    ) -> None:
        limits = limits or IngestLimits()
        changes = {
            "sample_limit": max_series,
            "body_size_limit": max_body_bytes,
            "label_value_length_limit": max_label_value_bytes,
        }
        self.limits = dataclasses.replace(
            limits, **{k: v for k, v in changes.items() if v is not None}
        )
        self.timeout_seconds = timeout_seconds
        self.concurrency = concurrency
        self.clock = clock
        #: What each target's earlier pages parsed to (series churn clears one; see
        #: :class:`TargetCache`): a steady page then parses by lookup, not by grammar.
        self._caches: dict[str, TargetCache] = {}
        self._caches_lock = threading.Lock()
        #: (CPU seconds, cost seconds) the last parse of each target took
        # (gpuscope/collector/scraping/cpu_budget.py).
        self.cpu_spent: dict[str, tuple[float, float]] = {}

    def scrape(self, targets: Sequence[Target]) -> list[ScrapeOutcome]:
        """Scrape all targets once (blocking; for scheduler threads)."""
        return asyncio.run(self.scrape_async(targets))

    def client(self) -> Client:
        """An HTTP client for :meth:`scrape_one` (one per event loop, opened inside it)."""
        return Client(self.concurrency, {"Accept": ACCEPT, "User-Agent": "gpuscope-collector"})

    async def scrape_async(self, targets: Sequence[Target]) -> list[ScrapeOutcome]:
        gate = asyncio.Semaphore(self.concurrency)
        async with self.client() as client:

            async def one(t: Target) -> ScrapeOutcome:
                async with gate:
                    return await self.scrape_one(client, t)

            return list(await asyncio.gather(*(one(t) for t in targets)))

    async def scrape_one(self, client: Client, target: Target) -> ScrapeOutcome:
        """Fetch, parse and check one target's page within its timeout."""
        started = self.clock()
        t0 = time.perf_counter()
        cpu = cost = 0.0
        try:
            async with asyncio.timeout(self.timeout_seconds):
                body = await fetch_page(client, target.fetch_url, self.limits.body_size_limit)
            if len(body) <= INLINE_PARSE_BYTES and _PARSE_LOCK.acquire(blocking=False):
                try:  # never waits for a big page's parse in the event loop
                    outcome, cpu, cost = self._ingest_locked(target, body, started)
                finally:
                    _PARSE_LOCK.release()
            else:
                outcome, cpu, cost = await asyncio.to_thread(self._ingest, target, body, started)
        except TimeoutError:
            error = f"timeout after {self.timeout_seconds:g}s"
            outcome = self._down(target, started, error, "timeout")
        except ScrapeError as exc:
            outcome = self._down(target, started, str(exc), exc.reason)
        except LimitExceeded as exc:
            outcome = self._down(target, started, str(exc), exc.reason)
            cpu, cost = self.cpu_spent.get(target.url, (0.0, 0.0))
        except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a URL yarl refuses
            outcome = self._down(target, started, *_describe(exc, target))
        elapsed = time.perf_counter() - t0
        if outcome.up and elapsed > self.timeout_seconds:
            outcome = past_timeout(
                dataclasses.replace(outcome, cpu_seconds=cpu, cost_seconds=cost),
                elapsed,
                self.timeout_seconds,
            )
        if not outcome.up:
            log.debug("target down target=%s error=%s", target.url, outcome.error)
        return ScrapeOutcome(
            outcome.target,
            started,
            elapsed,
            outcome.up,
            outcome.error,
            outcome.parse_errors,
            outcome.truncated,
            outcome.batch,
            outcome.reason,
            outcome.dropped,
            cpu,
            cost,
        )

    def _ingest(
        self, target: Target, body: bytes, started: float
    ) -> tuple[ScrapeOutcome, float, float]:
        with _PARSE_LOCK if len(body) <= INLINE_PARSE_BYTES else _BIG_PARSE_LOCK:
            return self._ingest_locked(target, body, started)

    def _ingest_locked(
        self, target: Target, body: bytes, started: float
    ) -> tuple[ScrapeOutcome, float, float]:
        """Parse and check a page, and the (CPU, cost) seconds that took; the caller holds
        the lock of its lane."""
        cache = self._caches.get(target.url)
        if cache is None:
            with self._caches_lock:
                cache = self._caches.setdefault(target.url, TargetCache())
        start = Meter.now()  # garbage collection is not the page's (cpu_budget.py)
        try:
            outcome = page_to_outcome(target, body, started, limits=self.limits, cache=cache)
        finally:  # a page refused by a limit cost CPU up to the refusal too
            self.cpu_spent[target.url] = spent = page_cost(start, Meter.now())
        return outcome, spent[0], spent[1]

    def forget(self, keep: Sequence[Target]) -> None:
        """Drop the caches of targets not in ``keep`` (targets come and go by discovery)."""
        urls = {t.url for t in keep}
        with self._caches_lock:
            for url in [u for u in self._caches if u not in urls]:
                del self._caches[url]
            for url in [u for u in self.cpu_spent if u not in urls]:
                del self.cpu_spent[url]

    @staticmethod
    def _down(target: Target, started: float, error: str, reason: str) -> ScrapeOutcome:
        return ScrapeOutcome(target, started, 0.0, False, error, reason=reason)


def _describe(exc: Exception, target: Target) -> tuple[str, str]:
    """One line and a reason for an HTTP failure, with no credential of the URL in it."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        text, reason = f"cannot connect: {exc.os_error or exc}", "connect"
    elif isinstance(exc, aiohttp.ServerTimeoutError):
        text, reason = "timeout", "timeout"
    else:
        text, reason = f"{type(exc).__name__}: {exc}", "http"
    if target.secret_url:
        text = text.replace(target.secret_url, target.url)
    return text, reason

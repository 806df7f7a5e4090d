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
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import aiohttp
import yarl

from gpuscope.collector.scraping.batch import Batch, Labels
from gpuscope.collector.scraping.cpu_budget import Meter, page_cost
from gpuscope.collector.scraping.dcgm_ingest import dcgm_batch
from gpuscope.collector.scraping.fetch import (
    ACCEPT,
    Client,
    ScrapeError,
    fetch_page,
    redact_url,
)
from gpuscope.collector.scraping.limits import IngestLimits, LimitExceeded, check_page
from gpuscope.collector.scraping.parse import SeriesCache, parse_exposition

__all__ = ["ScrapeError", "ScrapeOutcome", "Scraper", "Target", "page_to_outcome", "redact_url"]

log = logging.getLogger(__name__)

TargetKind = Literal["agent", "dcgm-exporter"]


@dataclass(frozen=True, slots=True)
class Target:
    """A scrape target. ``url`` is what everything shows (its password, if any, redacted);
    the URL as given, credentials included, is kept apart and used only to fetch."""

    url: str
    kind: TargetKind = "agent"
    #: Node a dcgm-exporter page belongs to when its series carry no Hostname label.
    node: str = ""
    secret_url: str = field(default="", repr=False, compare=False)

    def __post_init__(self) -> None:
        public = redact_url(self.url)
        if public != self.url:
            object.__setattr__(self, "secret_url", self.url)
            object.__setattr__(self, "url", public)

    @property
    def fetch_url(self) -> str:
        return self.secret_url or self.url


@dataclass(frozen=True, slots=True)
class ScrapeOutcome:
    target: Target
    started_at: float
    duration_seconds: float
    up: bool
    error: str = ""
    parse_errors: int = 0
    truncated: bool = False
    batch: Batch | None = None
    #: Why the scrape failed, as a label value (timeout, connect, http, body_size_limit,
    #: sample_limit, label_limit, page, store); empty when up.
    reason: str = ""
    #: Samples of the page left out, by reason (gpuscope/collector/scraping/limits.py).
    dropped: Mapping[str, int] = field(default_factory=dict)
    #: CPU the page's parse and admission took (gpuscope/collector/scraping/cpu_budget.py).
    cpu_seconds: float = 0.0
    #: What the budget charges: that CPU stretched by its thread's wait for a CPU (the wall
    #: time it needed on a starved CPU; gpuscope/collector/scraping/cpu_budget.py).
    cost_seconds: float = 0.0
    #: Ticks of the target's schedule that passed without a scrape since its previous one
    #: (the previous scrape, the collector, or its CPU budget, ran past them): counted,
    #: never silent.
    skipped_ticks: int = 0
    #: The tick of the schedule this scrape was due at (0.0 outside the scrape loop).
    scheduled_at: float = 0.0

    @property
    def samples(self) -> int:
        return len(self.batch) if self.batch is not None else 0

    def at_tick(self, scheduled_at: float, skipped_ticks: int) -> ScrapeOutcome:
        """This outcome as the scrape of the tick ``scheduled_at`` (``dataclasses.replace``
        takes twice as long: ~3.6 us against ~1.8 us)."""
        return ScrapeOutcome(
            self.target, self.started_at, self.duration_seconds, self.up, self.error,
            self.parse_errors, self.truncated, self.batch, self.reason, self.dropped,
            self.cpu_seconds, self.cost_seconds, skipped_ticks, scheduled_at,
        )  # fmt: skip


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


def past_timeout(outcome: ScrapeOutcome, elapsed: float, timeout_seconds: float) -> ScrapeOutcome:
    """A page fetched in time but parsed too late (a starved CPU) fails its scrape, as
    Prometheus counts a scrape past its timeout, and is not stored; the CPU its parse took
    stays on the outcome, so a target whose pages are too costly to parse in time is still
    held to its CPU budget (gpuscope/collector/scraping/cpu_budget.py) instead of being parsed again
    at every tick."""
    if not outcome.up or elapsed <= timeout_seconds:
        return outcome
    error = f"scrape took {elapsed:.3g}s, past its {timeout_seconds:g}s timeout"
    return ScrapeOutcome(
        outcome.target, outcome.started_at, 0.0, False, error,
        reason="timeout", cpu_seconds=outcome.cpu_seconds, cost_seconds=outcome.cost_seconds,
    )  # fmt: skip


@dataclass
class TargetCache:
    """What a target's previous scrapes taught: parsed label sets, and their relabelled form.

    A target exports the same series scrape after scrape, so the steady state parses labels
    by lookup. Cleared when it grows past a few times its last page (series churn: a target
    whose labels change every scrape would otherwise keep every label set it ever sent, up
    to ``limit`` entries, ~140 MB for a 20,000-series page) or past ``limit``.
    """

    limit: int = 400_000
    #: Series on the target's last parsed page: what a steady cache holds (twice: the
    #: line and the label text), so a cache far beyond it is churn, not steady state.
    page_series: int = 0
    series: SeriesCache = field(default_factory=SeriesCache)
    #: id(parsed labels) -> (those labels, with an instance label where no node label is)
    relabelled: dict[int, tuple[Labels, Labels]] = field(default_factory=dict)
    #: The last page's label column as parsed and as relabelled: the parser hands the same
    #: list back for a page of the same shape, and so does the relabelling then.
    last_labels: tuple[list[Labels], list[Labels]] | None = None
    #: The last (names, labels) columns that passed the page checks under these limits
    #: with nothing dropped (checks that depend on nothing else without timestamps).
    checked: tuple[list[str], list[Labels], IngestLimits] | None = None

    def trim(self) -> None:
        bound = min(self.limit, 3 * self.page_series + 4096)
        if len(self.series) > bound or len(self.relabelled) > bound:
            self.series.clear()
            self.relabelled.clear()
            self.last_labels = self.checked = None


def page_to_outcome(
    target: Target,
    body: bytes | bytearray,
    started: float,
    *,
    max_series: int | None = None,
    max_label_value_bytes: int | None = None,
    limits: IngestLimits | None = None,
    cache: TargetCache | None = None,
) -> ScrapeOutcome:
    """Parse and check one fetched page into a batch.

    Raises :class:`ScrapeError` when it holds no samples and :class:`LimitExceeded` when it
    is over a limit that fails the scrape.
    """
    limits = limits or IngestLimits()
    sample_limit = limits.sample_limit if max_series is None else max_series
    value_limit = (
        limits.label_value_length_limit if max_label_value_bytes is None else max_label_value_bytes
    )
    if body.lstrip()[:1] == b"<":
        raise ScrapeError("answered HTML, not a Prometheus exposition", "page")
    if cache is not None:
        cache.trim()
    parsed = parse_exposition(
        body,
        max_series=sample_limit,
        max_label_value_bytes=value_limit,
        cache=None if cache is None else cache.series,
    )
    if parsed.truncated:
        raise LimitExceeded(
            f"sample_limit exceeded: more than {sample_limit} samples", "sample_limit"
        )
    cols = parsed.samples
    if cache is not None:
        cache.page_series = len(cols.names)
    if not cols.names:
        first = parsed.errors[0] if parsed.errors else "empty page"
        raise ScrapeError(f"no samples ({first})", "page")
    ts_ms = int(started * 1000)
    if target.kind == "dcgm-exporter":
        series = [
            (n, dict(lbl), v)
            for n, lbl, v in zip(cols.names, cols.labels, cols.values, strict=True)
        ]
        batch = dcgm_batch(target.url, ts_ms, series, target.node or _host(target.url))
    else:
        batch = Batch(
            target.url,
            ts_ms,
            cols.names,
            _relabelled(cols.labels, target.url, cache),
            cols.values,
            dict(parsed.types),
            cols.timestamps_ms,
        )
    batch, dropped = _checked(batch, limits, cache)
    problems = [f"{n} samples dropped ({why})" for why, n in sorted(dropped.items())]
    if parsed.errors:
        problems.append(f"{parsed.error_count} malformed lines, first: {parsed.errors[0]}")
    error = "; ".join(problems)
    if error:
        log.debug("target page problems target=%s error=%s", target.url, error)
    return ScrapeOutcome(
        target, started, 0.0, True, error, parsed.error_count, False, batch, "", dropped
    )


def _relabelled(labels: list[Labels], url: str, cache: TargetCache | None) -> list[Labels]:
    if cache is None:
        return _with_instance(labels, url, {})
    last = cache.last_labels
    if last is not None and last[0] is labels:
        return last[1]
    out = _with_instance(labels, url, cache.relabelled)
    cache.last_labels = (labels, out)
    return out


def _checked(
    batch: Batch, limits: IngestLimits, cache: TargetCache | None
) -> tuple[Batch, Counter[str]]:
    """:func:`check_page`, skipped for the columns of the last page that passed whole."""
    plain = batch.timestamps_ms is None or batch.timestamps_ms.count(None) == len(batch)
    if cache is not None and plain and cache.checked is not None:
        names, labels, under = cache.checked
        if names is batch.names and labels is batch.labels and under == limits:
            return batch, Counter()
    checked, dropped = check_page(batch, limits)
    if cache is not None and plain and not dropped:
        cache.checked = (batch.names, batch.labels, limits)
    return checked, dropped


def _with_instance(
    labels: list[Labels], url: str, memo: dict[int, tuple[Labels, Labels]]
) -> list[Labels]:
    """Give series without a ``node`` label an ``instance`` label (host:port), as Prometheus
    does: the agents' own process metrics would otherwise be one series for all of them.

    ``memo`` remembers each label set's answer by identity (the parser's cache hands the
    same tuples back every scrape); it holds the tuple too, so an id is never reused.
    """
    instance: tuple[str, str] | None = None
    out: list[Labels] = []
    append = out.append
    for lbl in labels:
        hit = memo.get(id(lbl))
        if hit is not None and hit[0] is lbl:
            append(hit[1])
            continue
        new = lbl
        if not any(k == "node" for k, _ in lbl):
            if instance is None:
                u = yarl.URL(url)
                port = u.explicit_port
                instance = ("instance", f"{u.host}:{port}" if port else u.host or "")
            new = tuple(sorted((*lbl, instance)))
        memo[id(lbl)] = (lbl, new)
        append(new)
    return out


def _host(url: str) -> str:
    return yarl.URL(url).host or url


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

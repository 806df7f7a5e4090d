"""Scraping: fetch every target concurrently, each with its own deadline, into batches.

One ingest path for two kinds of page: a gpuscope agent's (already in catalogue terms) and a
dcgm-exporter's (translated). Every scrape gives an outcome with ``up``; a target that fails
gives no samples at all, so its last values are never repeated as if fresh (staleness is
visible as a gap plus ``up = 0``). Bad input (HTML, garbage, a huge page, too many series,
a 10 kB label value) is counted and reported per target and never reaches the store half-way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import httpx

from collector.batch import Batch, Labels
from collector.dcgm_ingest import dcgm_batch
from collector.parse import SeriesCache, parse_exposition

log = logging.getLogger(__name__)

TargetKind = Literal["agent", "dcgm-exporter"]
_ACCEPT = "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5"


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    kind: TargetKind = "agent"
    #: Node a dcgm-exporter page belongs to when its series carry no Hostname label.
    node: str = ""


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

    @property
    def samples(self) -> int:
        return len(self.batch) if self.batch is not None else 0


class ScrapeError(Exception):
    """Why a target gave no usable page (one line)."""


class Scraper:
    """Scrapes targets concurrently; never raises for a target's failure."""

    def __init__(
        self,
        *,
        timeout_seconds: float = 5.0,
        max_series: int = 200_000,
        max_body_bytes: int = 64 * 2**20,
        max_label_value_bytes: int = 4096,
        concurrency: int = 64,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.max_series = max_series
        self.max_body_bytes = max_body_bytes
        self.max_label_value_bytes = max_label_value_bytes
        self.concurrency = concurrency
        self.clock = clock
        self._transport = transport
        self._caches: dict[str, TargetCache] = {}

    def scrape(self, targets: Sequence[Target]) -> list[ScrapeOutcome]:
        """Scrape all targets once (blocking; for scheduler threads)."""
        return asyncio.run(self.scrape_async(targets))

    async def scrape_async(self, targets: Sequence[Target]) -> list[ScrapeOutcome]:
        limits = httpx.Limits(max_connections=self.concurrency)
        gate = asyncio.Semaphore(self.concurrency)
        async with httpx.AsyncClient(
            timeout=self.timeout_seconds,
            limits=limits,
            transport=self._transport,
            headers={"Accept": _ACCEPT, "User-Agent": "gpuscope-collector"},
        ) as client:

            async def one(t: Target) -> ScrapeOutcome:
                async with gate:
                    return await self._scrape_one(client, t)

            return list(await asyncio.gather(*(one(t) for t in targets)))

    async def _scrape_one(self, client: httpx.AsyncClient, target: Target) -> ScrapeOutcome:
        started = self.clock()
        t0 = time.perf_counter()
        try:
            body = await asyncio.wait_for(self._fetch(client, target.url), self.timeout_seconds)
            outcome = self._ingest(target, body, started)
        except TimeoutError:
            outcome = self._down(target, started, f"timeout after {self.timeout_seconds:g}s")
        except ScrapeError as exc:
            outcome = self._down(target, started, str(exc))
        except httpx.HTTPError as exc:
            outcome = self._down(target, started, _describe(exc))
        elapsed = time.perf_counter() - t0
        if not outcome.up:
            log.debug("target down url=%s error=%s", target.url, outcome.error)
        return ScrapeOutcome(
            outcome.target,
            started,
            elapsed,
            outcome.up,
            outcome.error,
            outcome.parse_errors,
            outcome.truncated,
            outcome.batch,
        )

    async def _fetch(self, client: httpx.AsyncClient, url: str) -> bytes:
        async with client.stream("GET", url) as resp:
            if resp.status_code != 200:
                raise ScrapeError(f"HTTP {resp.status_code}")
            ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype in ("text/html", "application/json", "application/xml"):
                raise ScrapeError(f"answered {ctype}, not a Prometheus exposition")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise ScrapeError(f"page larger than {self.max_body_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)

    def _ingest(self, target: Target, body: bytes, started: float) -> ScrapeOutcome:
        return page_to_outcome(
            target,
            body,
            started,
            max_series=self.max_series,
            max_label_value_bytes=self.max_label_value_bytes,
        )

    @staticmethod
    def _down(target: Target, started: float, error: str) -> ScrapeOutcome:
        return ScrapeOutcome(target, started, 0.0, False, error)


@dataclass
class TargetCache:
    """What a target's previous scrapes taught: parsed label sets, and their relabelled form.

    A target exports the same series scrape after scrape, so the steady state parses labels
    by lookup. Cleared when it grows past ``limit`` entries (series churn).
    """

    limit: int = 400_000
    series: SeriesCache = field(default_factory=SeriesCache)
    #: id(parsed labels) -> (those labels, with an instance label where no node label is)
    relabelled: dict[int, tuple[Labels, Labels]] = field(default_factory=dict)

    def trim(self) -> None:
        if len(self.series) > self.limit or len(self.relabelled) > self.limit:
            self.series.clear()
            self.relabelled.clear()


def page_to_outcome(
    target: Target,
    body: bytes,
    started: float,
    *,
    max_series: int = 200_000,
    max_label_value_bytes: int = 4096,
    cache: TargetCache | None = None,
) -> ScrapeOutcome:
    """Parse one fetched page into a batch (raises ScrapeError when it holds no samples)."""
    if body.lstrip()[:1] == b"<":
        raise ScrapeError("answered HTML, not a Prometheus exposition")
    if cache is not None:
        cache.trim()
    parsed = parse_exposition(
        body,
        max_series=max_series,
        max_label_value_bytes=max_label_value_bytes,
        cache=None if cache is None else cache.series,
    )
    cols = parsed.samples
    if not cols.names:
        first = parsed.errors[0] if parsed.errors else "empty page"
        raise ScrapeError(f"no samples ({first})")
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
            _with_instance(cols.labels, target.url, {} if cache is None else cache.relabelled),
            cols.values,
            dict(parsed.types),
            cols.timestamps_ms,
        )
    error = ""
    if parsed.truncated:
        error = f"more than {max_series} series; the rest were dropped"
    elif parsed.errors:
        error = f"{parsed.error_count} malformed lines, first: {parsed.errors[0]}"
    if error:
        log.debug("target page problems url=%s error=%s", target.url, error)
    return ScrapeOutcome(
        target, started, 0.0, True, error, parsed.error_count, parsed.truncated, batch
    )


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
                u = httpx.URL(url)
                instance = ("instance", f"{u.host}:{u.port}" if u.port else u.host)
            new = tuple(sorted((*lbl, instance)))
        memo[id(lbl)] = (lbl, new)
        append(new)
    return out


def _host(url: str) -> str:
    return httpx.URL(url).host or url


def _describe(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect: {exc}" if str(exc) else "cannot connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    return f"{type(exc).__name__}: {exc}"

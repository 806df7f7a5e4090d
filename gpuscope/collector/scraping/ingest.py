"""Scrape outcomes into the store: per-target isolation, and health that tells the truth.

Several targets' pages are committed in one transaction (a transaction costs milliseconds
whatever its size), but no target can fail another's: pages are checked before they are
staged (gpuscope/collector/scraping/limits.py), the store refuses a bad batch before its transaction
(:class:`~gpuscope.collector.storage.store.BadBatch`), and if the database still refuses the group,
a one-row probe tells a store that cannot write from a batch it will not take; the batches are then
written one by one and only the target whose batch fails is marked down, with the reason.

A store that cannot write (a full disk, an invalidated database) turns ``/readyz`` to 503
and ``gpuscope_collector_store_up`` to 0 at once, is logged in one line (no traceback per
cycle), and is retried with back-off; after ``retry_seconds`` the writer raises
:class:`StoreFailed` and the service exits with one line so that Kubernetes restarts it
(DuckDB replays its write-ahead log on open: nothing committed is lost).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import duckdb

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.limits import ChurnGuard, IngestLimits
from gpuscope.collector.scraping.outcome import ScrapeOutcome
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import BadBatch, Store
from gpuscope.collector.storage.store_ticks import Tick

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class StoreFailed(Exception):
    """The store has refused writes for longer than the retry allows (one line)."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class IngestWriter:
    """Stores scrape outcomes and keeps target health, metrics and store health."""

    def __init__(
        self,
        store: Store,
        targets: TargetRegistry,
        metrics: CollectorMetrics,
        limits: IngestLimits,
        *,
        clock: Callable[[], float] = time.time,
        retry_seconds: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.targets, self.metrics = store, targets, metrics
        self.churn = ChurnGuard(limits, clock)
        self.retry_seconds = retry_seconds
        self._sleep, self._monotonic = sleep, monotonic
        self._lock = threading.Lock()
        #: One line while the store cannot write, else empty.
        self.store_error = ""
        self._failing_since: float | None = None
        #: Commits that succeeded since start (readiness needs one).
        self.commits = 0
        metrics.store_up.set(1)

    @property
    def store_ok(self) -> bool:
        return not self.store_error

    def status(self) -> dict[str, Any]:
        return {
            "store_writable": self.store_ok,
            "store_error": self.store_error or None,
            "series_known": self.store.series_known,
        }

    def write(self, outcomes: Sequence[ScrapeOutcome]) -> int:
        """Store ``outcomes`` (several targets, one transaction when all goes well); returns
        the samples stored. Blocks while the store cannot write, up to ``retry_seconds``,
        then raises :class:`StoreFailed`."""
        with self._lock:
            admitted = [self._admit(o) for o in outcomes]
            stored, final = self._retrying(lambda: self._store(admitted))
            self.metrics.samples_ingested.inc(stored)
            for o in final:
                self._account(o)
            up = sum(o.up for o in final)  # one increment a group, not one a target
            if up:
                self.metrics.scrapes.labels("up").inc(up)
            if len(final) > up:
                self.metrics.scrapes.labels("down").inc(len(final) - up)
            return stored

    def write_batch(self, batch: Batch, *, meta: Mapping[str, str] | None = None) -> int:
        """Store one batch of query-API ingest with the same store health and retry, and
        the same series budgets as a scraped page (``max_series``, churn per hour);
        ``meta`` is committed with it (the query source's cursor)."""
        batch, dropped = self.churn.admit(batch, self.store.is_new_series, self.store.series_known)
        for why, n in dropped.items():
            self.metrics.samples_dropped.labels(batch.target, why).inc(n)

        def append() -> int:
            try:
                return self.store.append_scrape(batch, meta=meta)
            except (duckdb.Error, OSError) as exc:
                self._check_writable(exc)
                raise

        with self._lock:
            stored = self._retrying(append)
            self.metrics.samples_ingested.inc(stored)
            self.churn.stored(batch.target)
            return stored

    def _retrying(self, attempt: Callable[[], _T]) -> _T:
        """``attempt()`` until it gets past a store that cannot write, or the retry ends."""
        delay = 0.5
        while True:
            try:
                result = attempt()
                break
            except _StoreDown as exc:
                self._failing(exc.error)
                assert self._failing_since is not None
                waited = self._monotonic() - self._failing_since
                if waited >= self.retry_seconds:
                    raise StoreFailed(
                        f"the database {self.store.path} has refused every write for "
                        f"{waited:.0f}s ({exc.error}); exiting so that the collector is "
                        "restarted"
                    ) from None
                self._sleep(min(delay, self.retry_seconds - waited))
                delay = min(delay * 2, 10.0)
        self._recovered()
        self.commits += 1
        return result

    # -- the steps -------------------------------------------------------------------------
    def _admit(self, o: ScrapeOutcome) -> ScrapeOutcome:
        """The outcome with only the new series the churn budgets allow."""
        if not (o.up and o.batch is not None):
            return o
        batch, dropped = self.churn.admit(
            o.batch, self.store.is_new_series, self.store.series_known
        )
        if not dropped:
            return o
        note = "; ".join(f"{n} new series dropped ({why})" for why, n in dropped.items())
        error = f"{o.error}; {note}" if o.error else note
        return dataclasses.replace(
            o, batch=batch, error=error, dropped=dict(Counter(o.dropped) + dropped)
        )

    def _store(self, outcomes: list[ScrapeOutcome]) -> tuple[int, list[ScrapeOutcome]]:
        """Write the group; returns the samples stored and the outcomes as they ended."""
        outcomes = list(outcomes)
        while True:
            try:
                return self._append(outcomes), outcomes
            except BadBatch as exc:  # refused before the transaction: that target only
                if len({o.target.url for o in outcomes}) < len(outcomes):
                    return self._one_by_one(outcomes)  # a few ticks: the refused page alone
                marked = [
                    _refused(o, str(exc))
                    if o.target.url == exc.target and o.up and o.batch is not None
                    else o
                    for o in outcomes
                ]
                if marked == outcomes:  # not one of these targets' batches: one by one
                    return self._one_by_one(outcomes)
                outcomes = marked
            except (duckdb.Error, OSError) as exc:
                self._check_writable(exc)
                return self._one_by_one(outcomes)

    def _one_by_one(self, outcomes: list[ScrapeOutcome]) -> tuple[int, list[ScrapeOutcome]]:
        """The database refused a group it can write: each batch alone, so that only the
        target whose batch it refuses is down."""
        stored, final = 0, []
        for o in outcomes:
            if o.up and o.batch is not None:
                try:
                    stored += self._append([o])
                except (duckdb.Error, OSError, BadBatch) as exc:
                    if not isinstance(exc, BadBatch):
                        self._check_writable(exc)
                    o = _refused(o, first_line(exc))  # noqa: PLW2901 (the registry logs it)
            final.append(o)
        down = [o for o in final if not (o.up and o.batch is not None)]
        try:
            self._append(down)
        except (duckdb.Error, OSError) as exc:
            self._check_writable(exc)
        return stored, final

    def _append(self, outcomes: Sequence[ScrapeOutcome]) -> int:
        """Store ``outcomes`` in one transaction: a tick, or a few (a target's outcomes in
        the order scraped; the scrape loop commits a few ticks at a time)."""
        ticks: list[Tick] = []
        seen: set[str] = set()
        up: list[tuple[Batch, float]] = []
        down: list[tuple[str, float, float, str]] = []
        for o in outcomes:
            if o.target.url in seen:  # its next tick
                ticks.append((up, down))
                seen, up, down = set(), [], []
            seen.add(o.target.url)
            if o.up and o.batch is not None:
                up.append((o.batch, o.duration_seconds))
            else:
                down.append((o.target.url, o.started_at, o.duration_seconds, o.error))
        if up or down:
            ticks.append((up, down))
        return sum(sum(counts) for counts in self.store.append_ticks(ticks)) if ticks else 0

    def _check_writable(self, cause: BaseException) -> None:
        """Raise :class:`_StoreDown` for an error of the store itself (I/O, a failed commit,
        an invalidated database: a disk with a few bytes left takes a probe but not a
        page), or when a one-row write does not commit either."""
        text = str(cause)
        if isinstance(cause, _STORE_ERRORS) or any(m in text for m in _STORE_MESSAGES):
            raise _StoreDown(first_line(cause))
        try:
            self.store.probe_write()
        except Exception as exc:  # any failure of the probe is the store's
            raise _StoreDown(first_line(cause)) from exc

    # -- health ----------------------------------------------------------------------------
    def _failing(self, error: str) -> None:
        self.metrics.store_write_failures.inc()
        if not self.store_error:
            self._failing_since = self._monotonic()
            log.error(
                "store cannot write db=%s error=%s; /readyz is 503, retrying for %gs",
                self.store.path,
                error,
                self.retry_seconds,
            )
            self.metrics.store_up.set(0)
        self.store_error = error

    def _recovered(self) -> None:
        if self.store_error:
            log.warning("store writes again db=%s", self.store.path)
        self.store_error = ""
        self._failing_since = None
        self.metrics.store_up.set(1)

    def _account(self, o: ScrapeOutcome) -> None:
        self.targets.record(o)
        url, m = o.target.url, self.metrics
        if o.skipped_ticks:
            m.scrapes.labels("skipped").inc(o.skipped_ticks)
            m.scrape_skipped.labels(url).inc(o.skipped_ticks)
        if o.parse_errors:
            m.parse_errors.labels(url).inc(o.parse_errors)
        if not o.up:
            m.scrape_failures.labels(url, o.reason or "other").inc()
        for why, n in o.dropped.items():
            m.samples_dropped.labels(url, why).inc(n)
        if o.up and o.batch is not None:
            self.churn.stored(url)


#: Errors that are the database's, never a batch's content.
_STORE_ERRORS = (OSError, duckdb.IOException, duckdb.FatalException, duckdb.InternalException)
_STORE_MESSAGES = ("invalidated", "Failed to commit", "Could not write", "No space left")


class _StoreDown(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def _refused(o: ScrapeOutcome, error: str) -> ScrapeOutcome:
    return dataclasses.replace(o, up=False, batch=None, error=error, reason="store")

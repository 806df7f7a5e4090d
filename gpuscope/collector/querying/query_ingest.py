"""The collector's query-API ingest: one cycle of pull or fleet mode, its status, its metrics.

The service calls :meth:`QueryIngest.cycle` on its schedule and :meth:`cancel` on shutdown.
A failed cycle is one log line (never a traceback) and shows in the status: URL (redacted),
last success, last error, lag behind now, steps skipped, and what the last cycle cost in
queries, engine time and bytes. Where each mode's window stands is kept in the store's
``meta`` (``query_cursor``), so a restart neither stores a step twice nor loses one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuscope.collector.querying.fleet import FleetSource
from gpuscope.collector.querying.fleet_questions import BUCKET_S
from gpuscope.collector.querying.fleet_summaries import gpu_link_floors
from gpuscope.collector.querying.promql import PrometheusQuerySource
from gpuscope.collector.querying.query_client import (
    QueryCancelled,
    QueryClient,
    QueryRefused,
    QueryStats,
)
from gpuscope.collector.querying.step_window import StepWindow
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.schema import GET_META, QUERY_CURSOR_KEY, SET_META
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import SourceError
from gpuscope.core.query_settings import QuerySettings
from gpuscope.core.settings import AnalyticsSettings
from gpuscope.core.timefmt import rfc3339

log = logging.getLogger(__name__)

CURSOR_KEY = QUERY_CURSOR_KEY


class Write(Protocol):
    """Stores one batch and, in the same transaction, the ``meta`` keys given."""

    def __call__(self, batch: Batch, *, meta: Mapping[str, str] | None = None) -> int: ...


@dataclass
class CycleRecord:
    at: float
    samples: int = 0
    steps: int = 0
    stats: QueryStats = field(default_factory=QueryStats)
    error: str = ""


def make_client(url: str, q: QuerySettings) -> QueryClient:
    token = os.environ.get(q.bearer_token_env, "") if q.bearer_token_env else ""
    return QueryClient(
        url,
        timeout_seconds=q.timeout_seconds,
        tenant=q.tenant,
        bearer_token_file=q.bearer_token_file,
        bearer_token=token,
        retries=q.retries,
        backoff_seconds=q.backoff_seconds,
    )


class QueryIngest:
    """Pull or fleet mode over one :class:`QueryClient`, storing through ``write``."""

    def __init__(
        self,
        url: str,
        q: QuerySettings,
        step_seconds: float,
        store: Store,
        write: Write,
        *,
        client: QueryClient | None = None,
        analytics: AnalyticsSettings | None = None,
    ) -> None:
        """``analytics``: the detectors' settings the collector runs with (fleet summaries
        store GPU links over a floor taken from their capacities; ``None``: defaults)."""
        self.settings = q
        self.mode = q.mode
        self.store = store
        self.write = write
        self.client = client or make_client(url, q)
        self.step = float(BUCKET_S if q.mode == "fleet" else step_seconds)
        self.pull = PrometheusQuerySource(url, step_seconds=self.step, client=self.client)
        self.pull_window = StepWindow(
            self.step,
            latency_offset=q.latency_offset_seconds,
            max_steps_per_query=q.max_steps_per_query,
            max_lag_steps=q.max_lag_steps,
            final_after=max(120.0, 4 * self.step),
        )
        self.fleet = FleetSource(
            self.client,
            shards=q.shards,
            recording_rules=q.recording_rules,
            summaries=q.summaries,
            changes_only=q.changes_only,
            link_floors=gpu_link_floors(analytics or AnalyticsSettings())
            if q.mode == "fleet" and q.summaries
            else None,
            latency_offset=q.latency_offset_seconds,
            max_buckets_per_query=q.max_buckets_per_query,
            max_lag_buckets=q.max_lag_buckets,
            concurrency=q.concurrency,
        )
        self.last: CycleRecord | None = None
        #: Guards the cursors' JSON and the error fields (shards fail in their own threads).
        self._lock = threading.Lock()
        #: When the cycle in flight started (None between cycles).
        self.in_flight_since: float | None = None
        self.last_success: float | None = None
        self.last_error = ""
        self.last_error_at: float | None = None
        self.errors = 0
        self.cycles = 0
        self._now = 0.0
        self._load_cursors()

    @property
    def shown_url(self) -> str:
        return self.client.shown_url

    def _windows(self) -> dict[str, StepWindow]:
        if self.mode == "fleet":
            return {str(k): w for k, w in self.fleet.windows.items()}
        return {"pull": self.pull_window}

    def _load_cursors(self) -> None:
        cur = self.store.cursor()
        try:
            rows = cur.execute(GET_META, [CURSOR_KEY]).fetchall()
        finally:
            cur.close()
        if not rows:
            return
        try:
            saved = json.loads(str(rows[0][0]))
        except ValueError:
            return
        if saved.get("mode") != self.mode or saved.get("step") != self.step:
            return
        cursors = saved.get("cursors", {})
        if saved.get("shards", self.settings.shards) != self.settings.shards:
            # the nodes were hashed into other shards: every shard goes on from the newest
            # cursor, so no node's bucket is stored twice (older ones may be missing)
            known = [float(c) for c in cursors.values() if isinstance(c, int | float)]
            cursors = {k: max(known) for k in self._windows()} if known else {}
        for key, window in self._windows().items():
            if isinstance(cursors.get(key), int | float):
                window.cursor = float(cursors[key])

    def _cursor_json(self, override: Mapping[str, float] | None = None) -> str:
        cursors: dict[str, float | None] = {k: w.cursor for k, w in self._windows().items()}
        return json.dumps({
            "mode": self.mode, "step": self.step, "shards": self.settings.shards,
            "cursors": {**cursors, **(override or {})},
        })  # fmt: skip

    def _store_bucket(self, shard: int, batch: Batch, cursor: float) -> int:
        """A fleet bucket and its shard's cursor past it, committed together: a kill
        between two buckets neither repeats the first nor loses the second."""
        with self._lock:
            value = self._cursor_json({str(shard): cursor})
        return self.write(batch, meta={CURSOR_KEY: value})

    def _shard_failed(self, error: str) -> None:
        """A shard's query failed (in its own thread): shown at once, not at cycle end."""
        with self._lock:
            self.last_error, self.last_error_at = error, self._now

    def _save_cursors(self) -> None:
        value = self._cursor_json()
        cur = self.store.cursor()
        try:
            cur.execute(SET_META, [CURSOR_KEY, value])
        finally:
            cur.close()

    def cancel(self) -> None:
        """Shutdown: abandon the query in flight (the engine stops it too)."""
        self.client.cancel()

    def cycle(self, now: float) -> int:
        """One cycle: ask what is due, store it, advance. Errors are recorded, not raised."""
        record = CycleRecord(at=now)
        self._now, self.in_flight_since = now, now
        try:
            if self.mode == "fleet":
                deadline = time.monotonic() + self.settings.cycle_deadline()
                done = self.fleet.cycle(
                    now, self._store_bucket, deadline=deadline, on_error=self._shard_failed
                )
                record.samples, record.steps = done.samples, done.buckets
                if done.errors:
                    record.error = done.errors[0]
            else:
                record.samples, record.steps = self._pull_cycle(now)
        except QueryCancelled:
            record.error = "cancelled"
        except SourceError as exc:
            record.error = str(exc)
        finally:
            self.in_flight_since = None
        self._save_cursors()
        record.stats = self.client.take_stats()
        self.last = record
        self.cycles += 1
        if record.error:
            self.errors += 1
            self.last_error, self.last_error_at = record.error, now
            log.warning("query cycle failed mode=%s error=%s", self.mode, record.error)
        else:
            self.last_success = now
        return record.samples

    def _pull_cycle(self, now: float) -> tuple[int, int]:
        plan = self.pull_window.next(now)
        if plan is None:
            return 0, 0
        start, end = plan
        try:
            batches = self.pull.fetch(start, end)
        except QueryRefused:
            self.pull_window.refused(round((end - start) / self.step) + 1)
            raise
        before = self.pull_window.cursor or start
        stored = 0
        for b in sorted(batches, key=lambda b: b.ts_ms):
            after = round(b.ts_ms / 1000, 3) + self.step
            with self._lock:
                value = self._cursor_json({"pull": after})
            stored += self.write(b, meta={CURSOR_KEY: value})  # the step and its cursor
            self.pull_window.cursor = max(self.pull_window.cursor or after, after)
        self.pull_window.cursor = before
        self.pull_window.answered(start, end, {round(b.ts_ms / 1000, 3) for b in batches}, now)
        after = self.pull_window.cursor or start
        return stored, round((after - before) / self.step)

    # -- what it shows ---------------------------------------------------------------------
    def lag(self, now: float) -> float | None:
        if self.mode == "fleet":
            cursors = [w.cursor for w in self.fleet.windows.values() if w.cursor is not None]
            return max(0.0, now - min(cursors)) if cursors else None
        return self.pull_window.lag(now)

    def skipped(self) -> int:
        return sum(w.skipped for w in self._windows().values())

    def status(self, now: float) -> dict[str, Any]:
        last = self.last
        return {
            "url": self.shown_url,
            "mode": self.mode,
            "tenant": self.settings.tenant or None,
            "step_seconds": self.step,
            "last_success": rfc3339(self.last_success) if self.last_success else None,
            "last_error": self.last_error or None,
            "last_error_at": rfc3339(self.last_error_at) if self.last_error_at else None,
            "lag_seconds": self.lag(now),
            "steps_skipped": self.skipped(),
            "steps_empty": sum(w.empty for w in self._windows().values()),
            "rule_gaps_filled": self.fleet.rule_gaps_filled
            if self.mode == "fleet" and self.settings.recording_rules else None,
            "cycles": self.cycles,
            "failed_cycles": self.errors,
            "cycle_in_flight_since": rfc3339(self.in_flight_since)
            if self.in_flight_since is not None else None,
            "cycle_deadline_seconds": self.settings.cycle_deadline()
            if self.mode == "fleet" else None,
            "shards": [st.shown(s, self.fleet.windows[s].cursor)
                       for s, st in self.fleet.state.items()] if self.mode == "fleet" else None,
            "last_cycle": None if last is None else {
                "at": rfc3339(last.at), "samples": last.samples, "steps": last.steps,
                "queries": last.stats.queries, "failed_queries": last.stats.failures,
                "query_seconds": round(last.stats.seconds, 3), "bytes": last.stats.bytes,
                "error": last.error or None,
            },
        }  # fmt: skip


class QueryIngestMetrics:
    """The query source on ``/metrics`` (a prometheus_client collector, read at scrape)."""

    def __init__(self, ingest: QueryIngest, clock: Callable[[], float]) -> None:
        self.ingest, self.clock = ingest, clock

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        q, now = self.ingest, self.clock()
        labels = ["url", "mode"]
        values = [q.shown_url, q.mode]

        def gauge(name: str, doc: str, value: float | None) -> Metric:
            g = GaugeMetricFamily(name, doc, labels=labels)
            if value is not None:
                g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> Metric:
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(values, value)
            return c

        last = q.last
        yield gauge("gpuscope_collector_query_lag_seconds",
                    "How far the next step to store is behind now.", q.lag(now))  # fmt: skip
        yield gauge("gpuscope_collector_query_last_success_timestamp_seconds",
                    "When a query cycle last succeeded (Unix time).", q.last_success)  # fmt: skip
        yield counter("gpuscope_collector_query_steps_skipped",
                      "Steps given up for being too far behind.", q.skipped())  # fmt: skip
        yield counter("gpuscope_collector_query_failed_cycles",
                      "Query cycles that ended with an error.", q.errors)  # fmt: skip
        yield gauge("gpuscope_collector_query_cycle_seconds",
                    "Engine time (HTTP round trips) of the last cycle.",
                    None if last is None else last.stats.seconds)  # fmt: skip
        yield gauge("gpuscope_collector_query_cycle_bytes",
                    "Bytes the engine answered in the last cycle.",
                    None if last is None else last.stats.bytes)  # fmt: skip
        yield gauge("gpuscope_collector_query_cycle_queries",
                    "Queries sent in the last cycle.",
                    None if last is None else last.stats.queries)  # fmt: skip
        if q.mode == "fleet":
            shards = GaugeMetricFamily(
                "gpuscope_collector_query_shards",
                "Fleet-mode shards by state (asking, ok, failed, timed_out, not_asked, new).",
                labels=[*labels, "state"],
            )
            states: dict[str, int] = {}
            for st in q.fleet.state.values():
                states[st.state] = states.get(st.state, 0) + 1
            for state, n in sorted(states.items()):
                shards.add_metric([*values, state], n)
            yield shards
            if q.fleet.recording_rules:
                yield counter("gpuscope_collector_query_rule_gaps_filled",
                              "Node buckets the engine's recording rules had not reached, "
                              "asked as *_over_time instead.",
                              q.fleet.rule_gaps_filled)  # fmt: skip

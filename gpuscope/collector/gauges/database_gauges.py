"""The running collector's rewrites of its database file, as metrics.

The collector gives its file's free blocks back by rewriting it while it runs
(docs/storage.md, "Giving space back"); writes and readers that come meanwhile wait. These
counters say how often that happened and how much waited, read from the store at scrape
time (no state of their own).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class RewriteCounts(Protocol):
    """What the store counts of its rewrites (gpuscope.collector.storage.store.Store)."""

    rewrites: int
    last_rewrite_s: float
    writes_waited: int

    @property
    def readers_waited(self) -> int: ...


class DatabaseGauges(Collector):
    """``gpuscope_collector_db_rewrites_total``, ``..._db_rewrite_waits_total{what}`` and
    ``..._db_last_rewrite_seconds``."""

    def __init__(self, store: RewriteCounts) -> None:
        self._store = store

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self._store
        yield CounterMetricFamily(
            "gpuscope_collector_db_rewrites",
            "Rewrites of the database file that gave its free blocks back, while running.",
            value=s.rewrites,
        )
        waits = CounterMetricFamily(
            "gpuscope_collector_db_rewrite_waits",
            "Writes (scrape cycles, records) and readers' cursors that waited for a rewrite.",
            labels=["what"],
        )
        waits.add_metric(["write"], s.writes_waited)
        waits.add_metric(["read"], s.readers_waited)
        yield waits
        yield GaugeMetricFamily(
            "gpuscope_collector_db_last_rewrite_seconds",
            "How long the last rewrite of the database file took (0 before the first).",
            value=s.last_rewrite_s,
        )

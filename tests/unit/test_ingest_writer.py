"""The ingest writer: a batch the database refuses fails only its own target; a database
that cannot write fails readiness, then gives up after the bounded retry (issue 13)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.ingest import IngestWriter, StoreFailed
from gpuscope.collector.scraping.limits import IngestLimits
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store

UTIL = "gpuscope_gpu_utilization_ratio"
T = 1_741_000_000.0


def outcome(url: str, value: float, at: float = T) -> ScrapeOutcome:
    labels = (("instance", url),)
    b = Batch(url, int(at * 1000), [UTIL], [labels], [value], {UTIL: "gauge"})
    return ScrapeOutcome(Target(url), at, 0.01, True, batch=b)


class PickyStore(Store):
    """A real store whose database refuses any group holding the "evil" target's batch,
    with an error about content (as a conversion error would be)."""

    def append_cycle(
        self,
        batches: Sequence[tuple[Batch, float]],
        down: Sequence[tuple[str, float, float, str]] = (),
    ) -> list[int]:
        if any(b.target == "http://evil:1/metrics" for b, _ in batches):
            raise duckdb.ConversionException("Conversion Error: a value out of range")
        return super().append_cycle(batches, down)


def picky(path: Path) -> PickyStore:
    plain = Store.open(path)
    return PickyStore(plain._con, plain.path, False, plain.retention)


def test_a_batch_the_database_refuses_fails_only_its_target(tmp_path: Path) -> None:
    store = picky(tmp_path / "p.duckdb")
    registry = TargetRegistry([Target("http://good:1/metrics"), Target("http://evil:1/metrics")])
    writer = IngestWriter(store, registry, CollectorMetrics(), IngestLimits())
    try:
        stored = writer.write(
            [outcome("http://evil:1/metrics", 1.0), outcome("http://good:1/metrics", 0.5)]
        )
        assert stored == 1
        assert writer.store_ok and writer.commits == 1
        health = {t["url"]: t for t in registry.status()}
        assert health["http://good:1/metrics"]["up"]
        evil = health["http://evil:1/metrics"]
        assert not evil["up"] and evil["last_reason"] == "store"
        assert "Conversion" in evil["last_error"]
        rows = store.cursor().execute("SELECT target, up FROM scrapes ORDER BY target").fetchall()
        assert rows == [("http://evil:1/metrics", False), ("http://good:1/metrics", True)]
    finally:
        store.close()


class BrokenStore(Store):
    """A real store whose disk is full: every write fails as DuckDB's commit does."""

    broken = True

    def append_cycle(self, *args: Any, **kwargs: Any) -> list[int]:
        if self.broken:
            raise duckdb.TransactionException(
                'TransactionContext Error: Failed to commit: Could not write file "x.wal": '
                "No space left on device"
            )
        return super().append_cycle(*args, **kwargs)

    def probe_write(self) -> None:
        if self.broken:
            raise duckdb.IOException("No space left on device")
        super().probe_write()


def test_a_store_that_cannot_write_fails_readiness_then_gives_up(tmp_path: Path) -> None:
    plain = Store.open(tmp_path / "b.duckdb")
    store = BrokenStore(plain._con, plain.path, False, plain.retention)
    now = [0.0]
    seen: list[bool] = []
    metrics = CollectorMetrics()

    def sleep(seconds: float) -> None:  # the retry's waits, on a fake clock
        seen.append(writer.store_ok)
        now[0] += seconds

    writer = IngestWriter(
        store, TargetRegistry(), metrics, IngestLimits(), retry_seconds=30,
        sleep=sleep, monotonic=lambda: now[0],
    )  # fmt: skip
    try:
        with pytest.raises(StoreFailed) as failed:
            writer.write([outcome("http://good:1/metrics", 0.5)])
        assert "refused every write for 30s" in str(failed.value)
        assert "No space left" in str(failed.value)
        assert seen and not any(seen)  # readiness was false during every wait
        assert now[0] == 30  # back-off, bounded by the retry
        assert metrics.store_up._value.get() == 0
        store.broken = False  # space freed before the exit: the next write recovers
        assert writer.write([outcome("http://good:1/metrics", 0.5, T + 1)]) == 1
        assert writer.store_ok and metrics.store_up._value.get() == 1
    finally:
        store.close()

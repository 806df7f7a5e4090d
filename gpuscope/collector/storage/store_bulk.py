"""Many scrape cycles in one transaction: a history written in bulk (the demo's week).

A mixin of :class:`gpuscope.collector.storage.store.Store`. :meth:`BulkMixin.append_cycles`
stores what :meth:`~gpuscope.collector.storage.store_writer.WriterMixin.append_cycle` would
store for each of the cycles in turn (the same samples, series, scrapes, workload
intervals and ``samples_stored``), but each cycle's rows are prepared by the same code
(``_prepare``) and the whole run is written with one statement per table: a transaction
and its statements cost milliseconds each, and a week every 5 minutes is 2,016 cycles.
The workload intervals' opening, touching and closing, statements per cycle on the ingest
path, are followed here in memory (:class:`IntervalLog`) and written as their end state.
tests/unit/test_store_bulk.py stores one history both ways and finds every row equal.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store_sql import (
    INTERVAL_LABELS,
    IntervalKey,
    Q,
    json_records,
    run_with,
)
from gpuscope.collector.storage.store_writer import WriterMixin


@dataclass
class _Interval:
    """One workload interval's state in a run of cycles: its labels (a new one's) or None
    (one open in the database before the run), and what the run set."""

    target: str
    key: IntervalKey
    labels: dict[str, str] | None
    start: datetime | None
    last_seen: datetime | None = None
    end: datetime | None = None


@dataclass
class IntervalLog:
    """The ingest path's interval statements (touch every open interval of a target, close
    those gone, open those come), followed in memory over a run of cycles."""

    #: per target, its open intervals by key (those open before the run included)
    open: dict[str, dict[IntervalKey, _Interval]] = field(default_factory=dict)
    #: every interval the run touched, opened or closed (by identity: a workload that
    #: leaves and comes back in the run has two), in the order first seen
    seen: dict[int, _Interval] = field(default_factory=dict)

    @classmethod
    def starting(cls, was_open: Mapping[str, set[IntervalKey]]) -> IntervalLog:
        log = cls()
        for target, keys in was_open.items():
            log.open[target] = {k: _Interval(target, k, None, None) for k in keys}
        return log

    def touch(self, target: str, ts: datetime) -> None:
        """``touch_intervals_many``: every open interval of ``target`` was seen at ``ts``."""
        for interval in self.open.get(target, {}).values():
            interval.last_seen = ts
            self.seen[id(interval)] = interval

    def change(
        self, target: str, ts: datetime, present: Mapping[IntervalKey, Mapping[str, str]]
    ) -> set[IntervalKey]:
        """``close_intervals`` and ``open_intervals`` of one target at ``ts``."""
        now = self.open.setdefault(target, {})
        for key in now.keys() - present.keys():
            interval = now.pop(key)
            interval.end = ts
            self.seen[id(interval)] = interval
        for key, labels in present.items():
            if key not in now:
                interval = now[key] = _Interval(target, key, dict(labels), ts, ts)
                self.seen[id(interval)] = interval
        return set(now)

    def tables(self) -> tuple[pa.Table, pa.Table]:
        """(the intervals opened in the run, whole; the earlier ones' changes)."""
        ts = pa.timestamp("us")
        opened = [i for i in self.seen.values() if i.labels is not None]
        new = json_records([i.labels for i in opened], ())
        new = new.append_column("target", pa.array([i.target for i in opened], pa.string()))
        for name, values in (
            ("start_ts", [i.start for i in opened]),
            ("last_seen", [i.last_seen for i in opened]),
            ("end_ts", [i.end for i in opened]),
        ):
            new = new.append_column(name, pa.array(values, ts))
        earlier = [i for i in self.seen.values() if i.labels is None]
        cols: dict[str, Any] = {"target": pa.array([i.target for i in earlier], pa.string())}
        for n, label in enumerate(INTERVAL_LABELS):
            cols[label] = pa.array([i.key[n] for i in earlier], pa.string())
        cols["last_seen"] = pa.array([i.last_seen for i in earlier], ts)
        cols["end_ts"] = pa.array([i.end for i in earlier], ts)
        return new, pa.table(cols)


class BulkMixin(WriterMixin):
    """Runs of cycles in one transaction (:meth:`append_cycles`)."""

    def append_cycles(self, cycles: Sequence[Sequence[tuple[Batch, float]]]) -> int:
        """Store ``cycles`` (each as ``append_cycle``'s ``batches``, in time order) in one
        transaction, as ``append_cycle`` of each in turn would; returns the samples stored.

        For a history written at once (the demo's week): nothing reads the store between
        the cycles, and the run is committed whole or not at all (the writer's memory is
        put back as it was when it is not)."""
        with self._writing():
            saved = (
                dict(self._ids), self._next_id, copy.deepcopy(self._last),
                {t: set(k) for t, k in self._open.items()}, dict(self._touched),
                dict(self._resolved), copy.deepcopy(self._wlog), self._stored_total,
            )  # fmt: skip
            try:
                return self._append_run(cycles)
            except BaseException:
                (self._ids, self._next_id, self._last, self._open, self._touched,
                 self._resolved, self._wlog, self._stored_total) = saved  # fmt: skip
                raise

    def _append_run(self, cycles: Sequence[Sequence[tuple[Batch, float]]]) -> int:
        log = IntervalLog.starting(self._open)
        samples: list[pa.Table] = []
        series: list[pa.Table] = []
        scrapes: dict[str, list[Any]] = {}
        stored = 0
        for batches in cycles:
            cyc = self._prepare(batches, (), log=False)
            for target, ts in zip(cyc.touch["target"], cyc.touch["ts"], strict=True):
                log.touch(target, ts)
            still_open = {t: log.change(t, ts, p) for t, ts, p in cyc.interval_work}
            self._settle(cyc, still_open)
            if cyc.new:
                table = self._series_table(cyc.new, cyc.kinds)
                first = pa.array([cyc.first_ts] * len(cyc.new), pa.timestamp("us"))
                series.append(table.append_column("ts", first))
            samples.append(cyc.sample_table)
            for key, values in cyc.scrapes.items():
                scrapes.setdefault(key, []).extend(values)
            stored += sum(cyc.counts)
        new_intervals, earlier = log.tables()
        wlog = self._wlog  # the run's series and samples, and any the log holds: folded
        fold = wlog.fold_table(self._last, None, None)
        with self._transaction() as c:
            if series:
                run_with(c, "new_series", pa.concat_tables(series), Q["insert_series_at"], None)
            if samples:
                rows = pa.concat_tables(samples)
                run_with(c, "batch", rows, Q["append_samples"], None)
            self._fold(c, fold, wlog.samples, wlog.rows > 0)
            if scrapes:
                c.execute(Q["insert_scrapes"], scrapes)
            if earlier.num_rows:
                run_with(c, "earlier", earlier, Q["update_intervals_run"], None)
            if new_intervals.num_rows:
                run_with(c, "opened", new_intervals, Q["insert_intervals_run"], None)
        wlog.folded(None)
        return stored

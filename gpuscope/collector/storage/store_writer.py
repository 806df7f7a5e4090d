"""The store's write path: a scrape cycle's samples, series and intervals in one transaction.

A mixin of :class:`gpuscope.collector.storage.store.Store` (the one writer of a database),
kept apart so each module stays small. Series resolve through an in-memory cache (a steady
page inserts no series and hashes no label set), counter increases are computed in memory
(increases.py), and workload intervals open and close from ``gpuscope_gpu_workload_info``
presence (docs/storage.md, "Ingest").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from typing import Any, cast

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.increases import LastValues, Step
from gpuscope.collector.storage.store_sql import (
    INTERVAL_LABELS,
    INTERVAL_TOUCH_S,
    LABEL_COLUMNS,
    WORKLOAD_INFO,
    IntervalKey,
    Labels,
    Q,
    SeriesKey,
    StoreParts,
    check_time,
    json_records,
    run_with,
    series_kind,
    utc,
)
from gpuscope.collector.storage.writer_log import Pending, WriterLog, recover, scan


@dataclass(frozen=True, eq=False, slots=True)
class _Resolved:
    """A batch's columns with the ids of its series (all known): held, so that the lists'
    identity stands for their content as long as the entry lives."""

    names: list[str]
    labels: list[Labels]
    sids: list[int]
    workload_rows: tuple[int, ...]
    #: The last page's workload intervals present, by which of its info rows were non-zero
    #: (one entry, replaced): a steady page rebuilds no label dict per info row.
    present: dict[tuple[bool, ...], dict[IntervalKey, dict[str, str]]] = field(default_factory=dict)

    @classmethod
    def of(cls, batch: Batch, sids: list[int]) -> _Resolved:
        rows = tuple(i for i, name in enumerate(batch.names) if name == WORKLOAD_INFO)
        return cls(batch.names, batch.labels, sids, rows)

    def present_in(self, values: Sequence[float]) -> dict[IntervalKey, dict[str, str]]:
        """The workload intervals a page of these columns with ``values`` shows."""
        flags = tuple(bool(values[i]) for i in self.workload_rows)
        hit = self.present.get(flags)
        if hit is None:
            rows = compress(self.workload_rows, flags)
            labs = (dict(self.labels[i]) for i in rows)
            hit = {_interval_key(lab): lab for lab in labs if lab}
            self.present.clear()
            self.present[flags] = hit
        return hit


@dataclass(frozen=True, eq=False, slots=True)
class _Cycle:
    """A prepared cycle (:meth:`WriterMixin._prepare`): its rows, as tables and bound lists,
    and what it changes of the writer's memory once committed."""

    batches: list[Batch]
    new: dict[SeriesKey, int]
    kinds: dict[SeriesKey, str]
    step: Step
    counts: list[int]
    sample_table: pa.Table
    samples: bool
    scrapes: dict[str, list[Any]]
    touch: dict[str, list[Any]]
    touched: dict[str, int]
    #: (target, time, the intervals present) of each target whose open set changes
    interval_work: list[tuple[str, datetime, dict[IntervalKey, dict[str, str]]]]
    resolved: list[_Resolved | None]
    first_ts: datetime
    #: each stored row's time (Unix s), in the step's order
    times_s: npt.NDArray[np.int64]
    #: what the cycle logs, or folds (writer_log.py); None in a bulk run
    pending: Pending | None


def _interval_key(labels: Mapping[str, str]) -> IntervalKey:
    return tuple(labels.get(k, "") for k in INTERVAL_LABELS)


class WriterMixin(StoreParts):
    """Appends of scrape cycles to a :class:`~gpuscope.collector.storage.store.Store`."""

    def _load_writer_state(self, con: duckdb.DuckDBPyConnection, read_only: bool) -> None:
        """The writer's memory of the database: every series' id (and its kind and last
        raw value, for the increases) and every open workload interval. None when
        read-only."""
        self._ids: dict[SeriesKey, int] = {}
        self._next_id = 0
        #: each series' kind and last raw value, for the counter increases (increases.py)
        self._last = LastValues()
        self._open: dict[str, set[IntervalKey]] = {}
        #: per target, the minute (INTERVAL_TOUCH_S) its open intervals' last_seen was set in
        self._touched: dict[str, int] = {}
        #: Per target, its last batch's columns once all its series had ids: a steady page
        #: (the parser hands back the same lists) resolves without hashing a label set.
        self._resolved: dict[str, _Resolved] = {}
        #: what is committed and not yet folded into series and meta (writer_log.py)
        self._wlog = WriterLog()
        #: samples committed over the life of the database (the writer's count)
        self._stored_total = 0
        if read_only:
            return
        recover(con)  # a log a killed writer left: folded before anything is read
        self._stored_total = int(con.execute(Q["get_samples_stored"]).fetchall()[0][0])
        last = []
        for sid, counter, raw, metric, *cols, extra in con.execute(Q["load_series"]).fetchall():
            pairs = [(k, v) for k, v in zip(LABEL_COLUMNS, cols, strict=True) if v is not None]
            self._ids[(metric, tuple(sorted(pairs + list(extra.items()))))] = sid
            self._next_id = max(self._next_id, sid + 1)
            last.append((sid, counter, raw))
        self._last.define(last)
        for target, *key in con.execute(Q["load_open_intervals"]).fetchall():
            self._open.setdefault(target, set()).add(tuple(key))

    def _writing(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def append_scrape(
        self, batch: Batch, *, duration_s: float = 0.0, meta: Mapping[str, str] | None = None
    ) -> int:
        """Store one scrape in one transaction; returns the sample rows stored.

        ``batch.labels[i]`` are sorted by name; ``batch.types`` maps a family (a counter's
        name without ``_total``) to its type. Series resolve through the in-memory cache, so
        a steady-state batch inserts no series. A series twice in a batch keeps its last
        (the scrape path has already dropped and counted such duplicates). A NaN or infinite
        counter value is not stored and leaves the counter's last value as it was, so the
        next sample is the increase since the last real value. Raises :class:`BadBatch`,
        before any write, for a sample time outside 1970..2200.
        Thread-safe: batches are resolved and written one at a time. ``meta``: keys of the
        ``meta`` table set in the same transaction (a query source's cursor: the samples
        and the cursor that covers them are committed together, or neither).
        """
        return self.append_cycle([(batch, duration_s)], meta=meta)[0]

    def append_cycle(
        self,
        batches: Sequence[tuple[Batch, float]],
        down: Sequence[tuple[str, float, float, str]] = (),
        *,
        meta: Mapping[str, str] | None = None,
    ) -> list[int]:
        """Store a whole scrape cycle in one transaction; returns rows stored per batch.

        ``batches`` are the targets that answered, each with its scrape duration; ``down``
        the ones that did not, as (target, Unix time, duration, error). A transaction costs
        a few milliseconds whatever its size, so a cycle of a thousand targets in one is
        what keeps a 15 s interval affordable; the cycle is then also the unit of crash
        safety (committed whole, or not at all).
        """
        with self._writing():
            return self._append_many(batches, down, meta or {})

    def _append_many(
        self,
        batches: Sequence[tuple[Batch, float]],
        down: Sequence[tuple[str, float, float, str]],
        meta: Mapping[str, str],
    ) -> list[int]:
        cyc = self._prepare(batches, down)
        pending = cyc.pending
        assert pending is not None
        # tables by replacement scan (writer_log.scan), not registered: a view registered
        # and dropped each cycle cost ~1 ms of CPU
        with self._transaction() as c:
            if cyc.new:
                scan(c, Q["insert_series"], {"ts": cyc.first_ts},
                     new_series=self._series_table(cyc.new, cyc.kinds))  # fmt: skip
            if cyc.samples:
                scan(c, Q["append_samples"], batch=cyc.sample_table)
            if pending.rows is not None:
                scan(c, Q["append_writer_log"], log_rows=pending.rows)
            if pending.fold is not None:
                self._fold(c, pending.fold, pending.meta_add, pending.clear)
            if cyc.scrapes:
                c.execute(Q["insert_scrapes"], cyc.scrapes)
            if cyc.touch["target"]:
                c.execute(Q["touch_intervals_many"], cyc.touch)
            still_open = {
                target: self._update_intervals(
                    c, target, when, present, self._open.get(target, set())
                )
                for target, when, present in cyc.interval_work
            }
            for key, value in meta.items():
                c.execute(Q["set_meta"], [key, value])
        self._settle(cyc, still_open)
        return cyc.counts

    def _prepare(
        self,
        batches: Sequence[tuple[Batch, float]],
        down: Sequence[tuple[str, float, float, str]],
        *,
        log: bool = True,
    ) -> _Cycle:
        """A cycle's rows and the changes it makes, from the writer's memory; nothing is
        written and nothing of the memory changes here but the open intervals of targets
        whose set is unchanged (the same either way)."""
        ids, new, next_id = self._ids, dict[SeriesKey, int](), self._next_id
        all_sids: list[int] = []
        all_secs: list[int] = []
        all_values: list[float] = []
        sizes: list[int] = []
        #: each new series' kind from the types of the page it came in (TYPE per target)
        kinds: dict[SeriesKey, str] = {}
        get = ids.get
        resolved: list[_Resolved | None] = []
        for batch, _ in batches:
            check_time(batch, batch.ts_ms)
            memo = self._resolved.get(batch.target)
            sids: list[int | None] | list[int]
            if memo is not None and memo.names is batch.names and memo.labels is batch.labels:
                sids = memo.sids
            else:
                memo = None
                keys = list(zip(batch.names, batch.labels, strict=True))
                found = [get(k) for k in keys]
                if None in found:  # new series: ids in order of first appearance
                    for i, sid in enumerate(found):
                        if sid is None:
                            found[i] = new.setdefault(keys[i], next_id + len(new))
                            kinds.setdefault(keys[i], series_kind(keys[i][0], batch.types))
                    sids = found
                else:
                    sids = cast(list[int], found)
                    memo = _Resolved.of(batch, sids)
            resolved.append(memo)
            secs = batch.ts_ms // 1000
            times = batch.timestamps_ms
            if times is not None and times.count(None) != len(times):  # a C pass, no generator
                given = [t for t in times if t is not None]
                check_time(batch, min(given), max(given))
                all_secs += [secs if t is None else t // 1000 for t in times]
            else:
                all_secs += [secs] * len(sids)
            all_sids += sids  # type: ignore[arg-type]
            all_values += batch.values
            sizes.append(len(sids))
        owner = np.repeat(np.arange(len(batches)), sizes)
        self._last.define((sid, kinds[key] == "counter", None) for key, sid in new.items())
        step = self._last.step(all_sids, all_values)
        stored_by = np.bincount(owner[step.order][step.stored], minlength=len(batches))
        counts: list[int] = stored_by.tolist()
        raw = pa.array(step.raw, pa.float64(), mask=step.counter & np.isnan(step.raw))
        times_s = np.asarray(all_secs, np.int64)[step.order]
        pending = self._wlog.pending(step, times_s, self._last, sum(counts)) if log else None
        sample_table = pa.table(
            [pa.array(step.sids, pa.uint32()), pa.array(times_s, pa.timestamp("s")),
             pa.array(step.value, pa.float64()), raw, pa.array(step.stored, pa.bool_())],
            names=["series_id", "ts", "value", "raw", "stored"],
        )  # fmt: skip
        scrape_rows: list[tuple[str, datetime, bool, float, int, str | None]] = []
        touch: dict[str, list[Any]] = {"target": [], "ts": []}
        touched: dict[str, int] = {}
        interval_work = []
        for (batch, duration), n, memo in zip(batches, counts, resolved, strict=True):
            ts = utc(batch.ts_ms / 1000)
            scrape_rows.append((batch.target, ts, True, duration, n, None))
            present = (
                {
                    _interval_key(lab): lab
                    for i in range(len(batch))
                    if batch.names[i] == WORKLOAD_INFO
                    and batch.values[i]
                    and (lab := dict(batch.labels[i]))
                }
                if memo is None
                else memo.present_in(batch.values)
            )
            was_open = self._open.get(batch.target, set())
            minute = batch.ts_ms // (INTERVAL_TOUCH_S * 1000)
            if was_open & present.keys() and self._touched.get(batch.target) != minute:
                touch["target"].append(batch.target)
                touch["ts"].append(ts)
                touched[batch.target] = minute
            if present.keys() != was_open:
                interval_work.append((batch.target, ts, present))
            else:
                self._open[batch.target] = set(present)
        scrape_rows += [(t, utc(when), False, d, 0, err) for t, when, d, err in down]
        cols = [list(c) for c in zip(*scrape_rows, strict=True)]
        names = ("target", "ts", "up", "duration_s", "samples", "error")
        scrapes = dict(zip(names, cols, strict=True)) if cols else {}  # bound as lists
        first_ts = utc(batches[0][0].ts_ms / 1000) if batches else utc(0)
        return _Cycle(
            [b for b, _ in batches], new, kinds, step, counts, sample_table, bool(all_sids),
            scrapes, touch, touched, interval_work, resolved, first_ts, times_s, pending,
        )  # fmt: skip

    def _settle(self, cyc: _Cycle, still_open: Mapping[str, set[IntervalKey]]) -> None:
        """The writer's memory after ``cyc`` was committed, with ``still_open`` the open
        intervals of the targets whose set changed."""
        self._ids.update(cyc.new)
        self._next_id += len(cyc.new)
        if cyc.pending is None:  # a bulk run's cycle: folded with the run
            self._wlog.touched(cyc.step, cyc.times_s, sum(cyc.counts))
        else:
            self._wlog.committed(cyc.pending, cyc.step, cyc.times_s)
        self._last.apply(cyc.step)
        self._stored_total += sum(cyc.counts)
        self._touched.update(cyc.touched)
        self._open.update(still_open)
        for batch, memo in zip(cyc.batches, cyc.resolved, strict=True):
            if memo is not None:
                self._resolved[batch.target] = memo

    def _fold(
        self, con: duckdb.DuckDBPyConnection, fold: pa.Table, samples: int, clear: bool
    ) -> None:
        """Write ``fold``'s series rows and ``samples`` to meta, and empty the log."""
        if fold.num_rows:
            scan(con, Q["fold_series"], fold=fold)
        if samples:
            con.execute(Q["add_samples_stored"], {"n": samples})
        if clear:
            con.execute(Q["clear_writer_log"])

    def fold_log(self) -> None:
        """Fold what is logged into series and meta now (the store closing)."""
        wlog = self._wlog
        if not (wlog.samples or wlog.rows or wlog.dirty.any()):
            return
        fold = wlog.fold_table(self._last, None, None)
        with self._transaction() as c:
            self._fold(c, fold, wlog.samples, wlog.rows > 0)
        wlog.folded(None)

    @staticmethod
    def _series_table(new: Mapping[SeriesKey, int], kinds: Mapping[SeriesKey, str]) -> pa.Table:
        cols: dict[str, list[Any]] = {c: [] for c in ("series_id", "metric", "kind")}
        cols.update({c: [] for c in (*LABEL_COLUMNS, "labels")})
        for (metric, labels), sid in new.items():
            rest = dict(labels)
            cols["series_id"].append(sid)
            cols["metric"].append(metric)
            cols["kind"].append(kinds[(metric, labels)])
            for column in LABEL_COLUMNS:
                cols[column].append(rest.pop(column, None))
            cols["labels"].append(list(rest.items()))
        types_ = {"series_id": pa.uint32(), "labels": pa.map_(pa.string(), pa.string())}
        return pa.table({k: pa.array(v, types_.get(k, pa.string())) for k, v in cols.items()})

    @staticmethod
    def _update_intervals(
        con: duckdb.DuckDBPyConnection,
        target: str,
        ts: datetime,
        present: Mapping[IntervalKey, Mapping[str, str]],
        was_open: set[IntervalKey],
    ) -> set[IntervalKey]:
        """Close ``target``'s intervals that left (of ``was_open``, those open before), open
        those that came; returns the open. The still-open intervals' ``last_seen`` is the
        caller's (a cycle touches all its targets in one statement, once a minute)."""
        params = {"ts": ts, "target": target}
        gone = was_open - present.keys()
        if gone:
            rows = [dict(zip(INTERVAL_LABELS, k, strict=True)) for k in gone]
            run_with(con, "gone", json_records(rows, ()), Q["close_intervals"], params)
        opened = [lab for k, lab in present.items() if k not in was_open]
        if opened:
            run_with(con, "opened", json_records(opened, ()), Q["open_intervals"], params)
        return set(present)

    def record_scrape(
        self,
        target: str,
        ts: datetime | float,
        *,
        up: bool,
        duration_s: float = 0.0,
        error: str | None = None,
    ) -> None:
        """Record a scrape that stored no samples (``up=False``, with its error)."""
        with self._transaction() as con:
            con.execute(Q["insert_scrape"], [target, utc(ts), up, duration_s, 0, error])

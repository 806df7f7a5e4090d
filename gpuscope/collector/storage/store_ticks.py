"""A few scrape cycles (ticks) in one transaction: the ingest path's grouped commit.

A mixin of :class:`gpuscope.collector.storage.store.Store`. A transaction and each of its
statements cost about a millisecond of CPU whatever their size (BEGIN, the samples' INSERT,
the writer log's, the scrapes', COMMIT: ~5 ms a tick on 8 agents, issue 39), so the scrape
loop commits a few ticks at a time (gpuscope/collector/scraping/scrape_loop.py) and
:meth:`TicksMixin.append_ticks` writes them with one statement per table. Each tick is
prepared by the same code as :meth:`~gpuscope.collector.storage.store_writer.WriterMixin.
append_cycle` (``_prepare``), in order, so the rows are those the ticks one by one would
store: the same increases, series, scrapes, workload intervals and ``samples_stored``. The
writer log (writer_log.py) takes the run as one cycle: each counter's raw value after the
run, the run's sample count. The run is committed whole or not at all; the writer's memory
is put back as it was when it is not.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.increases import Step
from gpuscope.collector.storage.store_sql import IntervalKey, Q
from gpuscope.collector.storage.store_writer import WriterMixin, _Cycle
from gpuscope.collector.storage.writer_log import scan

#: One tick: the batches of the targets that answered (each with its scrape duration) and
#: the targets that did not, as (target, Unix time, duration, error).
Tick = tuple[Sequence[tuple[Batch, float]], Sequence[tuple[str, float, float, str]]]


class TicksMixin(WriterMixin):
    """Runs of scrape cycles in one transaction (:meth:`append_ticks`)."""

    def append_ticks(self, ticks: Sequence[Tick]) -> list[list[int]]:
        """Store ``ticks`` (in time order: a target's pages in the order scraped) in one
        transaction, as :meth:`append_cycle` of each in turn would; returns the rows stored
        per batch of each tick. Raises :class:`BadBatch` before any write, as
        :meth:`append_cycle` does."""
        if len(ticks) == 1:
            return [self.append_cycle(*ticks[0])]
        with self._writing():
            saved = (
                self._next_id, self._last, {t: set(k) for t, k in self._open.items()},
                dict(self._touched), dict(self._resolved),
            )  # fmt: skip
            self._last = self._last.copy()  # the saved one stays as it was
            added: list[Any] = []
            try:
                return self._append_ticks(ticks, added)
            except BaseException:
                for key in added:
                    self._ids.pop(key, None)
                (self._next_id, self._last, self._open, self._touched, self._resolved) = saved
                raise

    def _append_ticks(self, ticks: Sequence[Tick], added: list[Any]) -> list[list[int]]:
        cycles: list[_Cycle] = []
        #: per tick: the intervals open before it, of each target whose set changes
        changes: list[list[tuple[str, datetime, Any, set[IntervalKey]]]] = []
        before: list[Any] = []  # each tick's series' raw values before it
        for batches, down in ticks:
            cyc = self._prepare(batches, down, log=False)
            before.append(self._last.raw_of(cyc.step.sids).copy())
            # the writer's memory as if the tick were committed, for the next one's
            # increases and intervals (put back by the caller if the run is not)
            added += cyc.new
            self._ids.update(cyc.new)
            self._next_id += len(cyc.new)
            self._last.apply(cyc.step)
            self._touched.update(cyc.touched)
            work = []
            for target, when, present in cyc.interval_work:
                work.append((target, when, present, self._open.get(target, set())))
                self._open[target] = set(present)
            changes.append(work)
            for batch, memo in zip(cyc.batches, cyc.resolved, strict=True):
                if memo is not None:
                    self._resolved[batch.target] = memo
            cycles.append(cyc)
        step, times_s, prev = _merged(cycles, before)
        count = sum(sum(c.counts) for c in cycles)
        first = min((int(c.times_s.min()) for c in cycles if len(c.times_s)), default=None)
        before_run = self._last.with_raw(step.sids, prev)
        pending = self._wlog.pending(step, times_s, before_run, count, first)
        new = [c for c in cycles if c.new]
        scrapes: dict[str, list[Any]] = {}
        for cyc in cycles:
            for key, values in cyc.scrapes.items():
                scrapes.setdefault(key, []).extend(values)
        with self._transaction() as c:
            if new:
                tables = [self._series_table(x.new, x.kinds) for x in new]
                stamps = [pa.array([x.first_ts] * len(x.new), pa.timestamp("us")) for x in new]
                new_series = pa.concat_tables(
                    [t.append_column("ts", s) for t, s in zip(tables, stamps, strict=True)]
                )
                scan(c, Q["insert_series_at"], new_series=new_series)
            if any(cyc.samples for cyc in cycles):
                batch = pa.concat_tables([cyc.sample_table for cyc in cycles if cyc.samples])
                scan(c, Q["append_samples"], batch=batch)
            if pending.rows is not None:
                scan(c, Q["append_writer_log"], log_rows=pending.rows)
            if pending.fold is not None:
                self._fold(c, pending.fold, pending.meta_add, pending.clear)
            if scrapes:
                c.execute(Q["insert_scrapes"], scrapes)
            for cyc, work in zip(cycles, changes, strict=True):  # in order: rare statements
                if cyc.touch["target"]:
                    c.execute(Q["touch_intervals_many"], cyc.touch)
                for target, when, present, was_open in work:
                    self._update_intervals(c, target, when, present, was_open)
        self._wlog.committed(pending, step, times_s)
        self._stored_total += count
        return [cyc.counts for cyc in cycles]


def _merged(cycles: Sequence[_Cycle], before: Sequence[Any]) -> tuple[Step, Any, Any]:
    """The run as the writer log takes one cycle: each series once, with its raw value and
    sample time after the run, and (third) its raw value before the run."""
    sids = np.concatenate([c.step.sids for c in cycles])
    order = np.argsort(sids, kind="stable")
    ids = sids[order]
    last = np.ones(len(ids), np.bool_)  # a series' last row in the run
    first = np.ones(len(ids), np.bool_)  # ... and its first
    last[:-1] = first[1:] = ids[1:] != ids[:-1]
    raw = np.concatenate([c.step.raw for c in cycles])[order]
    counter = np.concatenate([c.step.counter for c in cycles])[order]
    times = np.concatenate([c.times_s for c in cycles])[order]
    prev = np.concatenate(list(before))[order]
    kept = ids[last]
    stored = np.ones(len(kept), np.bool_)
    step = Step(order[last], kept, raw[last], raw[last], stored, counter[last])
    return step, times[last], prev[first]

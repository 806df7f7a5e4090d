"""The store's maintenance: roll-ups, retention, daily compaction, Parquet export.

A mixin of :class:`gpuscope.collector.storage.store.Store` (the one writer of a database), kept
apart so each module stays small; docs/storage.md says what each step does and why.
"""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from gpuscope.collector.storage import schema
from gpuscope.collector.storage.schema import begin, scalar
from gpuscope.collector.storage.store_sql import (
    EPOCH,
    Q,
    StoreParts,
    floor_to,
    utc,
)
from gpuscope.core.errors import UserError

#: ``meta`` key: the end of the last segment of the day being written that is compacted.
SEGMENTS_DONE = "segments_compacted_until"
#: ``meta`` key: the end of the day's prefix last compacted as one run.
PREFIX_DONE = "day_prefix_compacted_until"
#: Every this many segments (six hours by default, where Prometheus merges its 2-hour
#: blocks into 6-hour ones) the day so far is compacted again as one run, when that span
#: divides a day: a series' run of 6, 12 or 18 hours compresses better than 2-hour runs.
PREFIX_SEGMENTS = 3
DAY_S = 86400
DAY_DONE = Q["compact_done"]


def done_until(cur: duckdb.DuckDBPyConnection, key: str) -> datetime:
    """The end of the last span compacted at a level (``meta[key]``; the epoch if none)."""
    return utc(scalar(cur, schema.GET_META, [key]) or EPOCH)


class MaintenanceMixin(StoreParts):
    """Roll-ups, retention, compaction and export of a
    :class:`~gpuscope.collector.storage.store.Store`."""

    def apply_retention(self, now: datetime) -> dict[str, int]:
        """Roll closed 5-minute and hour buckets up, delete what is past retention, then
        compact closed days (:meth:`compact`). Raw samples go only once rolled up; those of
        a series with one sample a 5-minute bucket stand in for its 5-minute roll-up (no
        rows: ``rollup_5m_raw`` records the range) and stay until the 5-minute retention
        (docs/storage.md, "Roll-ups"). Returns row counts by step.
        """
        now, r = utc(now), self.retention
        with self._maintenance:
            with self._transaction() as con:
                lo5 = utc(scalar(con, schema.GET_META, ["rollup_5m_until"]) or EPOCH)
                hi5 = max(lo5, floor_to(now - r.rollup_delay, 300))
                lo1h = utc(scalar(con, schema.GET_META, ["rollup_1h_until"]) or EPOCH)
                hi1h = max(lo1h, floor_to(hi5, 3600))
                window = {"lo": lo5, "hi": hi5}
                con.execute(Q["rollup_5m_coarse"], window)
                done = {
                    "rolled_5m": scalar(con, Q["rollup_5m"], window),
                    "coarse_series": scalar(con, Q["rollup_5m_coarse_count"]),
                }
                con.execute(Q["rollup_5m_extend"], window)
                con.execute(Q["rollup_5m_stand_in"], window)
                con.execute(Q["rollup_5m_done"])
                done["rolled_1h"] = scalar(con, Q["rollup_1h"], {"lo": lo1h, "hi": hi1h})
                con.execute(schema.SET_META, ["rollup_5m_until", hi5.isoformat()])
                con.execute(schema.SET_META, ["rollup_1h_until", hi1h.isoformat()])
                raw_cut = now - timedelta(days=r.raw_days)
                cut_5m = min(now - timedelta(days=r.rollup_5m_days), hi1h)
                done["deleted_samples"] = scalar(
                    con, Q["delete_samples"], {"cut": min(raw_cut, hi5), "cut_5m": cut_5m}
                )
                cuts = {
                    "scrapes": raw_cut,
                    "5m": cut_5m,
                    "1h": now - timedelta(days=r.rollup_1h_days),
                }
                for name, cut in cuts.items():
                    done[f"deleted_{name}"] = scalar(con, Q[f"delete_{name}"], {"cut": cut})
                con.execute(Q["delete_5m_raw"], {"cut": cut_5m})
            done["compacted"] = self.compact(now)
        return done

    def compact(self, now: datetime) -> int:
        """Rewrite each closed UTC day's samples sorted by metric, series and time, once a
        day, then the closed segments of the day being written (:meth:`compact_segments`).

        Scrape order interleaves metrics, which compresses poorly; per-series runs compress
        to about half (docs/storage.md). Runs on its own cursor, one transaction a day (or
        segment), so appends of new samples go on meanwhile. Returns the rows rewritten.
        """
        if self.read_only:
            raise UserError(f"database {self.path} is open read-only")
        before = self._closed(now, 86400)
        rows, cur = 0, self.cursor()
        with self._maintenance:
            try:
                day = scalar(cur, Q["first_uncompacted_day"])
                while day is not None and (lo := datetime(day.year, day.month, day.day)) < before:
                    mark = {"day": day, "now": utc(now)}
                    n = self._rewrite_sorted(cur, lo, lo + timedelta(days=1), DAY_DONE, mark)
                    rows, day = rows + n, day + timedelta(days=1)
            finally:
                cur.close()
            rows += self.compact_segments(now)
        return rows

    def compact_segments(self, now: datetime) -> int:
        """Compact the day not yet compacted whole, sorted as a closed day is, in two
        steps: at each closed multiple of ``PREFIX_SEGMENTS`` segments (six hours by
        default) the day so far is rewritten as one run, once; then each closed segment
        (``retention.compact_segment_s``) after it, once. The file then holds at most about
        one segment in scrape order, and most of the day being written in one run a
        series, which compresses better than runs of a segment (docs/storage.md, "The day
        being written"); the day is still compacted whole once closed. ``meta`` records how
        far each step has gone. Returns the rows rewritten (0 when segments are off).
        """
        seg = self.retention.compact_segment_s
        if not seg:
            return 0
        step = seg * PREFIX_SEGMENTS
        rows, cur = 0, self.cursor()
        with self._maintenance:
            try:
                day = scalar(cur, Q["first_uncompacted_day"])
                if day is None:
                    return 0
                start = datetime(day.year, day.month, day.day)
                if step < DAY_S and DAY_S % step == 0:
                    hi = min(self._closed(now, step), start + timedelta(days=1))
                    if hi > max(start, done_until(cur, PREFIX_DONE)):
                        mark = [PREFIX_DONE, hi.isoformat()]
                        rows += self._rewrite_sorted(cur, start, hi, schema.SET_META, mark)
                lo = max(start, done_until(cur, PREFIX_DONE), done_until(cur, SEGMENTS_DONE))
                lo, hi = floor_to(lo, seg), self._closed(now, seg)  # a segment size changed
                while lo < hi:
                    end = lo + timedelta(seconds=seg)
                    mark = [SEGMENTS_DONE, end.isoformat()]
                    rows += self._rewrite_sorted(cur, lo, end, schema.SET_META, mark)
                    lo = end
            finally:
                cur.close()
        return rows

    def _closed(self, now: datetime, span: int) -> datetime:
        """The end of the last ``span`` (seconds) that may be compacted: closed, late
        batches waited for, and older than the recent samples left in scrape order
        (``retention.compact_recent_s``: time-ordered row groups, which a read of the last
        hour skips to its own minutes; docs/storage.md, "The day being written")."""
        r = self.retention
        return floor_to(utc(now) - r.rollup_delay - timedelta(seconds=r.compact_recent_s), span)

    @staticmethod
    def _rewrite_sorted(
        cur: duckdb.DuckDBPyConnection,
        lo: datetime,
        hi: datetime,
        done_sql: str,
        done_params: dict[str, Any] | list[Any],
    ) -> int:
        """The samples of [lo, hi) appended again sorted (``compact_copy``), the old rows
        deleted and the bookkeeping ``done_sql`` written (named parameters get ``rows``),
        in one transaction: a crash leaves all of it or none. Returns the rows rewritten."""
        span = {"lo": lo, "hi": hi}
        with begin(cur):
            top = scalar(cur, Q["max_rowid"], span)
            n = int(scalar(cur, Q["compact_copy"], span))
            cur.execute(Q["compact_delete"], {**span, "max_rowid": top})
            if isinstance(done_params, dict):
                done_params = done_params | {"rows": n}
            cur.execute(done_sql, done_params)
        return n

    def export_day(self, day: date, out_dir: str | Path, *, now: datetime) -> Path:
        """Write a closed UTC day of raw samples with labels to day=YYYY-MM-DD/samples.parquet.

        The file is written beside its final name and renamed, so no reader sees half of it.
        """
        lo = datetime(day.year, day.month, day.day)
        if lo + timedelta(days=1) > utc(now):
            raise UserError(f"day {day.isoformat()} is not over yet; only closed days export")
        target = Path(out_dir) / f"day={day.isoformat()}" / "samples.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".parquet.partial")
        cur = self.cursor()
        try:
            params = {"lo": lo, "hi": lo + timedelta(days=1)}
            reader = cur.sql(Q["export_day"], params=params).to_arrow_reader(1 << 20)
            assert reader is not None
            with pq.ParquetWriter(partial, reader.schema, compression="zstd") as writer:
                for chunk in reader:
                    writer.write_batch(chunk)
        finally:
            cur.close()
        os.replace(partial, target)
        return target

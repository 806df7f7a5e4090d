"""What the writer has committed but not yet folded into ``series`` and ``meta``.

A cycle used to rewrite, in its own transaction, every series row it touched (``last_seen``,
``last_raw``) and the ``samples_stored`` count: two UPDATEs, ~3.5 ms of the ~12 ms a cycle
of 8 agents spent in the store, whatever its size (DuckDB's UPDATE of one row alone costs
~1 ms of CPU; issue 39). Now a cycle appends instead, to the narrow table ``writer_log``:
one row per counter whose raw value changed (the only values the next increase needs) and
one row with the cycle's sample count (``series_id`` NULL). Once a minute of sample time
(:data:`FOLD_S`, as the workload intervals' ``last_seen``), and when the store closes, a
cycle folds instead: it writes every series touched since the last fold, adds the count to
``meta``, and empties the log, all in the cycle's own transaction.

So a kill at any point loses nothing and repeats nothing: ``series.last_raw`` and the log
together hold every counter's last raw value as committed, and ``meta`` and the log every
sample counted; opening the file read-write folds a log left behind (:data:`RECOVER`), and
a read-only open adds the log's counts to ``meta``'s (``samples_logged``). Between folds
``series.last_seen`` (and a gauge's ``last_raw``) lags the newest sample by up to
:data:`LAST_SEEN_LAG_S` (a cycle that would make it lag more folds), and readers that
prefilter series by ``last_seen`` widen the prefilter by that much (docs/storage.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.collector.storage.increases import LastValues, Step
from gpuscope.collector.storage.schema import begin, scalar
from gpuscope.collector.storage.store_sql import Q

#: A fold at least once a minute of sample time.
FOLD_S = 60
#: ... and at least every this many cycles (sample times that stay in one minute: a
#: backfill, a test's fixed clock).
FOLD_CYCLES = 60
#: How far ``series.last_seen`` may lag a series' newest committed sample: a cycle with a
#: sample more than this after its series' folded ``last_seen`` (a series back after a
#: silence, one first seen since the writer opened) folds, so the bound holds for every
#: series, not only for those scraped each minute. Readers that prefilter series by
#: ``last_seen`` widen the prefilter by it (``last_seen >= start - LAST_SEEN_LAG_S``):
#: a series scraped at least every minute never makes a cycle fold early by it.
LAST_SEEN_LAG_S = 2 * FOLD_S


def seen_bound(t: datetime) -> datetime:
    """The bound on ``series.last_seen`` of the series with a sample at or after ``t``."""
    return t - timedelta(seconds=LAST_SEEN_LAG_S)


Ids = npt.NDArray[np.uint32]
Secs = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Pending:
    """A cycle's part in the log: the rows it appends, or the series rows it writes when
    it folds (``fold`` not None), and its sample count."""

    rows: pa.Table | None
    fold: pa.Table | None
    samples: int
    minute: int
    #: a fold's addition to ``meta``'s samples_stored: this cycle's and the log's
    meta_add: int = 0
    #: a fold empties the log (it holds rows)
    clear: bool = False


@dataclass
class WriterLog:
    """The writer's memory of what is logged and not folded (one per writer store)."""

    #: per series id: the time (Unix s) of its last sample, what ``series.last_seen`` gets
    seen: Secs = field(default_factory=lambda: np.zeros(0, np.int64))
    #: per series id: the time (Unix s) ``series.last_seen`` holds as far as this writer
    #: knows (0: not known, its next sample folds); never above the true value
    folded_seen: Secs = field(default_factory=lambda: np.zeros(0, np.int64))
    #: per series id: touched since the last fold
    dirty: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, np.bool_))
    #: samples committed since the last fold (in the log's count rows)
    samples: int = 0
    #: rows in the log (0: nothing to delete at the next fold)
    rows: int = 0
    #: cycles committed since the last fold
    cycles: int = 0
    #: the minute (Unix s // FOLD_S) of the last fold; None: fold at the next cycle
    minute: int | None = None
    #: the sequence number of the next cycle's rows (their order when recovered)
    seq: int = 0

    def _grow(self, size: int) -> None:
        if size <= len(self.seen):
            return
        new = max(size, 2 * len(self.seen), 1024)
        seen, dirty = np.zeros(new, np.int64), np.zeros(new, np.bool_)
        folded = np.zeros(new, np.int64)
        seen[: len(self.seen)], dirty[: len(self.dirty)] = self.seen, self.dirty
        folded[: len(self.folded_seen)] = self.folded_seen
        self.seen, self.dirty, self.folded_seen = seen, dirty, folded

    def pending(
        self, step: Step, times_s: Secs, last: LastValues, count: int, first_s: int | None = None
    ) -> Pending:
        """The cycle's rows: ``step`` as prepared (not applied to ``last`` yet), its rows'
        times, and its sample count; ``first_s``: the time of its first row when not in
        ``times_s`` (a run of cycles, store_ticks.py). Pure: nothing changes until
        :meth:`committed`."""
        minute = int(times_s.max()) // FOLD_S if len(times_s) else (self.minute or 0)
        self._grow(int(step.sids.max()) + 1 if len(step.sids) else 0)
        behind = bool(np.any(times_s - self.folded_seen[step.sids] > LAST_SEEN_LAG_S))
        if self.minute != minute or self.cycles + 1 >= FOLD_CYCLES or behind:
            fold = self.fold_table(last, step, times_s)
            return Pending(None, fold, count, minute, self.samples + count, self.rows > 0)
        prev = last.raw_of(step.sids)
        same = (step.raw == prev) | (np.isnan(step.raw) & np.isnan(prev))
        changed = step.counter & ~same
        sids = step.sids[changed]
        n = len(sids)
        if not (n or count):  # no sample stored (every target down): nothing to log
            return Pending(None, None, 0, minute)
        rows = pa.table(
            [pa.array(np.full(n + 1, self.seq, np.int64)),
             pa.array(np.append(sids, 0), pa.uint32(), mask=np.append(np.zeros(n, bool), True)),
             pa.array(np.append(step.raw[changed], float(count))),
             pa.array(np.append(np.zeros(n, np.int64), _first(times_s, first_s)),
                      pa.timestamp("s"))],
            names=["seq", "series_id", "value", "ts"],
        )  # fmt: skip
        return Pending(rows, None, count, minute)

    def fold_table(self, last: LastValues, step: Step | None, times_s: Secs | None) -> pa.Table:
        """Every series touched since the last fold (and by ``step``, not yet applied) as
        ``series`` is to hold it: (series_id, ts, raw; NULL where a counter has none)."""
        ids = np.flatnonzero(self.dirty).astype(np.uint32)
        if step is not None:
            ids = np.union1d(ids, step.sids).astype(np.uint32)
        raw = last.raw_of(ids).copy()
        self._grow(int(ids.max()) + 1 if len(ids) else 0)
        seen = self.seen[ids].copy()
        if step is not None and times_s is not None:
            at = np.searchsorted(ids, step.sids)
            raw[at], seen[at] = step.raw, times_s
        counter = last.counter_of(ids)
        return pa.table(
            [pa.array(ids, pa.uint32()), pa.array(seen, pa.timestamp("s")),
             pa.array(raw, pa.float64(), mask=counter & np.isnan(raw))],
            names=["series_id", "ts", "raw"],
        )  # fmt: skip

    def committed(self, pending: Pending, step: Step, times_s: Secs) -> None:
        """The cycle of ``pending`` was committed: remember what it logged or folded."""
        if pending.fold is not None:
            ids = pending.fold.column("series_id").to_numpy().astype(np.int64)
            ts = pending.fold.column("ts").cast(pa.int64()).to_numpy()
            self._grow(int(ids.max()) + 1 if len(ids) else 0)
            self.folded_seen[ids] = ts  # what fold_series writes
            self.folded(pending.minute)
            return
        self._grow(int(step.sids.max()) + 1 if len(step.sids) else 0)
        self.seen[step.sids] = times_s
        self.dirty[step.sids] = True
        self.samples += pending.samples
        self.rows += pending.rows.num_rows if pending.rows is not None else 0
        self.cycles += 1
        self.seq += 1

    def touched(self, step: Step, times_s: Secs, count: int) -> None:
        """A cycle of a bulk run (folded with the run): its series and samples are pending."""
        self._grow(int(step.sids.max()) + 1 if len(step.sids) else 0)
        self.seen[step.sids] = times_s
        self.dirty[step.sids] = True
        self.samples += count

    def folded(self, minute: int | None) -> None:
        """A fold was committed: nothing is pending any more."""
        self.dirty[:] = False
        self.samples = self.rows = self.cycles = 0
        self.minute = minute
        self.seq += 1


def _first(times_s: Secs, first_s: int | None) -> int:
    """A cycle's count row's time: its first row's (what recovery reads samples from)."""
    if first_s is not None:
        return first_s
    return int(times_s.min()) if len(times_s) else 0


def scan(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: Any = None,
    *,
    batch: pa.Table | None = None,
    new_series: pa.Table | None = None,
    log_rows: pa.Table | None = None,
    fold: pa.Table | None = None,
) -> None:
    """Run ``sql``, which reads the Arrow tables passed by their names here, through
    DuckDB's replacement scan of the calling frame (this one): no view is created and
    dropped, which costs ~0.5 ms of CPU a table (``register``/``unregister``)."""
    con.execute(sql, params)


def recover(con: duckdb.DuckDBPyConnection) -> None:
    """Fold a log that a writer left unfolded (it was killed) into series and meta, in one
    transaction, before the writer reads them (a read-write open)."""
    if not scalar(con, Q["writer_log_rows"]):
        return
    with begin(con):
        con.execute(Q["recover_log_raw"])
        con.execute(Q["recover_log_seen"])
        con.execute(Q["add_samples_stored"], {"n": scalar(con, Q["samples_logged"])})
        con.execute(Q["clear_writer_log"])

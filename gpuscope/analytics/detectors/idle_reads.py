"""How far back an incremental idle fold reads: each key's read bound.

The fold learns each key's sample spacing from the key's previous eight gaps, so it reads
raw samples from before its range (``LOOKBACK``, 45 minutes). Read whole, that look-back
was most of a run's cost on a collector up for an hour: two folds a run, each ~50 minutes
of every busy series, to use nine samples of each (issue 39).

What a fold can need of a key's samples before its range is the key's last nine sample
times (eight gaps) or, where it has fewer in the look-back, all of them. The fold returns
per key the earliest of its last nine sample times at its end (``lookback_from``, kept in
``gpu_activity_state`` since schema v9), and the next fold reads each key's samples from
there on, and the look-back's whole for a key without one.

Only a key that can have samples in the fold's range needs them at all: one without keeps
its learned spacing and ``lookback_from`` from the prior (the spacing persisted since
schema v10). Which keys can is told by ``series.last_seen``, which lags a series' newest
sample by at most ``LAST_SEEN_LAG_S`` (collector/storage/writer_log.py). The earliest
bound of those keys is a constant of the query (``$read_from``), so DuckDB skips the row
groups before it. Before v10 the constant was the earliest bound of every key sampled
within the look-back, so one key that stopped half an hour ago (a workload that ended)
made every fold read half an hour of every busy series. A key that can have new samples
and that the prior does not hold (its earlier samples never folded) needs the whole
look-back, and so does a recent key whose spacing the prior lacks (a state saved before
v10). The answer is the same as reading the whole look-back, row for row:
tests/integration/test_idle_read_bound.py holds the two equal over random histories.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from gpuscope.collector.storage.writer_log import seen_bound


def fresh_keys(busy: pa.Table, lo: datetime) -> set[str]:
    """The keys of ``busy`` (the run's busy series with their ``last_seen``) that can have
    samples after ``lo``: a series' ``last_seen`` lags its newest sample by at most
    ``LAST_SEEN_LAG_S``, so one whose ``last_seen`` is before that much before ``lo`` has
    none after it."""
    recent = pc.greater_equal(
        busy.column("last_seen"), pa.scalar(seen_bound(lo), pa.timestamp("us"))
    )
    return set(busy.filter(recent).column("key").to_pylist())


def fold_bound(
    state: pa.Table, lo: datetime, fresh: Iterable[str], lookback: timedelta
) -> datetime | None:
    """The earliest sample time a fold after ``lo`` with ``state`` as its prior must read
    (None: the whole look-back): the earliest ``lookback_from`` of the keys in ``fresh``
    (:func:`fresh_keys`) and of the keys sampled within ``lookback`` of ``lo`` whose
    ``spacing`` the state lacks; ``lo`` where there are none."""
    wanted = set(fresh)
    needed: list[datetime] = []
    rows = zip(
        state.column("uuid").to_pylist(),
        state.column("last_sample_ts").to_pylist(),
        state.column("lookback_from").to_pylist(),
        state.column("spacing").to_pylist(),
        strict=True,
    )
    for key, last, bound, spacing in rows:
        recent_unlearned = spacing is None and last is not None and last > lo - lookback
        if key in wanted or recent_unlearned:
            if bound is None:
                return None
            needed.append(bound)
        wanted.discard(key)
    if wanted:  # a key that can have samples and was never folded
        return None
    return min(needed, default=lo)


def read_from(bound: datetime | None, lo: datetime, lookback: timedelta) -> datetime:
    """The earliest sample time a fold of ($lo, ...] reads."""
    start = lo - lookback
    return start if bound is None else max(start, bound)

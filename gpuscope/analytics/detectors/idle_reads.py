"""How far back an incremental idle fold reads: each key's read bound.

The fold learns each key's sample spacing from the key's previous eight gaps, so it reads
raw samples from before its range (``LOOKBACK``, 45 minutes). Read whole, that look-back
was most of a run's cost on a collector up for an hour: two folds a run, each ~50 minutes
of every busy series, to use nine samples of each (issue 39).

What a fold can need of a key's samples before its range is the key's last nine sample
times (eight gaps) or, where it has fewer in the look-back, all of them. The fold returns
per key the earliest of its last nine sample times at its end (``lookback_from``, kept in
``gpu_activity_state`` since schema v9), and the next fold reads each key's samples from
there on, and the look-back's whole for a key without one. The earliest bound of the keys
sampled within the look-back is also a constant of the query (``$read_from``), so DuckDB
skips the row groups before it; a busy key the state does not hold yet (its earlier
samples never folded) needs the whole look-back, and the constant is then its start. The
answer is the same as reading the whole look-back, row for row:
tests/integration/test_idle_read_bound.py holds the two equal over random histories.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]


def next_bound(state: pa.Table, at: datetime, lookback: timedelta) -> datetime | None:
    """The read bound a fold after ``at`` may use with ``state`` as its prior: the earliest
    ``lookback_from`` of the keys sampled within ``lookback`` of ``at``; None (read the
    look-back whole) when one of them has none."""
    recent = state.filter(pc.greater(state.column("last_sample_ts"), pa.scalar(at - lookback)))
    column = recent.column("lookback_from")
    if recent.num_rows == 0 or column.null_count:
        return None
    earliest = pc.min(column).as_py()
    return earliest if isinstance(earliest, datetime) else None


def saved_bound(
    prior: pa.Table, lo: datetime, busy_keys: Iterable[str], lookback: timedelta
) -> datetime | None:
    """The earliest sample time a fold after ``lo`` with ``prior`` (the saved state) must
    read: :func:`next_bound` of it, unless one of ``busy_keys`` (the run's busy keys) is
    missing from ``prior`` (then None: the look-back's start)."""
    bound = next_bound(prior, lo, lookback)
    if bound is None:
        return None
    held = set(prior.column("uuid").to_pylist())
    return None if any(key not in held for key in busy_keys) else bound


def read_from(bound: datetime | None, lo: datetime, lookback: timedelta) -> datetime:
    """The earliest sample time a fold of ($lo, ...] reads."""
    start = lo - lookback
    return start if bound is None else max(start, bound)

"""How far back an incremental idle fold reads: its read bound.

The fold learns each key's sample spacing from the key's previous eight gaps, so it reads
raw samples from before its range (``LOOKBACK``, 45 minutes). Read whole, that look-back
was most of a run's cost on a collector up for an hour: two folds a run, each ~50 minutes
of every GPU's busy series, to use nine samples of each (issue 39: the idle detector took
~210 ms of CPU a run at 8 agents after an hour, ~120 ms at five minutes).

What a fold can need of the samples before its range is, per key, the last nine sample
times (eight gaps) or, where the key has fewer in the look-back, all of them. The fold
returns, per key, the earliest of its last nine sample times at its end
(``lookback_from``); the next fold reads from the earliest of those over the keys whose
last sample is still inside the look-back (a key silent for longer has nothing there to
read), never from before the look-back itself. The answer is the same as reading the
whole look-back, row for row: tests/integration/test_idle_read_bound.py holds the two
equal over random histories. Read whole again (no bound) where that argument does not
hold: no state saved with a bound, or a busy key the state does not hold yet (its earlier
samples were never folded).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

#: The meta key of the saved state's read bound (ISO time; empty: read the look-back whole).
BOUND_KEY = "idle_state_read_from"
#: The watermark and the read bound in one statement (a statement is ~1.5 ms of CPU).
SET_METAS = "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?), (?, ?)"


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
    cur: duckdb.DuckDBPyConnection,
    prior: pa.Table,
    saved: str | None,
    unfolded_sql: str,
    params: dict[str, Any],
) -> datetime | None:
    """The read bound saved with the state (``saved``, its meta value), unless a busy key
    is missing from ``prior`` (then None: the look-back is read whole)."""
    if not saved:
        return None
    cur.register("prior", prior)
    try:
        rows = cur.execute(unfolded_sql, {"at": params["at"], "memory": params["memory"]})
        missing = rows.fetchall()[0][0]
    finally:
        cur.unregister("prior")
    return None if missing else datetime.fromisoformat(saved)


def read_from(bound: datetime | None, lo: datetime, lookback: timedelta) -> datetime:
    """The earliest sample time a fold of ($lo, ...] reads."""
    start = lo - lookback
    return start if bound is None else max(start, bound)

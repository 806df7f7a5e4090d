"""How far the store's 5-minute roll-ups are complete: readers take buckets before it from
``samples_5m`` and raw samples from it on (docs/storage.md, "Roll-ups")."""

from __future__ import annotations

from datetime import datetime

import duckdb

from gpuscope.collector.storage.schema import GET_META
from gpuscope.collector.storage.store import utc

#: The frontier of a store whose roll-ups have never run: every sample is raw.
NEVER = datetime(1970, 1, 1)


def rollup_5m_frontier(con: duckdb.DuckDBPyConnection) -> datetime:
    """``meta.rollup_5m_until`` as a naive UTC time (:data:`NEVER` when unset); fetched
    whole, so the cursor can be reused at once."""
    rows = con.execute(GET_META, ["rollup_5m_until"]).fetchall()
    return utc(rows[0][0]) if rows else NEVER

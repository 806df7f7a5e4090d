"""``gpuscope collector --check``: ask the configured query API once, print what it says.

Before a collector is started in fleet or pull mode, an operator wants to know that the
URL, tenant and token work, how far behind now the engine's newest agent data is, and what
one question costs; and, for a database already written, where each mode's window stands.
Nothing is written: the database is opened read-only, if at all.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gpuscope.collector.querying.query_client import QueryClient
from gpuscope.collector.querying.query_ingest import CURSOR_KEY, make_client
from gpuscope.collector.storage.schema import GET_META
from gpuscope.core.collector_settings import CollectorSettings
from gpuscope.core.errors import SourceError, UserError
from gpuscope.core.timefmt import rfc3339

#: The newest agent sample the engine holds, and how many agents it knows.
NEWEST = "max(timestamp(gpuscope_agent_info))"
AGENTS = "count(count by (node) (gpuscope_agent_info))"


def _scalar(client: QueryClient, query: str, now: float) -> float | None:
    data = client.query("/api/v1/query", {"query": query, "time": f"{now:.3f}"})
    result = data.get("result")
    if not isinstance(result, list) or not result:
        return None
    return float(result[0]["value"][1])


def _saved_window(db: Path) -> Any:
    if not db.exists():
        return None
    import duckdb

    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return None  # held by a running collector: its /api/v1/status says
    try:
        rows = con.execute(GET_META, [CURSOR_KEY]).fetchall()
    except duckdb.Error:
        return None
    finally:
        con.close()
    return json.loads(str(rows[0][0])) if rows else None


def check_query_source(cs: CollectorSettings, *, now: float | None = None) -> dict[str, Any]:
    """One probe of ``cs.prometheus_url``; raises :class:`UserError` (one line) when the
    engine cannot be asked."""
    now = time.time() if now is None else now
    client = make_client(cs.prometheus_url, cs.query)
    try:
        newest = _scalar(client, NEWEST, now)
        agents = _scalar(client, AGENTS, now)
    except SourceError as exc:
        raise UserError(f"collector --check: {exc}") from None
    finally:
        client.close()
    stats = client.take_stats()
    return {
        "url": client.shown_url,
        "mode": cs.query.mode,
        "tenant": cs.query.tenant or None,
        "agents": None if agents is None else int(agents),
        "newest_sample": None if newest is None else rfc3339(newest),
        "lag_seconds": None if newest is None else round(max(0.0, now - newest), 3),
        "latency_offset_seconds": cs.query.latency_offset_seconds,
        "query_seconds": round(stats.seconds, 3),
        "bytes": stats.bytes,
        "saved_window": _saved_window(Path(cs.db)),
    }

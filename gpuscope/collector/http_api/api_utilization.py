"""How ``GET /api/v1/utilization`` reads the store: which named SQL answers a view, and what
its ``note`` says (docs/api.md). Under fleet summaries by=cluster and node read the nodes'
summaries (:mod:`gpuscope.collector.http_api.api_node_summaries`), the workload levels
count each workload's GPUs, by=gpu leaves summaries out (:mod:`.api_queries`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import duckdb

from gpuscope.collector.http_api import api_node_summaries as NS
from gpuscope.collector.http_api import api_queries as Q


def naive(ts: datetime) -> datetime:
    """``ts`` as the store's naive UTC (the views' bound parameters)."""
    return ts.astimezone(UTC).replace(tzinfo=None)


def frontier(cur: duckdb.DuckDBPyConnection, resolution: str) -> datetime:
    """How far ``resolution``'s roll-up is complete (naive UTC; the epoch when never)."""
    got = cur.execute(Q.FRONTIER, {"key": Q.FRONTIER_KEYS[resolution]}).fetchall()
    ts = datetime.fromisoformat(got[0][0]) if got else datetime(1970, 1, 1)
    return naive(ts.replace(tzinfo=ts.tzinfo or UTC))


def _has(cur: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> bool:
    row = cur.execute(sql, params).fetchone()
    return bool(row and row[0])


def read(
    cur: duckdb.DuckDBPyConnection, by: str, resolution: str, params: dict[str, Any]
) -> tuple[list[tuple[Any, ...]], int, str]:
    """The view's rows (key, points as JSON), its keys' count and its note. ``params``:
    start, end, step, node, namespace, project, limit, offset, and ``frontier`` where the
    resolution is a roll-up's."""
    count_params = {k: params[k] for k in ("start", "node", "namespace", "project")}
    # node summaries know nodes, not namespaces: a namespace or project filter leaves them out
    if by in NS.KEYS and params["namespace"] is None and params["project"] is None:
        node_params = {k: params[k] for k in ("start", "node")}
        if _has(cur, NS.HAS_NODE_SUMMARIES, node_params):
            sql = NS.UTILIZATION[(by, resolution)]
            bound = {k: v for k, v in params.items() if k not in ("namespace", "project")}
            rows = cur.execute(sql, {**bound, "frontier_5m": frontier(cur, "5m")}).fetchall()
            total = cur.execute(NS.UTILIZATION_KEYS[by], node_params).fetchone()
            return rows, total[0] if total else 0, NS.NOTE
    summaries = _has(cur, Q.HAS_SUMMARIES[by], count_params)
    by_gpus = Q.UTILIZATION_BY_GPUS.get((by, resolution)) if summaries else None
    rows = cur.execute(by_gpus or Q.UTILIZATION[(by, resolution)], params).fetchall()
    total = cur.execute(Q.UTILIZATION_KEYS[by], count_params).fetchone()
    note = Q.SUMMARIES_NOTE[by in Q.GPU_LEVELS] if summaries else ""
    return rows, total[0] if total else 0, note

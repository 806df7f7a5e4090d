"""Fragmentation over a week: the FGD and node-fragmentation analysis at regular instants.

Fragmentation is a property of an allocation state, not of a time series, so the week is
sampled: at every ``step`` from the week's start, the inventory history gives the nodes
and pods valid then, the agents' workload intervals which GPU indices the pods held, and
:func:`analytics.fragmentation.analyze_fragmentation` measures the state exactly as the
scheduled detector does. An instant without any node in the inventory is left out.
"""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import datetime, timedelta
from typing import Any

import duckdb
import polars as pl

from analytics.allocation import state_from_records
from analytics.fragmentation import analyze_fragmentation
from analytics.report_sql import Q, run
from analytics.report_week import Week
from collector.inventory_records import NodeInfo, PodInfo
from gpuscope.records import WorkloadKind
from gpuscope.settings import AnalyticsSettings

#: Columns of the fragmentation table, in order.
COLUMNS: dict[str, type[pl.DataType]] = {
    "at": pl.Datetime,
    "total_gpus": pl.Int64,
    "free_gpus": pl.Float64,
    "whole_free_gpus": pl.Int64,
    "fgd_fragmented_gpus": pl.Float64,
    "fgd_fragmentation_ratio": pl.Float64,
    "stranded_gpu_capacity": pl.Float64,
    "largest_placeable_job_gpus": pl.Int64,
    "pending_tasks": pl.Int64,
}
_NODE_FIELDS = frozenset(f.name for f in fields(NodeInfo))
_POD_FIELDS = frozenset(f.name for f in fields(PodInfo))


def _node(text: str) -> NodeInfo:
    data = json.loads(text)
    return NodeInfo(**{k: v for k, v in data.items() if k in _NODE_FIELDS})


def _pod(text: str) -> PodInfo:
    data: dict[str, Any] = {"uid": "", "start_time": None, "phase": "Running", "node": None}
    data |= {k: v for k, v in json.loads(text).items() if k in _POD_FIELDS}
    kind = data.get("kind", WorkloadKind.UNKNOWN.value)
    known = kind in WorkloadKind._value2member_map_
    data["kind"] = WorkloadKind(kind) if known else WorkloadKind.UNKNOWN
    return PodInfo(**data)


def fragmentation_at(
    con: duckdb.DuckDBPyConnection, at: datetime, settings: AnalyticsSettings
) -> dict[str, Any] | None:
    """The fragmentation summary of the inventory state at ``at`` (None: no nodes then)."""
    nodes = [_node(r[0]) for r in run(con, Q["nodes_at"], at=at).fetchall()]
    if not nodes:
        return None
    pods = [_pod(r[0]) for r in run(con, Q["pods_at"], at=at).fetchall()]
    indices = {k: sorted(g) for k, g in run(con, Q["gpu_indices_at"], at=at).fetchall()}
    state = state_from_records(nodes, pods, indices)
    summary = analyze_fragmentation(state, at=at, settings=settings).summary
    return {"at": at} | {k: summary[k] for k in COLUMNS if k != "at"}


def fragmentation_over(
    con: duckdb.DuckDBPyConnection, week: Week, settings: AnalyticsSettings, step: timedelta
) -> pl.DataFrame:
    """One row per instant ``week.start + k * step`` inside the week that has nodes."""
    rows = []
    at = week.start
    while at < week.end:
        row = fragmentation_at(con, at, settings)
        if row is not None:
            rows.append(row)
        at += step
    return pl.DataFrame(rows, schema=COLUMNS, orient="row")

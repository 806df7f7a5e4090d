"""The cluster's inventory at an instant: the node and pod records valid then, the GPU
indices the agents reported for the pods, and the fragmentation analysis of that state.

The inventory history (``inventory_nodes``, ``inventory_pods``: versions with ``valid_from``
and ``valid_to``) and the workload intervals give the state the scheduled detector would have
seen at any instant, so an analysis of the past never presents today's allocation as then.
The detectors' runner, the quota analysis and the weekly report read it here; it sits below
all three (it imports no detector and nothing of the report). Queries: sql/inventory.sql.
"""

from __future__ import annotations

import functools
import json
from dataclasses import fields
from datetime import datetime
from typing import Any

import duckdb

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.named_sql import load_queries, run
from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.analytics.placement.fragmentation import analyze_fragmentation
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.records import WorkloadKind
from gpuscope.core.settings import AnalyticsSettings

#: Named queries from gpuscope/analytics/sql/inventory.sql.
Q = load_queries("inventory.sql")


_NODE_FIELDS = frozenset(f.name for f in fields(NodeInfo))


_POD_FIELDS = frozenset(f.name for f in fields(PodInfo))


@functools.lru_cache(maxsize=4096)  # records are frozen; a version recurs in many states
def node_record(text: str) -> NodeInfo:
    data = json.loads(text)
    return NodeInfo(**{k: v for k, v in data.items() if k in _NODE_FIELDS})


@functools.lru_cache(maxsize=65_536)
def pod_record(text: str) -> PodInfo:
    data: dict[str, Any] = {"uid": "", "start_time": None, "phase": "Running", "node": None}
    data |= {k: v for k, v in json.loads(text).items() if k in _POD_FIELDS}
    kind = data.get("kind", WorkloadKind.UNKNOWN.value)
    known = kind in WorkloadKind._value2member_map_
    data["kind"] = WorkloadKind(kind) if known else WorkloadKind.UNKNOWN
    return PodInfo(**data)


def analysis_at(
    con: duckdb.DuckDBPyConnection, at: datetime, settings: AnalyticsSettings
) -> Analysis | None:
    """The fragmentation analysis of the inventory state valid at ``at`` (None: no nodes
    then). What the scheduled detector and ``gpuscope analyze`` report for that time."""
    nodes = [node_record(r[0]) for r in run(con, Q["nodes_at"], at=at).fetchall()]
    if not nodes:
        return None
    pods = [pod_record(r[0]) for r in run(con, Q["pods_at"], at=at).fetchall()]
    indices = {k: sorted(g) for k, g in run(con, Q["gpu_indices_at"], at=at).fetchall()}
    state = state_from_records(nodes, pods, indices)
    return analyze_fragmentation(state, at=at, settings=settings)


def inventory_at(
    con: duckdb.DuckDBPyConnection, at: datetime
) -> tuple[list[NodeInfo], list[PodInfo], dict[str, list[int]]]:
    """The node and pod records valid at ``at`` and the GPU indices the agents reported
    then (what the scheduled detector saw at that instant)."""
    nodes = [node_record(r[0]) for r in run(con, Q["nodes_at"], at=at).fetchall()]
    pods = [pod_record(r[0]) for r in run(con, Q["pods_at"], at=at).fetchall()] if nodes else []
    indices = {k: sorted(g) for k, g in run(con, Q["gpu_indices_at"], at=at).fetchall()}
    return nodes, pods, indices

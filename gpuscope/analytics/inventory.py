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
    return InventoryReads().analysis(con, at, settings)


class InventoryReads:
    """The inventory at an instant and its fragmentation analysis, each read once for the
    readers of one run: the scheduled run's fragmentation, quota (a waiting job's
    placement) and topology detectors all read the state at the run's instant, which was
    three reads of the same rows and two analyses of it (~25 ms of CPU a run on 8 nodes,
    issue 39). One per run: what it read is never read again."""

    def __init__(self) -> None:
        self._records: dict[
            datetime, tuple[list[NodeInfo], list[PodInfo], dict[str, list[int]]]
        ] = {}
        self._analyses: dict[datetime, tuple[AnalyticsSettings, Analysis | None]] = {}

    def records(
        self, con: duckdb.DuckDBPyConnection, at: datetime
    ) -> tuple[list[NodeInfo], list[PodInfo], dict[str, list[int]]]:
        """:func:`inventory_at`, read once per ``at``."""
        if at not in self._records:
            self._records[at] = inventory_at(con, at)
        return self._records[at]

    def analysis(
        self, con: duckdb.DuckDBPyConnection, at: datetime, settings: AnalyticsSettings
    ) -> Analysis | None:
        """:func:`analysis_at`, made once per ``at`` (and the same settings)."""
        made = self._analyses.get(at)
        if made is None or made[0] is not settings:
            nodes, pods, indices = self.records(con, at)
            found = None
            if nodes:
                state = state_from_records(nodes, pods, indices)
                found = analyze_fragmentation(state, at=at, settings=settings)
            made = self._analyses[at] = (settings, found)
        return made[1]


def inventory_at(
    con: duckdb.DuckDBPyConnection, at: datetime
) -> tuple[list[NodeInfo], list[PodInfo], dict[str, list[int]]]:
    """The node and pod records valid at ``at`` and the GPU indices the agents reported
    then (what the scheduled detector saw at that instant)."""
    nodes = [node_record(r[0]) for r in run(con, Q["nodes_at"], at=at).fetchall()]
    pods = [pod_record(r[0]) for r in run(con, Q["pods_at"], at=at).fetchall()] if nodes else []
    indices = {k: sorted(g) for k, g in run(con, Q["gpu_indices_at"], at=at).fetchall()}
    return nodes, pods, indices

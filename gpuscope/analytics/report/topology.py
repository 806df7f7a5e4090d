"""Topology over a week: slots per level and the worst-fragmented domains.

As fragmentation (:mod:`gpuscope.analytics.report.fragmentation`), topology is a property
of an allocation state, which changes only when the inventory does: the week is evaluated
at its start and at every inventory change inside it, each state weighted by how long it
lasted. Each state goes through the same
:func:`gpuscope.analytics.domains.topology.analyze_topology` the scheduled detector runs (levels
from the inventory's node labels), without plans.

Two tables:

- ``topology_slots``: per state and level, how many jobs of 16 and 64 GPUs fit at once
  inside one domain (``slots_16``, ``slots_64``), with the level's free and
  topology-fragmented GPUs: "64-GPU slots over the week";
- ``topology_domains``: per domain, the GPU-hours its free GPUs spent where the domain could
  not hold one multi-node job of ``pod_gpus``-GPU pods (two of them: the smallest
  multi-node job), its time-weighted mean free GPUs, and the hours it had no such slot; the
  ``top_n`` worst (most stranded GPU-hours) are kept: the worst-fragmented racks.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import duckdb
import polars as pl

from gpuscope.analytics.domains.topology import analyze_topology
from gpuscope.analytics.domains.topology_groups import pod_groups
from gpuscope.analytics.domains.topology_levels import topology_of
from gpuscope.analytics.inventory import inventory_at
from gpuscope.analytics.placement.allocation import ClusterState, state_from_records
from gpuscope.analytics.report.week import Week
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.settings import AnalyticsSettings

if TYPE_CHECKING:
    from gpuscope.analytics.report.states import WeekState

SLOT_SIZES = (16, 64)
SLOTS_COLUMNS: dict[str, type[pl.DataType]] = {
    "at": pl.Datetime,
    "hours": pl.Float64,
    "level": pl.Utf8,
    "free_gpus": pl.Int64,
    "fragmented_gpus": pl.Float64,
    **{f"slots_{s}": pl.Int64 for s in SLOT_SIZES},
}
DOMAIN_COLUMNS: dict[str, type[pl.DataType]] = {
    "level": pl.Utf8,
    "domain": pl.Utf8,
    "stranded_gpu_hours": pl.Float64,
    "mean_free_gpus": pl.Float64,
    "hours_without_multi_node_slot": pl.Float64,
}


def topology_at(
    con: duckdb.DuckDBPyConnection, at: datetime, settings: AnalyticsSettings
) -> dict[str, Any] | None:
    """The topology summary of the inventory state at ``at`` (None: no nodes then)."""
    nodes, pods, indices = inventory_at(con, at)
    if not nodes:
        return None
    return _summary(nodes, pods, state_from_records(nodes, pods, indices), at, settings)


def _summary(
    nodes: list[NodeInfo],
    pods: list[PodInfo],
    state: ClusterState,
    at: datetime,
    settings: AnalyticsSettings,
) -> dict[str, Any]:
    groups = pod_groups(pods)
    asked = sorted({lv for g in groups for lv in (g.required_level, g.preferred_level) if lv})
    topo = topology_of(nodes, None, settings.topology_labels, asked)
    return analyze_topology(state, topo, groups, at=at).summary


def topology_over(
    con: duckdb.DuckDBPyConnection,
    week: Week,
    settings: AnalyticsSettings,
    top_n: int,
    states: Iterable[WeekState] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The two tables of the module docstring. ``states``: the week's states already read
    (:func:`~gpuscope.analytics.report.states.week_states`, shared with the fragmentation
    section); else they are read here."""
    if states is None:
        from gpuscope.analytics.report.states import week_states  # it builds on this module

        states = week_states(con, week)
    slot_rows: list[dict[str, Any]] = []
    domains: dict[tuple[str, str], list[float]] = {}  # stranded GPU-h, free GPU-h, hours
    total_hours = 0.0
    for st in states:
        at, hours = st.at, st.hours
        summary = _summary(st.nodes, st.pods, st.state, at, settings)
        total_hours += hours
        pod_gpus = str(summary["pod_gpus"])
        for level, data in summary["levels"].items():
            row: dict[str, Any] = {
                "at": at,
                "hours": hours,
                "level": level,
                "free_gpus": data["free_gpus"],
                "fragmented_gpus": data["fragmented_gpus"],
            }
            for s in SLOT_SIZES:
                row[f"slots_{s}"] = data["slots"].get(str(s), 0)
            slot_rows.append(row)
            for name, d in data["domains"].items():
                acc = domains.setdefault((level, name), [0.0, 0.0, 0.0])
                blocked = d["largest_job_pods"].get(pod_gpus, 0) < 2
                acc[0] += d["free_gpus"] * hours if blocked else 0.0
                acc[1] += d["free_gpus"] * hours
                acc[2] += hours if blocked else 0.0
    worst = sorted(domains.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top_n]
    domain_rows = [
        {
            "level": level,
            "domain": name,
            "stranded_gpu_hours": round(acc[0], 6),
            "mean_free_gpus": round(acc[1] / total_hours, 6) if total_hours else None,
            "hours_without_multi_node_slot": round(acc[2], 6),
        }
        for (level, name), acc in worst
        if acc[0] > 0
    ]
    return (
        pl.DataFrame(slot_rows, schema=SLOTS_COLUMNS, orient="row"),
        pl.DataFrame(domain_rows, schema=DOMAIN_COLUMNS, orient="row"),
    )

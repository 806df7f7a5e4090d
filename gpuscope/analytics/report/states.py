"""The week's allocation states, read once for the report's sections that need them.

Fragmentation (:mod:`gpuscope.analytics.report.fragmentation`) and topology
(:mod:`gpuscope.analytics.report.topology`) are both properties of an allocation state,
evaluated at the week's start and at every inventory change inside it. Each state is the
inventory valid at that instant (read once for all of them:
:mod:`gpuscope.analytics.report.inventory_sweep`) turned into a
:class:`~gpuscope.analytics.placement.allocation.ClusterState`; a steady-state week has hundreds of
them, and reading and building each twice, once per section, was most of both sections'
time. :func:`week_states` reads them once; both sections take the same list.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import duckdb

from gpuscope.analytics.placement.allocation import (
    ClusterState,
    StateReuse,
    state_from_records,
)
from gpuscope.analytics.report.fragmentation import change_points
from gpuscope.analytics.report.inventory_sweep import inventories
from gpuscope.analytics.report.week import Week
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo


@dataclass(frozen=True, slots=True)
class WeekState:
    """One allocation state of the week: from ``at``, for ``hours`` inside the week."""

    at: datetime
    hours: float
    nodes: list[NodeInfo]
    pods: list[PodInfo]
    state: ClusterState


def week_states(con: duckdb.DuckDBPyConnection, week: Week) -> Iterator[WeekState]:
    """The states of ``week`` in time order; an instant without any node in the inventory
    is left out (there is no cluster to measure)."""
    instants = change_points(con, week.start, week.end)
    reuse = StateReuse()  # consecutive states share most nodes (records memoised)
    read = inventories(con, instants)
    for at, until, (nodes, pods, indices) in zip(
        instants, [*instants[1:], week.end], read, strict=True
    ):
        if not nodes:
            continue
        hours = (until - at).total_seconds() / 3600
        yield WeekState(
            at, hours, nodes, pods, state_from_records(nodes, pods, indices, reuse=reuse)
        )

"""The inventory valid at each of many instants, read once: what ``inventory_at`` gives
for one instant (gpuscope/analytics/report/topology.py), for the week's states.

The weekly report evaluates the allocation state at every inventory change of the week;
three queries an instant returned every node and pod record again each time (10,000 pods
x 28 instants for a week of 10,000 GPUs). Here each version is read once and a sweep over
the sorted instants keeps the versions valid at each: a version is valid at ``at`` when
``valid_from <= at`` and it has no end or ends after ``at``, as in ``nodes_at``,
``pods_at`` and ``gpu_indices_at``; records come in key order, as those queries order
them, and GPU indices sorted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import duckdb

from gpuscope.analytics.inventory import node_record, pod_record
from gpuscope.analytics.report.sql import Q, run
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo

T = TypeVar("T")
#: One read row: key, payload, valid from, valid to (None: still valid).
Row = tuple[str, Any, datetime, datetime | None]


def _sweep(rows: Sequence[Row], instants: Sequence[datetime]) -> Iterator[list[Row]]:
    """For each instant (ascending), the rows valid then, in key order."""
    order = sorted(range(len(rows)), key=lambda i: rows[i][2])
    active: dict[int, Row] = {}
    nxt = 0
    for at in instants:
        while nxt < len(order) and rows[order[nxt]][2] <= at:
            active[order[nxt]] = rows[order[nxt]]
            nxt += 1
        for i in [i for i, r in active.items() if r[3] is not None and r[3] <= at]:
            del active[i]
        yield sorted(active.values(), key=lambda r: r[0])


def _records(rows: list[Row], parse: Callable[[str], T]) -> list[T]:
    return [parse(r[1]) for r in rows]


def inventories(
    con: duckdb.DuckDBPyConnection, instants: Sequence[datetime]
) -> Iterator[tuple[list[NodeInfo], list[PodInfo], dict[str, list[int]]]]:
    """``inventory_at`` for each of ``instants`` (ascending): the node and pod records
    valid then and the GPU indices the agents reported for the pods then."""
    if not instants:
        return
    # versions valid at some instant: begun by the last (the bound is exclusive), not
    # ended by the first
    span = {"start": instants[0], "end": instants[-1] + timedelta(microseconds=1)}
    nodes = run(con, Q["node_versions"], **span).fetchall()
    pods = run(con, Q["pod_versions"], **span).fetchall()
    held = run(con, Q["gpu_intervals"], **span).fetchall()
    sweeps = zip(_sweep(nodes, instants), _sweep(pods, instants), _sweep(held, instants),
                 strict=True)  # fmt: skip
    for node_rows, pod_rows, held_rows in sweeps:
        node_records = _records(node_rows, node_record)
        pod_records = _records(pod_rows, pod_record) if node_records else []
        indices: dict[str, set[int]] = {}
        for key, gpu, _, _ in held_rows:
            indices.setdefault(key, set()).add(gpu)
        yield node_records, pod_records, {k: sorted(g) for k, g in indices.items()}

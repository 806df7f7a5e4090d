"""The collector's stored history as what-if input: a window's nodes and pod events.

The inventory is stored as versions (``valid_from``/``valid_to``) of each node and pod.
For a window (a week) this reads every version that overlaps it and turns each pod into
one :class:`~gpuscope.analytics.whatif.events.PodEvent`:

- **arrival**: when the pod asked to be scheduled, its creation time (the ``start_time``
  of its first stored version, which is the creation time while it was pending), or its
  real start where it was already running when first seen (we cannot tell it waited);
- **duration**: how long it really ran, from its real start (``status.startTime``; for a
  pod seen pending whose record has no later start time, when it was first seen placed) to its
  end (the first version in phase Succeeded/Failed, or the end of its last version); a pod
  still running at the window's end runs to the end; one that never started runs the median
  of the window's pods of its size that did (:func:`typical_run_times`);
- **request**: its last active version's requests (GPUs, fraction, MIG, CPU, memory).

The replay starts from the window's real state: a pod already running where the window
starts is placed on its real node at its real start (:attr:`PodEvent.node`), and one
waiting there joins the queue at the window's start, in creation order. Building the
starting load under the policy instead (as this did before) started, in an empty past,
the big jobs that really waited all week: on the demo's week the queue the cluster began
with vanished from every replay. Nodes are the last
version of each node seen in the window (a node removed during the window counts as
there: the what-if asks about placement, not capacity changes).

:func:`what_happened` gives the same figures for what the real scheduler did, from the
same rows: allocated GPUs when arrivals stopped, pods that never started, GPU-hours
queued inside the window (arrival to real start, both clipped to the window, as the
replay counts them).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

from gpuscope.analytics.placement.allocation_sources import record_of
from gpuscope.analytics.whatif.events import Inventory, PodEvent, empty_nodes, request_of
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.records import WorkloadKind

#: Versions of nodes / pods that overlap the window [start, end).
NODES_SQL = (
    "SELECT key, record, valid_from, valid_to FROM inventory_nodes "
    "WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $start) "
    "ORDER BY key, valid_from"
)
PODS_SQL = (
    "SELECT key, record, valid_from, valid_to FROM inventory_pods "
    "WHERE valid_from < $end AND (valid_to IS NULL OR valid_to > $start) "
    "ORDER BY key, valid_from"
)
_ACTIVE = frozenset({"Pending", "Running", "Unknown"})
_FINISHED = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodHistory:
    """One pod over the window, as stored."""

    key: str
    pod: PodInfo
    arrive: float
    started: float | None
    ended: float | None


@dataclass(frozen=True, slots=True)
class History:
    """A window's nodes, pods and their events (times in Unix seconds)."""

    inventory: Inventory
    pods: tuple[PodHistory, ...]
    events: tuple[PodEvent, ...]
    start: float
    end: float
    #: the node records (labels included: the topology-aware what-if's domains)
    node_infos: tuple[NodeInfo, ...] = ()
    #: Where the stored history of the window begins: its start, or later when the store
    #: holds nothing before (a new collector, the demo's shorter history); the replay
    #: starts from the real state there.
    begin: float | None = None

    @property
    def first(self) -> float:
        """The first instant the window has data for."""
        return self.start if self.begin is None else self.begin


def _pod(data: dict[str, Any]) -> PodInfo:
    # records written before a field existed (or by other tools) lack it: the defaults
    # the fragmentation report gives them too
    data = {"uid": "", "start_time": None, "phase": "Running", "node": None} | data
    kind = data.get("kind", WorkloadKind.UNKNOWN.value)
    data["kind"] = (
        WorkloadKind(kind) if kind in WorkloadKind._value2member_map_ else WorkloadKind.UNKNOWN
    )
    pod: PodInfo = record_of(PodInfo, data)
    return pod


def _seconds(value: datetime) -> float:
    """DuckDB TIMESTAMP (naive UTC) as Unix seconds."""
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _pod_history(
    key: str, rows: Sequence[tuple[PodInfo, float, float | None]]
) -> PodHistory | None:
    active = [r for r in rows if r[0].phase in _ACTIVE]
    if not active:
        return None
    first_pod, first_from, _ = rows[0]
    placed = next((r for r in rows if r[0].node is not None and r[0].phase in _ACTIVE), None)
    started: float | None = None
    if placed is not None:
        started = placed[0].start_time if placed[0].start_time is not None else placed[1]
        seen_pending = first_pod.node is None
        if seen_pending and (started is None or started <= (first_pod.start_time or 0.0)):
            # no startTime past its creation: it started when first seen placed
            started = placed[1]
    if first_pod.node is None and first_pod.start_time is not None:
        arrive = min(first_pod.start_time, first_from)
    else:
        arrive = started if started is not None else first_from
    finished = next((r for r in rows if r[0].phase in _FINISHED), None)
    ended = finished[1] if finished is not None else rows[-1][2]
    return PodHistory(key, active[-1][0], arrive, started, ended)


def read_history(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> History:
    """The window's nodes and pod events (module docstring)."""
    params = {"start": start, "end": end}
    nodes: dict[str, NodeInfo] = {}
    for key, record, _, _ in con.execute(NODES_SQL, params).fetchall():
        nodes[key] = record_of(NodeInfo, json.loads(record))
    by_pod: dict[str, list[tuple[PodInfo, float, float | None]]] = {}
    for key, record, valid_from, valid_to in con.execute(PODS_SQL, params).fetchall():
        by_pod.setdefault(key, []).append(
            (
                _pod(json.loads(record)),
                _seconds(valid_from),
                None if valid_to is None else _seconds(valid_to),
            )
        )
    t0, t1 = _seconds(start), _seconds(end)  # naive UTC, as the store keeps times
    pods = []
    for key, rows in sorted(by_pod.items()):
        h = _pod_history(key, rows)
        if h is not None and h.arrive < t1 and (h.ended is None or h.ended > t0):
            pods.append(h)
    pods.sort(key=lambda h: (h.arrive, h.key))
    typical = typical_run_times(pods)
    # the replay starts from the real state where the stored history begins: the window's
    # start, or the first listing when the store holds nothing before it
    first_seen = min((rows[0][1] for rows in by_pod.values()), default=t0)
    begin = max(t0, first_seen)
    events = [_event(h, begin, typical) for h in pods]
    inventory = Inventory(empty_nodes(nodes.values()))
    return History(inventory, tuple(pods), tuple(events), t0, t1, tuple(nodes.values()), begin)


def _event(h: PodHistory, t0: float, typical: dict[float | None, float]) -> PodEvent:
    """The pod as the replay takes it, from the window's real state at ``t0`` (module
    docstring)."""
    duration = None
    if h.started is not None and h.ended is not None:
        duration = max(0.0, h.ended - h.started)
    elif h.started is None:
        duration = typical.get(_size(h.pod), typical.get(None))
    arrive, node = h.arrive, None
    if h.started is not None and h.started < t0:  # running where the window starts
        arrive, node = h.started, h.pod.node
    elif arrive < t0:  # waiting where the window starts: in the queue from then
        arrive = t0
    return PodEvent(h.key, request_of(h.pod), arrive, duration, h.pod.priority or 0,
                    h.pod.preempts, node)  # fmt: skip


def _size(pod: PodInfo) -> float:
    return round(pod.gpus, 3)


def typical_run_times(pods: Sequence[PodHistory]) -> dict[float | None, float]:
    """The median run time of the window's pods that started and ended, by GPU size (and
    under None, of all of them): what a pod that never started runs in a replay that starts
    it. Its own run time is unknown; running it to the window's end instead would hold its
    GPUs for the rest of the week in every replay that starts it."""
    by_size: dict[float | None, list[float]] = {}
    for h in pods:
        if h.started is not None and h.ended is not None:
            d = max(0.0, h.ended - h.started)
            by_size.setdefault(_size(h.pod), []).append(d)
            by_size.setdefault(None, []).append(d)
    return {k: statistics.median(v) for k, v in by_size.items()}


def what_happened(history: History, at: float) -> dict[str, float]:
    """The real scheduler's figures from the same rows: GPUs allocated at ``at`` (on the
    inventory's schedulable nodes), pods that never started, GPU-hours queued."""
    open_nodes = {n.name for n in history.inventory.nodes if n.schedulable}
    allocated = 0.0
    never = 0
    queued = 0.0
    for h in history.pods:
        gpus = h.pod.gpu_request + (h.pod.gpu_fraction or 0.0) * max(1, h.pod.fraction_devices)
        running = h.started is not None and h.started <= at and (h.ended is None or h.ended > at)
        if running and h.pod.node in open_nodes:
            allocated += gpus
        if h.started is None:
            never += 1
        wait_end = h.started if h.started is not None else history.end
        waited = min(wait_end, history.end) - max(h.arrive, history.first)
        queued += max(0.0, waited) * gpus / 3600
    capacity = history.inventory.gpu_capacity
    return {
        "allocated_gpus": round(allocated, 3),
        "allocation_ratio": round(allocated / capacity, 6) if capacity else 0.0,
        "jobs_started": len(history.pods) - never,
        "jobs_never_started": never,
        "queued_gpu_hours": round(queued, 3),
    }

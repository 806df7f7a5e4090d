"""The topology-aware what-if on real inputs: a kubectl snapshot or a stored week turned into
the gang replay's trace (:mod:`gpuscope.analytics.whatif.topology`), and its figures.

``gpuscope whatif`` (files and ``--db``) and the weekly report run the same functions here,
so they give the same figures for the same input. The trace:

- **domains**: resolved as ``gpuscope analyze topology`` resolves them
  (:func:`gpuscope.analytics.domains.topology_levels.topology_of`: Kueue/KAI ``Topology`` and
  Volcano ``HyperNode`` objects of ``--objects``, else the node labels); the replay uses one level:
  the one asked for (``--topology-level``), else the level most pending and running pod
  groups require or prefer, else the finest level (the most domains), as
  :func:`gpuscope.analytics.domains.topology.group_level` judges a group that names none. A node
  outside every domain of the level is a domain of its own (a job may still fit on it
  alone). Only schedulable GPU nodes take part.
- **jobs**: each multi-pod group (:func:`gpuscope.analytics.domains.topology_groups.pod_groups`:
  Kueue pod groups, Workloads, Volcano/KAI PodGroups, JobSets, Kubeflow jobs, one Job's
  pods) is one job of ``pods`` x ``gpus_per_pod`` GPUs arriving with its first pod and
  running as long as its longest, *required* to stay in one domain where it names a
  required level (it waits for one), else kept in one where one holds it and started
  spread otherwise; every other GPU pod is a one-pod job of its whole GPUs (a
  fractional pod counts as one GPU: a shared GPU serves no multi-node pod). Pods asking for
  no GPU, and MIG-only pods, are left out (``skipped_pods``).
- **times**: a snapshot's pods arrive in start order, one a second, and never leave (the
  figure is how many jobs the free cluster holds at once, the not-admitted Workloads last);
  a stored week's pods arrive and run as stored, to the week's end.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuscope.analytics.domains.topology import group_level
from gpuscope.analytics.domains.topology_groups import PodGroup, pod_groups
from gpuscope.analytics.domains.topology_levels import Topology, topology_of
from gpuscope.analytics.whatif.events import empty_nodes
from gpuscope.analytics.whatif.history import History
from gpuscope.analytics.whatif.topology import (
    TOPOLOGY_POLICIES,
    GangJob,
    TopoNode,
    replay_gangs,
)
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.errors import UserError
from gpuscope.core.kube_objects import ObjectSet

_ACTIVE = frozenset({"Pending", "Running", "Unknown"})


@dataclass(frozen=True, slots=True)
class GangTrace:
    """The replay's input and where it came from."""

    nodes: tuple[TopoNode, ...]
    jobs: tuple[GangJob, ...]
    level: str
    level_source: str
    domains: int
    until: float | None
    skipped_pods: int
    #: each multi-node job's pods (``namespace/pod``), by job name
    members: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class TimedPod:
    """A pod with when it arrived and how long it ran (None: to the end)."""

    pod: PodInfo
    arrive: float
    duration: float | None


def replay_level(groups: Sequence[PodGroup], topology: Topology, asked: str | None) -> str:
    """The level the replay keeps jobs inside (module docstring)."""
    if asked:
        if not topology.domains.get(asked):
            known = ", ".join(lv.key for lv in topology.levels if topology.domains.get(lv.key))
            raise UserError(
                f"--topology-level {asked}: no such level on these nodes "
                f"(levels: {known or 'none'})"
            )
        return asked
    wanted = Counter(
        lv for g in groups if g.pods >= 2 for lv in (g.required_level or g.preferred_level,) if lv
    )
    for level, _ in sorted(wanted.items(), key=lambda kv: -kv[1]):
        if level in topology.domains:
            return level
    return group_level(PodGroup("", "", "", 2, 1), topology)[0]


def build_trace(
    node_infos: Sequence[NodeInfo],
    pods: Sequence[TimedPod],
    objects: ObjectSet,
    *,
    labels: Sequence[str] | None = None,
    level: str | None = None,
    until: float | None = None,
) -> GangTrace:
    """The trace of the nodes and timed pods (module docstring)."""
    live = [t for t in pods if t.pod.phase in _ACTIVE]
    groups = [g for g in pod_groups([t.pod for t in live], objects) if g.pods >= 2]
    asked = {lv for g in groups for lv in (g.required_level, g.preferred_level) if lv}
    topo = topology_of(node_infos, objects, labels, sorted(asked | ({level} if level else set())))
    key = replay_level(groups, topo, level)
    mapping = topo.domains.get(key, {})
    source = next((lv.source for lv in topo.levels if lv.key == key), "none")
    nodes = tuple(
        TopoNode(n.name, len(n.gpus), mapping.get(n.name) or f"(no domain)/{n.name}")
        for n in empty_nodes(node_infos)
        if n.schedulable and n.gpus
    )
    by_key = {(t.pod.namespace, t.pod.name): t for t in live}
    grouped: set[tuple[str, str]] = set()
    jobs: list[GangJob] = []
    membership: list[tuple[str, tuple[str, ...]]] = []
    last = max((t.arrive for t in live), default=0.0)
    for g in groups:
        members = [by_key[(g.namespace, m)] for m in g.members if (g.namespace, m) in by_key]
        grouped |= {(g.namespace, m) for m in g.members}
        arrive = min((t.arrive for t in members), default=last + 1)
        ran = [t.duration for t in members]
        duration = math.inf if not ran or None in ran else max(d or 0.0 for d in ran)
        priority = max((t.pod.priority or 0 for t in members), default=0)
        preempts = all(t.pod.preempts for t in members)
        jobs.append(
            GangJob(g.key, arrive, duration, g.pods, g.gpus_per_pod, bool(g.required_level),
                    priority, preempts)
        )  # fmt: skip
        membership.append((g.key, tuple(f"{g.namespace}/{m}" for m in g.members)))
    skipped = 0
    for (ns, name), t in sorted(by_key.items()):
        if (ns, name) in grouped:
            continue
        gpus = t.pod.gpu_request or (1 if t.pod.gpu_fraction else 0)
        if gpus < 1:
            skipped += 1
            continue
        duration = math.inf if t.duration is None else t.duration
        jobs.append(GangJob(f"{ns}/{name}", t.arrive, duration, 1, gpus,
                            priority=t.pod.priority or 0, preempts=t.pod.preempts))  # fmt: skip
    return GangTrace(
        nodes, tuple(jobs), key, source, len({n.domain for n in nodes}), until, skipped,
        tuple(membership),
    )  # fmt: skip


def snapshot_trace(
    node_infos: Sequence[NodeInfo],
    pod_infos: Sequence[PodInfo],
    objects: ObjectSet,
    *,
    labels: Sequence[str] | None = None,
    level: str | None = None,
) -> GangTrace:
    """A kubectl snapshot's trace: pods in start order, one a second, never leaving."""
    live = sorted(
        (p for p in pod_infos if p.phase in _ACTIVE),
        key=lambda p: (p.start_time if p.start_time is not None else math.inf, p.name),
    )
    timed = [TimedPod(p, float(i), None) for i, p in enumerate(live)]
    return build_trace(node_infos, timed, objects, labels=labels, level=level)


def history_trace(
    history: History, *, labels: Sequence[str] | None = None, level: str | None = None
) -> GangTrace:
    """A stored window's trace: pods arrive and run as stored, replayed to its end, from
    the window's real state as the main replay reads it (a pod running where the window's
    history begins arrives at its real start, one waiting there at that instant)."""
    events = {e.key: e for e in history.events}
    timed = [
        TimedPod(h.pod, events[h.key].arrive if h.key in events else h.arrive,
                 events[h.key].duration if h.key in events else None)
        for h in history.pods
    ]  # fmt: skip
    return build_trace(
        history.node_infos, timed, ObjectSet(), labels=labels, level=level, until=history.end
    )


def gang_figures(
    trace: GangTrace,
    policies: Sequence[str] = TOPOLOGY_POLICIES,
    actual: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"summary": {...}, "policies": {name: {...}}}``: per policy, the multi-node jobs
    started (inside one domain or spread), never started, waited, and their waits.
    ``most_multi_node_in_one_domain`` names the first policy with the most multi-node jobs
    started inside one domain (None when no policy started one)."""
    results = {p: replay_gangs(trace.nodes, trace.jobs, p, until=trace.until) for p in policies}
    multi = sum(1 for j in trace.jobs if j.pods >= 2)
    top = max(policies, key=lambda p: (results[p].multi_node_in_one_domain, -policies.index(p)))
    best = top if results[top].multi_node_in_one_domain else None
    return {
        "summary": {
            "level": trace.level,
            "level_source": trace.level_source,
            "domains": trace.domains,
            "nodes": len(trace.nodes),
            "gpus": sum(n.gpus for n in trace.nodes),
            "jobs": len(trace.jobs),
            "multi_node_jobs": multi,
            "skipped_pods": trace.skipped_pods,
            "most_multi_node_in_one_domain": best,
            # a stored week's real outcome, the same figures (whatif/gangs_actual.py)
            **({"what_happened": actual} if actual is not None else {}),
        },
        "policies": {p: results[p].as_dict() for p in policies},
    }

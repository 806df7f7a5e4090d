"""Fragmentation across the network: what each topology domain can still hold.

Free GPUs are not enough for a multi-node job: Kueue's Topology-Aware Scheduling,
KAI-Scheduler and Volcano place a job's pods inside one domain of a level (a leaf switch, a
rack, an NVLink domain). Per level and domain (:mod:`gpuscope.analytics.domains.topology_levels`)
this module measures:

- ``free_gpus``: whole free GPUs on open nodes (Ready and not cordoned; a fractional
  leftover serves no multi-node job);
- ``whole_free_nodes``: open GPU nodes with every GPU free;
- ``largest_job_pods``: for pods of ``k`` GPUs (``k`` a power of two up to the largest
  node), the most such pods one job could place inside the domain now, ``sum(free // k)``
  over its nodes (a job of N pods x k GPUs fits iff N is at most this);
- ``slots`` per level: how many jobs of 8, 16, 32 ... GPUs fit at once, each inside one
  domain of the level. A job of ``s`` GPUs is ``ceil(s / k)`` pods of ``k = min(s,
  pod_gpus)`` GPUs, ``pod_gpus`` the most common GPU count of a node (8 on DGX-class
  nodes): a 16-GPU job is two 8-GPU pods. Pods of one size are interchangeable, so a
  domain holds ``floor(largest_job_pods[k] / pods)`` such jobs;
- ``fragmented_gpus`` per level, in the spirit of FGD: over the task mix of multi-pod jobs
  (the pod groups seen, running or pending, by shape; one 2-pod job of ``pod_gpus`` GPU
  pods when there are none), the expected number of free GPUs that sit in a domain that
  cannot hold one job of the drawn shape.

Only GPUs are counted here (CPU and memory are the node analyses'); taints other than a
cordon are ignored for the measures (GPU nodes are often tainted for GPU pods only), and a
pending group's own tolerations decide where it may go.

A ``topology_fragmentation`` finding is raised for a pending pod group (no pod placed,
:mod:`gpuscope.analytics.domains.topology_groups`) whose GPUs the cluster's free GPUs cover (whole
free GPUs on nodes that admit its pods) but that no single domain of its level can hold
(evidence ``cause``: ``topology`` when the cluster could place it spread over domains,
``fragmentation`` when its free GPUs are scattered over nodes as well). Its level is the
required level (warning: it waits), else the preferred level, else the finest level, the
one with the most domains (info: it can only start spread over domains).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.consolidation.domain import DomainGoal, DomainPlan, plan_domain
from gpuscope.analytics.consolidation.model import Placed
from gpuscope.analytics.domains.topology_groups import PodGroup
from gpuscope.analytics.domains.topology_levels import Topology
from gpuscope.analytics.placement.allocation import (
    CORDON_TAINT,
    ClusterState,
    NodeState,
    Task,
    admits,
)
from gpuscope.core.records import Finding, finding_id

KINDS = ("topology_fragmentation",)
#: Blocked groups a run plans domains for (the first, by group key); the rest get findings.
MAX_PLANNED_GROUPS = 10


def is_open(node: NodeState) -> bool:
    """Takes new pods at all: Ready and not cordoned."""
    return node.schedulable and CORDON_TAINT not in node.taints


def free_whole(node: NodeState) -> int:
    """Whole free GPUs a multi-node job's pod could use on the node (0 when closed)."""
    return node.whole_free_gpus if is_open(node) else 0


def pod_gpus_of(nodes: Iterable[NodeState]) -> int:
    """The most common GPU count of a GPU node (the larger on a tie); 8 with no GPU node."""
    counts = Counter(len(n.gpus) for n in nodes if n.gpus)
    if not counts:
        return 8
    return max(counts, key=lambda c: (counts[c], c))


def job_sizes(total_gpus: int) -> list[int]:
    """8, 16, 32 ... up to the cluster's GPUs (8 at least)."""
    sizes = [8]
    while sizes[-1] * 2 <= total_gpus:
        sizes.append(sizes[-1] * 2)
    return sizes


def job_shape(size: int, pod_gpus: int) -> tuple[int, int]:
    """(pods, GPUs per pod) of a job of ``size`` GPUs."""
    k = max(1, min(size, pod_gpus))
    return math.ceil(size / k), k


def pod_sizes(nodes: Iterable[NodeState]) -> list[int]:
    """Pod sizes ``largest_job_pods`` reports: powers of two up to the largest node."""
    top = max((len(n.gpus) for n in nodes), default=0)
    sizes, k = [], 1
    while k <= top:
        sizes.append(k)
        k *= 2
    return sizes


def placeable_pods(free: Iterable[int], k: int) -> int:
    """How many pods of ``k`` whole GPUs fit on nodes with these free GPUs."""
    return sum(f // k for f in free)


@dataclass(frozen=True, slots=True)
class Domain:
    level: str
    name: str
    nodes: tuple[str, ...]
    gpus: int
    #: whole free GPUs of each node (0 for a closed node), in ``nodes`` order
    free: tuple[int, ...]
    whole_free_nodes: int

    @property
    def free_gpus(self) -> int:
        return sum(self.free)

    def pods(self, k: int) -> int:
        return placeable_pods(self.free, k)

    def jobs(self, pods: int, k: int) -> int:
        return self.pods(k) // pods


def domains_of(topology: Topology, nodes: Sequence[NodeState]) -> dict[str, list[Domain]]:
    """Each level's domains, by name."""
    by_name = {n.name: n for n in nodes}
    out: dict[str, list[Domain]] = {}
    for level in topology.levels:
        groups: dict[str, list[NodeState]] = {}
        for node_name, domain in topology.domains.get(level.key, {}).items():
            if node_name in by_name:
                groups.setdefault(domain, []).append(by_name[node_name])
        out[level.key] = [
            Domain(
                level=level.key,
                name=name,
                nodes=tuple(n.name for n in members),
                gpus=sum(len(n.gpus) for n in members),
                free=tuple(free_whole(n) for n in members),
                whole_free_nodes=sum(1 for n in members if n.gpus and free_whole(n) == len(n.gpus)),
            )
            for name, members in sorted(groups.items())
        ]
    return out


#: Shapes of multi-pod jobs, (pods, GPUs per pod), with their weights.
Mix = Sequence[tuple[tuple[int, int], float]]


def task_mix(groups: Sequence[PodGroup], pod_gpus: int) -> list[tuple[tuple[int, int], float]]:
    """Shapes (pods, GPUs per pod) of the multi-pod jobs and their weights."""
    counts = Counter((g.pods, g.gpus_per_pod) for g in groups if g.pods >= 2)
    if not counts:
        return [((2, pod_gpus), 1.0)]
    total = sum(counts.values())
    return [(shape, c / total) for shape, c in sorted(counts.items())]


def fragmented_gpus(domains: Sequence[Domain], mix: Mix) -> float:
    """Expected free GPUs in domains that cannot hold one job of the mix's shape."""
    return sum(w * sum(d.free_gpus for d in domains if d.jobs(n, k) < 1) for (n, k), w in mix)


def level_summary(
    domains: Sequence[Domain], sizes: Sequence[int], pod_gpus: int, ks: Sequence[int],
    mix: Mix, source: str, unlabelled: int,
) -> dict[str, Any]:  # fmt: skip
    free = sum(d.free_gpus for d in domains)
    frag = fragmented_gpus(domains, mix)
    return {
        "source": source,
        "domains": {
            d.name: {
                "nodes": len(d.nodes),
                "gpus": d.gpus,
                "free_gpus": d.free_gpus,
                "whole_free_nodes": d.whole_free_nodes,
                "largest_job_pods": {str(k): d.pods(k) for k in ks},
            }
            for d in domains
        },
        "slots": {str(s): sum(d.jobs(*job_shape(s, pod_gpus)) for d in domains) for s in sizes},
        "free_gpus": free,
        "fragmented_gpus": round(frag, 6),
        "fragmentation_ratio": round(frag / free, 6) if free else 0.0,
        "unlabelled_nodes": unlabelled,
    }


def group_level(group: PodGroup, topology: Topology) -> tuple[str, str]:
    """(level key, mode) a group is judged at: required, preferred or finest."""
    if group.required_level:
        return group.required_level, "required"
    if group.preferred_level:
        return group.preferred_level, "preferred"
    # the finest level: the most domains (levels from different label families are not
    # ordered against each other, a rack label and a leaf label say nothing of which is finer)
    if not topology.levels:
        return "", "unconstrained"
    finest = max(
        enumerate(topology.levels),
        key=lambda il: (len(set(topology.domains.get(il[1].key, {}).values())), il[0]),
    )[1]
    return finest.key, "unconstrained"


def group_capacity(group: PodGroup, nodes: Sequence[NodeState]) -> dict[str, int]:
    """Pods of the group each node could take now (its tolerations decide admission)."""
    task = Task(gpu_count=group.gpus_per_pod, gpu_share=1.0, tolerations=group.tolerations)
    return {n.name: (free_whole(n) // group.gpus_per_pod if admits(n, task) else 0) for n in nodes}


def group_free_gpus(group: PodGroup, nodes: Sequence[NodeState]) -> dict[str, int]:
    """Whole free GPUs of the nodes that admit the group's pods."""
    task = Task(gpu_count=group.gpus_per_pod, gpu_share=1.0, tolerations=group.tolerations)
    return {n.name: (free_whole(n) if admits(n, task) else 0) for n in nodes}


def blocked_groups(
    groups: Sequence[PodGroup], topology: Topology, nodes: Sequence[NodeState]
) -> list[tuple[PodGroup, str, str, dict[str, int]]]:
    """Pending groups whose GPUs the cluster's free GPUs cover (on nodes that admit them)
    but that no domain of their level can hold: (group, level, mode, placeable pods per
    domain)."""
    out = []
    for g in groups:
        if not g.pending or g.pods < 2:
            continue
        level, mode = group_level(g, topology)
        if not level or level not in topology.domains:
            continue
        cap = group_capacity(g, nodes)
        if sum(group_free_gpus(g, nodes).values()) < g.gpus:
            continue
        per_domain: dict[str, int] = {}
        for node_name, domain in topology.domains[level].items():
            per_domain[domain] = per_domain.get(domain, 0) + cap.get(node_name, 0)
        if any(v >= g.pods for v in per_domain.values()):
            continue
        out.append((g, level, mode, per_domain))
    return out


def analyze_topology(
    state: ClusterState,
    topology: Topology,
    groups: Sequence[PodGroup],
    *,
    at: datetime,
    placed: Sequence[Placed] | None = None,
) -> Analysis:
    """Per level: domains, slots, fragmentation; findings for blocked pending groups, each
    with the plan that clears a domain for it when ``placed`` (the pods on nodes, and which
    may move) is given (:mod:`gpuscope.analytics.consolidation.domain`)."""
    pod_gpus = pod_gpus_of(state.nodes)
    total = sum(len(n.gpus) for n in state.nodes)
    sizes = job_sizes(total)
    ks = pod_sizes(state.nodes)
    mix = task_mix(groups, pod_gpus)
    by_level = domains_of(topology, state.nodes)
    gpu_nodes = {n.name for n in state.nodes if n.gpus}
    levels: dict[str, Any] = {}
    for level in topology.levels:
        labelled = set(topology.domains.get(level.key, {}))
        levels[level.key] = level_summary(
            by_level[level.key], sizes, pod_gpus, ks, mix, level.source,
            len(gpu_nodes - labelled),
        )  # fmt: skip
    findings: list[Finding] = []
    plans: list[dict[str, Any]] = []
    for g, key, mode, per_domain in blocked_groups(groups, topology, state.nodes):
        plan = None
        if placed is not None and len(plans) < MAX_PLANNED_GROUPS:
            plan = _domain_plan(g, key, topology, state.nodes, placed)
            if plan is not None:
                plans.append(plan.as_dict())
        findings.append(_finding(g, key, mode, per_domain, state.nodes, at, topology, plan))
    summary: dict[str, Any] = {
        "levels": levels,
        "topology_source": topology.source,
        "pod_gpus": pod_gpus,
        "job_sizes": sizes,
        "free_gpus": sum(free_whole(n) for n in state.nodes),
        "pod_groups": len(groups),
        "pending_pod_groups": sum(1 for g in groups if g.pending),
        "blocked_pod_groups": len(findings),
        "plans": plans,
    }
    return Analysis(kinds=KINDS, findings=findings, summary=summary)


def _finding(
    g: PodGroup,
    level: str,
    mode: str,
    per_domain: Mapping[str, int],
    nodes: Sequence[NodeState],
    at: datetime,
    topology: Topology,
    plan: DomainPlan | None = None,
) -> Finding:
    cap = group_capacity(g, nodes)
    best = max(sorted(per_domain), key=lambda d: per_domain[d], default="")
    target: dict[str, Any] = {"level": level, "domain": best, "pod_group": g.key}
    if plan is not None:
        target = {
            **target,
            "domain": plan.domain,
            "nodes": sorted({n for _, n in plan.plan.targets}),
        }
    subject = {"namespace": g.namespace, "pod_group": g.name}
    return Finding(
        id=finding_id("topology_fragmentation", subject),
        kind="topology_fragmentation",
        severity="warning" if mode == "required" else "info",
        subject=subject,
        since=None,
        observed_at=at,
        evidence={
            "source": g.source,
            "level": level,
            "mode": mode,
            "pods": g.pods,
            "gpus_per_pod": g.gpus_per_pod,
            "gpus": g.gpus,
            "cluster_free_gpus": sum(group_free_gpus(g, nodes).values()),
            "cluster_placeable_pods": sum(cap.values()),
            # topology: the cluster could place it spread over domains; fragmentation: not
            # even that, the free GPUs are scattered over nodes too
            "cause": "topology" if sum(cap.values()) >= g.pods else "fragmentation",
            "best_domain": best,
            "best_domain_placeable_pods": per_domain.get(best, 0),
            "domains": len(per_domain),
            # Kueue's preferred mode (and KAI's) climbs to coarser levels: the finest level
            # one of whose domains holds the group ("" for none: only spread over the cluster)
            "holds_at_level": level_holding(g, topology, nodes),
        },
        recommendation={
            "action": "consolidate_domain",
            "target": target,
            "moves": [m.as_dict() for m in plan.plan.moves] if plan else [],
        },
    )


def level_holding(g: PodGroup, topology: Topology, nodes: Sequence[NodeState]) -> str:
    """The finest level (most domains first) with a domain that holds the group now."""
    cap = group_capacity(g, nodes)
    order = sorted(
        topology.levels, key=lambda lv: -len(set(topology.domains.get(lv.key, {}).values()))
    )
    for lv in order:
        per_domain: dict[str, int] = {}
        for node_name, domain in topology.domains.get(lv.key, {}).items():
            per_domain[domain] = per_domain.get(domain, 0) + cap.get(node_name, 0)
        if any(v >= g.pods for v in per_domain.values()):
            return lv.key
    return ""


def _domain_plan(
    g: PodGroup,
    level: str,
    topology: Topology,
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
) -> DomainPlan | None:
    members: dict[str, set[str]] = {}
    for node_name, domain in topology.domains.get(level, {}).items():
        members.setdefault(domain, set()).add(node_name)
    goal = DomainGoal(g.key, level, g.pods, g.gpus_per_pod, g.tolerations)
    return plan_domain(nodes, placed, {d: frozenset(m) for d, m in members.items()}, goal)

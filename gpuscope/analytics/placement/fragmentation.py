"""GPU fragmentation (the FGD measure) and node fragmentation, over an allocation state.

GPU fragmentation follows Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
Workloads with Fragmentation Gradient Descent" (USENIX ATC '23). Free GPU is fragmented
*with respect to a task* when that task cannot use it; a node's fragmentation is the
expectation over the task mix M of the workload:

    F_n(M) = sum_m p_m * F_n(m)
    F_n(m) = sum of the node's free GPU           if m does not fit the node (it asks no
                                                  GPU, the wrong model, more GPUs or CPU
                                                  than are free)
           = sum of free_g over GPUs g with free_g < share(m)   otherwise

The mix is learnt as the paper's simulator (``GetTypicalPods`` in its ``frag.go``) does:
tasks grouped by (CPU, per-GPU share in milli-GPU, GPU count, the GPU-model constraint as
written), groups ranked by count, ties broken as its sort does (larger CPU first, then
larger share, more GPUs, the model text in reverse order), the most frequent kept until
they cover 95 % of the tasks, popularity renormalised over the kept groups. Memory,
storage and tolerations, which the simulator does not know, extend the group key after
those fields (constant on its traces, so its ranking is unchanged there).

Only nodes that could take work now count
(:func:`gpuscope.analytics.placement.allocation.open_nodes`: Ready, every taint and cordon tolerated
by some task); the free GPUs of the others are reported apart (``unschedulable_free_gpus``), neither
free nor fragmented. A task fits a node only if the node admits it and has its CPU, memory and
storage free (:func:`gpuscope.analytics.placement.allocation.fits`), so a free GPU on a node without
the CPU for any typical task is fragmented.

Node fragmentation is the whole-GPU view: a job of k GPUs on one node cannot start
although the pool has k free GPUs, because they are spread over nodes. For each size the
answer is how many such jobs fit now and how many would if the same free GPUs were packed
onto as few nodes as possible.

Thresholds: a ``gpu_fragmentation`` finding is raised when at least one GPU's worth of
free capacity is fragmented and the ratio is >= 0.25 (warning) or >= 0.5 (critical). A
quarter of free capacity that the typical task cannot use is where a cluster starts turning
work away while GPUs sit free; at half, most of its headroom is illusory. These are
judgement calls, not the paper's. Under one GPU there is nothing to consolidate.
``node_fragmentation`` is a warning when a pending job is blocked, info when only a
configured size is.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.placement.allocation import (
    EPS,
    ClusterState,
    GpuIndices,
    NodeState,
    Task,
    fits,
    open_nodes,
    state_from_records,
)
from gpuscope.analytics.placement.blockers import blocker
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.records import Finding, Severity, finding_id
from gpuscope.core.settings import AnalyticsSettings

log = logging.getLogger(__name__)

KINDS = ("gpu_fragmentation", "node_fragmentation")
WARNING_RATIO = 0.25
CRITICAL_RATIO = 0.5
#: Below this many fragmented GPUs there is nothing worth a finding.
MIN_FRAGMENTED_GPUS = 1.0
#: Nodes listed in a finding's evidence, worst first.
EVIDENCE_NODES = 20

#: (CPU milli, share in milli-GPU, GPU count, model constraint text, memory MiB, storage
#: MiB, tolerations, MIG instances, node selector terms): frag.go's PodResource first, then
#: what it does not know.
GroupKey = tuple[
    int, int, int, str, int, int, tuple[str, ...], tuple[tuple[str, int], ...], tuple[str, ...]
]


@dataclass(frozen=True, slots=True)
class TaskMix:
    """Typical tasks and their renormalised popularity (weights sum to 1, or empty)."""

    tasks: tuple[Task, ...] = ()
    weights: tuple[float, ...] = ()
    #: Share of the observed tasks the kept groups cover, before renormalising.
    coverage: float = 0.0
    groups_seen: int = 0
    tasks_seen: int = 0


def group_key(task: Task) -> GroupKey:
    """Shares to the milli-GPU, as the simulator keys them, so 0.5 and 0.5000001 are one
    group; the model constraint as written, so ``V100M16|V100M32|V100M32`` is its own."""
    milli = round(task.gpu_share * 1000) if task.gpu_count else 0
    return (
        task.cpu_milli,
        milli,
        task.gpu_count,
        task.spec_text if task.asks_gpu else "",
        task.memory_mib,
        task.ephemeral_mib,
        tuple(sorted(task.tolerations)),
        task.mig,
        tuple(sorted(task.node_terms)),
    )


def _group_task(key: GroupKey) -> Task:
    cpu, milli, count, spec, memory, storage, tolerations, mig, terms = key
    return Task(
        cpu_milli=cpu,
        gpu_count=count,
        gpu_share=milli / 1000,
        gpu_models=frozenset(m for m in spec.split("|") if m),
        memory_mib=memory,
        ephemeral_mib=storage,
        gpu_spec=spec,
        tolerations=frozenset(tolerations),
        mig=mig,
        node_terms=terms,
    )


class _Desc(str):
    """A string that sorts in reverse, for the model text's place in the ranking."""

    def __lt__(self, other: str) -> bool:
        return str.__gt__(self, other)


def learn_task_mix(tasks: Iterable[Task], coverage: float = 0.95) -> TaskMix:
    """Most frequent groups until they cover ``coverage`` of the tasks, renormalised; ties
    broken as frag.go's sort (module docstring), so the mix does not depend on input order."""
    counts = Counter(group_key(t) for t in tasks)
    total = sum(counts.values())
    if not total:
        return TaskMix()

    def rank(kv: tuple[GroupKey, int]) -> tuple[Any, ...]:
        (cpu, milli, count, spec, memory, storage, tolerations, mig, terms), n = kv
        return (-n, -cpu, -milli, -count, _Desc(spec), -memory, -storage, tolerations, mig, terms)

    ranked = sorted(counts.items(), key=rank)
    kept: list[tuple[GroupKey, int]] = []
    covered = 0
    for key, n in ranked:
        if covered >= coverage * total - EPS:
            break
        kept.append((key, n))
        covered += n
    return TaskMix(
        tasks=tuple(_group_task(key) for key, _ in kept),
        weights=tuple(n / covered for _, n in kept),
        coverage=covered / total,
        groups_seen=len(counts),
        tasks_seen=total,
    )


def task_fragment(node: NodeState, task: Task) -> float:
    """F_n(m): free GPU on the node that task m cannot use (module docstring); a MIG task
    uses MIG instances, no GPU share, so all the node's free share is fragment to it."""
    if task.gpu_count == 0 or not fits(node, task):
        return node.free_gpus
    return sum(f for f in node.gpus if f < task.gpu_share - EPS)


def fgd_node(node: NodeState, mix: TaskMix) -> float:
    """Expected fragmented GPU of a node under the mix, in GPUs (0..free GPUs)."""
    if node.free_gpus <= EPS:
        return 0.0
    value = sum(w * task_fragment(node, t) for t, w in zip(mix.tasks, mix.weights, strict=True))
    return min(value, node.free_gpus)


def pack_free(free: Sequence[int], capacities: Sequence[int], k: int = 1) -> list[int]:
    """The same number of free whole GPUs moved onto as few nodes as possible: whole k-GPU
    blocks first, largest nodes first, then the rest into what room remains."""
    remaining = sum(free)
    packed = [0] * len(capacities)
    order = sorted(range(len(capacities)), key=lambda i: (-capacities[i], i))
    for i in order:
        take = min(capacities[i] // k * k, remaining // k * k)
        packed[i], remaining = take, remaining - take
    for i in order:
        extra = min(capacities[i] - packed[i], remaining)
        packed[i], remaining = packed[i] + extra, remaining - extra
    if remaining:
        raise ValueError("more free GPUs than capacity")
    return packed


def node_placements(
    free: Sequence[int], k: int, capacities: Sequence[int] | None = None
) -> tuple[int, int]:
    """(jobs of k GPUs that fit now, jobs that fit once the free GPUs are packed)."""
    caps = capacities if capacities is not None else free
    now = sum(f // k for f in free)
    packed = sum(p // k for p in pack_free(free, caps, k))
    return now, packed


def _pool_detail(nodes: list[NodeState], sizes: Sequence[int], frag: float) -> dict[str, Any]:
    free = [n.whole_free_gpus for n in nodes]
    caps = [len(n.gpus) for n in nodes]
    fit_now: dict[str, int] = {}
    fit_packed: dict[str, int] = {}
    for k in sizes:
        fit_now[str(k)], fit_packed[str(k)] = node_placements(free, k, caps)
    return {
        "nodes": len(nodes),
        "total_gpus": sum(caps),
        "free_gpus": round(sum(n.free_gpus for n in nodes), 6),
        "whole_free_gpus": sum(free),
        "largest_placeable_job_gpus": max(free, default=0),
        "fgd_fragmented_gpus": round(frag, 6),
        "jobs_fit_now": fit_now,
        "jobs_fit_packed": fit_packed,
    }


def _node_finding(
    pool: str,
    nodes: list[NodeState],
    detail: dict[str, Any],
    blocked: list[int],
    pending_blocked: list[int],
    at: datetime,
) -> Finding:
    k = max(pending_blocked) if pending_blocked else max(blocked)
    severity: Severity = "warning" if pending_blocked else "info"
    subject = {"pool": pool}
    free_per_node = {n.name: n.whole_free_gpus for n in nodes if n.whole_free_gpus}
    return Finding(
        id=finding_id("node_fragmentation", subject),
        kind="node_fragmentation",
        severity=severity,
        subject=subject,
        since=None,
        observed_at=at,
        evidence={
            "whole_free_gpus": detail["whole_free_gpus"],
            "free_gpus_per_node": dict(sorted(free_per_node.items(), key=lambda kv: -kv[1])),
            "largest_placeable_job_gpus": detail["largest_placeable_job_gpus"],
            "blocked_job_gpus": blocked,
            "pending_blocked_job_gpus": pending_blocked,
            "jobs_fit_now": detail["jobs_fit_now"],
            "jobs_fit_packed": detail["jobs_fit_packed"],
        },
        recommendation={"action": "consolidate", "target": {"pool": pool, "job_gpus": k}},
    )


def _gpu_finding(
    state: ClusterState, mix: TaskMix, frag: float, ratio: float, free: float, at: datetime
) -> Finding | None:
    if frag < MIN_FRAGMENTED_GPUS or ratio < WARNING_RATIO:
        return None
    per_node = [(fgd_node(n, mix), n) for n in state.nodes]
    worst = sorted((p for p in per_node if p[0] > EPS), key=lambda p: (-p[0], p[1].name))
    subject = {"cluster": "cluster"}
    return Finding(
        id=finding_id("gpu_fragmentation", subject),
        kind="gpu_fragmentation",
        severity="critical" if ratio >= CRITICAL_RATIO else "warning",
        subject=subject,
        since=None,
        observed_at=at,
        evidence={
            "fgd_fragmented_gpus": round(frag, 6),
            "fgd_fragmentation_ratio": round(ratio, 6),
            "free_gpus": round(free, 6),
            "nodes": [
                {
                    "node": n.name,
                    "pool": n.pool,
                    "free_gpus": round(n.free_gpus, 6),
                    "gpus_free": list(n.gpus),
                    "fgd_fragmented_gpus": round(v, 6),
                }
                for v, n in worst[:EVIDENCE_NODES]
            ],
            "task_mix_groups": len(mix.tasks),
        },
        recommendation={"action": "consolidate", "target": {"scope": "cluster"}},
    )


def _pending_verdicts(
    nodes: Sequence[NodeState], usable: Sequence[NodeState], pending: Sequence[Task]
) -> tuple[int, list[str]]:
    """How many pending GPU tasks fit an open node now, and each one's blocker.

    Each verdict scans every node, and pending pods come from a few templates (a job's
    workers ask alike): 351 pending pods of 3 shapes on 1,250 nodes cost a second a state
    when judged one by one. So tasks are judged once per shape, their ``name`` (the only
    field neither check reads) left out of the key.
    """
    verdicts: dict[Task, tuple[bool, str]] = {}
    fit_now = 0
    blocked_by: list[str] = []
    for task in pending:
        shape = replace(task, name="")
        verdict = verdicts.get(shape)
        if verdict is None:
            verdict = verdicts[shape] = (
                any(fits(n, shape) for n in usable),
                blocker(nodes, shape),
            )
        fit_now += verdict[0]
        blocked_by.append(verdict[1])
    return fit_now, blocked_by


def analyze_fragmentation(
    state: ClusterState,
    *,
    at: datetime,
    settings: AnalyticsSettings,
    mix: TaskMix | None = None,
) -> Analysis:
    """Both fragmentations of a state; the mix is learnt from its tasks when not given.
    Free, placeable and fragmented capacity count open nodes only (module docstring)."""
    if mix is None:
        mix = learn_task_mix(state.tasks, settings.fgd_task_coverage)
    pending_sizes = sorted({t.gpu_count for t in state.pending if t.whole})
    sizes = sorted({k for k in settings.job_sizes if k > 0} | set(pending_sizes))
    is_open = open_nodes(state)
    usable = [n for n in state.nodes if n.name in is_open]
    closed = [n for n in state.nodes if n.name not in is_open and n.gpus]
    pools: dict[str, list[NodeState]] = {}
    for node in usable:
        if node.gpus:
            pools.setdefault(node.pool, []).append(node)
    findings: list[Finding] = []
    details: dict[str, dict[str, Any]] = {}
    frag = 0.0
    for pool, nodes in sorted(pools.items()):
        pool_frag = sum(fgd_node(n, mix) for n in nodes)
        frag += pool_frag
        detail = details[pool] = _pool_detail(nodes, sizes, pool_frag)
        # blocked by fragmentation: nothing of size k fits now, yet the same free GPUs
        # packed would hold one (nodes too small for k are capacity, not fragmentation)
        blocked = [
            k
            for k in sizes
            if detail["jobs_fit_now"][str(k)] == 0 and detail["jobs_fit_packed"][str(k)] > 0
        ]
        if blocked:
            pending_blocked = [k for k in blocked if k in pending_sizes]
            findings.append(_node_finding(pool, nodes, detail, blocked, pending_blocked, at))
    free = sum(n.free_gpus for n in usable)
    ratio = min(1.0, frag / free) if free > EPS else 0.0
    open_state = ClusterState(tuple(usable), state.running, state.pending)
    gpu_finding = _gpu_finding(open_state, mix, frag, ratio, free, at)
    if gpu_finding is not None:
        findings.insert(0, gpu_finding)
    partial = [f for n in usable for f in n.gpus if EPS < f < 1.0 - EPS]
    pending_gpu = [t for t in state.pending if t.asks_gpu]
    fit_now, blocked_by = _pending_verdicts(state.nodes, usable, pending_gpu)
    summary: dict[str, Any] = {
        "nodes": len(state.nodes),
        "total_gpus": sum(len(n.gpus) for n in state.nodes),
        "free_gpus": round(free, 6),
        "whole_free_gpus": sum(n.whole_free_gpus for n in usable),
        # free capacity the scheduler cannot use now (cordoned, NotReady, untolerated taint)
        "unschedulable_nodes": len(closed),
        "unschedulable_free_gpus": round(sum(n.free_gpus for n in closed), 6),
        "unschedulable_whole_free_gpus": sum(n.whole_free_gpus for n in closed),
        "largest_placeable_job_gpus": max(
            (d["largest_placeable_job_gpus"] for d in details.values()), default=0
        ),
        "fgd_fragmented_gpus": round(frag, 6),
        "fgd_fragmentation_ratio": round(ratio, 6),
        "partially_used_gpus": len(partial),
        # free share left on GPUs that are partly taken: only fractional tasks can use it
        "stranded_gpu_capacity": round(sum(partial), 6),
        "mig_instances_total": sum(c for n in state.nodes for _, c in n.mig_total),
        "mig_instances_free": sum(c for n in usable for _, c in n.mig_free),
        "pending_tasks": len(state.pending),
        # pending GPU tasks the scheduler could start now (GPUs, CPU, memory, taints)
        "pending_gpu_tasks": len(pending_gpu),
        "pending_fit_now": fit_now,
        # why the others wait, by reason (gpuscope.analytics.placement.blockers.blocker)
        "pending_blocked_by": dict(sorted(Counter(b for b in blocked_by if b).items())),
        "job_sizes": sizes,
        "jobs_fit_now": {
            str(k): sum(d["jobs_fit_now"][str(k)] for d in details.values()) for k in sizes
        },
        "jobs_fit_packed": {
            str(k): sum(d["jobs_fit_packed"][str(k)] for d in details.values()) for k in sizes
        },
        "pools": details,
        # per node, for the dashboards' free-GPUs-per-node view (nodes with GPUs only)
        "node_free_gpus": {n.name: round(n.free_gpus, 6) for n in state.nodes if n.gpus},
        "node_whole_free_gpus": {n.name: n.whole_free_gpus for n in state.nodes if n.gpus},
        "task_mix": {
            "groups": len(mix.tasks),
            "groups_seen": mix.groups_seen,
            "tasks_seen": mix.tasks_seen,
            "coverage": round(mix.coverage, 6),
        },
    }
    log.debug("fragmentation: %s fragmented of %s free", summary["fgd_fragmented_gpus"], free)
    return Analysis(kinds=KINDS, findings=findings, summary=summary)


def summarize(
    nodes: Iterable[NodeInfo],
    pods: Iterable[PodInfo],
    at: datetime,
    *,
    settings: AnalyticsSettings | None = None,
    gpu_indices: GpuIndices | None = None,
) -> dict[str, Any]:
    """The fragmentation summary of one inventory snapshot (nodes and pods valid at ``at``),
    exactly as the scheduled detector computes it: the entry for callers that walk the
    inventory history (the weekly report) and need one figure per state."""
    state = state_from_records(nodes, pods, gpu_indices)
    return analyze_fragmentation(state, at=at, settings=settings or AnalyticsSettings()).summary

"""Allocation state of the cluster per GPU and per node, as placement questions need it.

The records are frozen snapshots: a node's GPUs as the free share of each (1.0 free, 0.0
fully taken), free MIG instances by profile, free CPU, memory and ephemeral storage, its
hard taints and whether it takes pods at all; the tasks that run (the observed workload)
and the tasks that wait (the demand), each with what it asks for. They are built from the
collector's inventory records (:class:`~gpuscope.collector.cluster.inventory_records.NodeInfo` /
:class:`~gpuscope.collector.cluster.inventory_records.PodInfo`), whether those come from ``kubectl
get -o json`` files or from the store's inventory rows, through one function, so both paths give the
same state.

What the scheduler counts, the model counts: a node's free CPU, memory and ephemeral
storage are its allocatable less the requests of every pod placed on it that is not
finished (DaemonSets and system pods included: they hold what they request). A node takes
a task only if it is Ready and every ``NoSchedule``/``NoExecute`` taint on it is tolerated
by the task (:func:`fits`); a cordon counts as the ``node.kubernetes.io/unschedulable``
taint, as the scheduler treats it, so only pods that tolerate it (DaemonSets, or the pod
the consolidation executor steers onto the node it reserved) may land there. Memory and
ephemeral storage are checked only where the node reports them (a total of 0 means
unknown, as in the Alibaba trace, whose simulator ignores memory); CPU always.

Which GPU of its node a pod holds is read from the scheduler's GPU groups and reservation
pods (:mod:`gpuscope.analytics.placement.allocation_sharing`), else reconstructed by
:mod:`gpuscope.analytics.placement.allocation_gpus` where the agents do not report it (its docstring
explains the model). Node selectors and required node affinity on any label are matched by
:mod:`gpuscope.collector.cluster.node_selection`; MIG pods ask instances by profile (``Task.mig``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuscope.analytics.placement.allocation_gpus import EPS
from gpuscope.analytics.placement.allocation_sharing import Demand, is_reservation, place_node
from gpuscope.collector.cluster.inventory_records import DEFAULT_POOL, NodeInfo, PodInfo
from gpuscope.collector.cluster.node_selection import matches
from gpuscope.collector.cluster.scheduling_rules import tolerates

log = logging.getLogger(__name__)

__all__ = ["EPS", "ClusterState", "GpuSlot", "NodeState", "Task", "fits", "state_from_records"]

_ACTIVE_PHASES = frozenset({"Pending", "Running", "Unknown"})
#: The taint a cordon (``spec.unschedulable``) amounts to for the scheduler.
CORDON_TAINT = "node.kubernetes.io/unschedulable:NoSchedule"


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One GPU's allocation: its free share (0..1), or free slices of a MIG-split GPU."""

    free: float
    mig_free_slices: int | None = None

    @property
    def partially_used(self) -> bool:
        return EPS < self.free < 1.0 - EPS


@dataclass(frozen=True, slots=True)
class Task:
    """What one pod (task) asks for: the unit FGD reasons about.

    ``gpu_share`` is per GPU: 1.0 for whole GPUs, 0..1 for a fraction, 0 for CPU-only tasks
    (``gpu_count`` 0). ``gpu_models`` empty means any model; ``gpu_spec`` is the constraint
    as written (``V100M16|V100M32|V100M32``), which the FGD simulator groups task types by
    (so a duplicated model makes a distinct type there, and here). ``name`` identifies a
    pending pod in evidence; it is not part of the task's group in the task mix.
    """

    cpu_milli: int = 0
    gpu_count: int = 0
    gpu_share: float = 0.0
    gpu_models: frozenset[str] = frozenset()
    name: str = ""
    memory_mib: int = 0
    ephemeral_mib: int = 0
    gpu_spec: str = ""
    #: Tolerations of hard taints (``key|operator|value|effect``).
    tolerations: frozenset[str] = frozenset()
    #: MIG instances asked for, by profile (``(("1g.10gb", 1),)``); such a task asks no
    #: GPU share (``gpu_count`` 0) and fits only a node offering the profile.
    mig: tuple[tuple[str, int], ...] = ()
    #: Hard node constraints on labels (:mod:`gpuscope.collector.cluster.node_selection`).
    node_terms: tuple[str, ...] = ()

    @property
    def gpus(self) -> float:
        return self.gpu_count * self.gpu_share

    @property
    def whole(self) -> bool:
        """Asks for whole GPUs (the case node fragmentation is about)."""
        return self.gpu_count > 0 and self.gpu_share >= 1.0 - EPS

    @property
    def asks_gpu(self) -> bool:
        """Asks for GPU share or MIG instances: a task the GPU scheduler must place."""
        return self.gpu_count > 0 or bool(self.mig)

    @property
    def spec_text(self) -> str:
        """The model constraint as the FGD simulator keys it."""
        return self.gpu_spec or "|".join(sorted(self.gpu_models))


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node's free resources; ``gpus`` holds the free share of each GPU.

    ``schedulable``: Ready. ``taints``: its hard taints (``key=value:effect``), a cordon
    included as :data:`CORDON_TAINT`; a task must tolerate each (:func:`fits`).
    """

    name: str
    pool: str = DEFAULT_POOL
    gpu_model: str = ""
    gpus: tuple[float, ...] = ()
    cpu_milli_free: int = 0
    cpu_milli_total: int = 0
    #: Free / total MIG instances by profile, for MIG-split nodes (not in ``gpus``).
    mig_free: tuple[tuple[str, int], ...] = ()
    mig_total: tuple[tuple[str, int], ...] = ()
    schedulable: bool = True
    #: Free / allocatable memory and ephemeral storage in MiB (total 0: not reported).
    memory_mib_free: int = 0
    memory_mib_total: int = 0
    ephemeral_mib_free: int = 0
    ephemeral_mib_total: int = 0
    taints: frozenset[str] = frozenset()
    #: Its labels (``nodeSelector`` and required node affinity match on them).
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def slots(self) -> tuple[GpuSlot, ...]:
        return tuple(GpuSlot(free) for free in self.gpus)

    @property
    def free_gpus(self) -> float:
        return sum(self.gpus)

    @property
    def whole_free_gpus(self) -> int:
        """Fully free GPUs: all a whole-GPU job can use."""
        return sum(1 for free in self.gpus if free >= 1.0 - EPS)


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Nodes with their free resources, the tasks running (the observed workload) and the
    tasks pending (the demand)."""

    nodes: tuple[NodeState, ...] = ()
    running: tuple[Task, ...] = ()
    pending: tuple[Task, ...] = field(default_factory=tuple)

    @property
    def tasks(self) -> tuple[Task, ...]:
        return self.running + self.pending


def selects(node: NodeState, task: Task) -> bool:
    """Whether the task's GPU-model pin and node selector / required affinity allow the
    node (Ready and taints aside)."""
    if task.gpu_models and node.gpu_model not in task.gpu_models:
        return False
    return not task.node_terms or matches(task.node_terms, dict(node.labels), node.name)


def admits(node: NodeState, task: Task) -> bool:
    """Whether the node takes the task at all: Ready, every hard taint (a cordon included)
    tolerated, the GPU model and labels allowed (resources aside)."""
    if not node.schedulable or not selects(node, task):
        return False
    return all(tolerates(task.tolerations, t) for t in node.taints)


def mig_room(node: NodeState, mig: Iterable[tuple[str, int]]) -> bool:
    """Whether the node has the MIG instances free."""
    free = dict(node.mig_free)
    return all(free.get(profile, 0) >= count for profile, count in mig)


def has_room(node: NodeState, cpu_milli: int, memory_mib: int = 0, ephemeral_mib: int = 0) -> bool:
    """Whether the node's free CPU, memory and storage hold these requests (memory and
    storage only where the node reports them)."""
    if cpu_milli > node.cpu_milli_free:
        return False
    if node.memory_mib_total and memory_mib > node.memory_mib_free:
        return False
    return not (node.ephemeral_mib_total and ephemeral_mib > node.ephemeral_mib_free)


def fits(node: NodeState, task: Task) -> bool:
    """Whether the scheduler could start the GPU task on the node now (admission, CPU,
    memory, storage, its MIG instances, and ``gpu_count`` GPUs each with ``gpu_share``
    free)."""
    if not task.asks_gpu or not admits(node, task):
        return False
    if not has_room(node, task.cpu_milli, task.memory_mib, task.ephemeral_mib):
        return False
    if not mig_room(node, task.mig):
        return False
    return sum(1 for f in node.gpus if f >= task.gpu_share - EPS) >= task.gpu_count


def open_nodes(state: ClusterState) -> set[str]:
    """Nodes some work could be placed on now: Ready, and each hard taint (a cordon
    included) tolerated by at least one task of the workload (a taint nothing tolerates
    closes the node to everyone)."""
    tolerations = [t.tolerations for t in state.tasks]
    return {
        n.name
        for n in state.nodes
        if n.schedulable and all(any(tolerates(tl, t) for tl in tolerations) for t in n.taints)
    }


def task_of(pod: PodInfo) -> Task:
    """The task a pod is: whole GPUs, a fraction per device, MIG instances (``mig``, no GPU
    share), or none of these (CPU-only)."""
    name = f"{pod.namespace}/{pod.name}"
    common: dict[str, Any] = {
        "name": name,
        "cpu_milli": pod.cpu_milli,
        "memory_mib": pod.memory_mib,
        "ephemeral_mib": pod.ephemeral_mib,
        "tolerations": frozenset(pod.tolerations),
        "node_terms": tuple(pod.node_selector_terms),
    }
    mig = tuple(sorted((p, c) for p, c in pod.mig.items() if c > 0))
    if pod.gpu_spec and (pod.gpu_request > 0 or pod.gpu_fraction or mig):
        common["gpu_spec"] = pod.gpu_spec
        common["gpu_models"] = frozenset(m for m in pod.gpu_spec.split("|") if m)
    if pod.gpu_request > 0:
        return Task(gpu_count=pod.gpu_request, gpu_share=1.0, mig=mig, **common)
    if pod.gpu_fraction:
        share = min(1.0, max(0.0, pod.gpu_fraction))
        return Task(gpu_count=max(1, pod.fraction_devices), gpu_share=share, mig=mig, **common)
    return Task(mig=mig, **common)


def _counts_as_workload(pod: PodInfo) -> bool:
    """CPU-only DaemonSet and system pods would swamp the mix on a real cluster (one per
    node) without being tasks anyone schedules onto GPU nodes; they are left out."""
    return pod.owner_kind != "DaemonSet" and not pod.protected


#: GPU indices a pod holds on its node, by ``namespace/name``, as the agents report them.
GpuIndices = Mapping[str, Sequence[int]]


def gpus_on(
    size: int,
    pods: Iterable[PodInfo],
    node: str,
    known: GpuIndices | None = None,
    task_for: Callable[[PodInfo], Task] | None = None,
) -> tuple[list[float], dict[str, tuple[int, ...]]]:
    """The free share of each GPU of ``node`` and the GPUs each of its not-finished pods
    holds (MIG pods aside): the schedulers' GPU groups first
    (:mod:`gpuscope.analytics.placement.allocation_sharing`), then the reconstruction.
    ``task_for``: :func:`task_of`, or a memo of it (:class:`StateReuse`)."""
    demands = []
    for pod in pods:
        if pod.node != node or pod.phase not in _ACTIVE_PHASES:
            continue
        task = task_of(pod) if task_for is None else task_for(pod)
        if task.gpu_count:
            key = f"{pod.namespace}/{pod.name}"
            demands.append(Demand(key, task.gpu_count, task.gpu_share, pod))
    return place_node(size, demands, known)


@dataclass
class StateReuse:
    """What :func:`state_from_records` built from the same record objects, kept between
    its calls (``reuse``). Node states are keyed by the identity of the node's record and
    its pods' and by the GPU indices those pods hold, tasks by the identity of the pod's
    record; the records are kept with what was built from them, so that an identity is
    never reused while its entry lives."""

    nodes: dict[tuple[object, ...], tuple[NodeState, tuple[object, ...]]] = field(
        default_factory=dict
    )
    tasks: dict[int, tuple[Task, PodInfo]] = field(default_factory=dict)

    def task(self, pod: PodInfo) -> Task:
        hit = self.tasks.get(id(pod))
        if hit is None:
            hit = self.tasks[id(pod)] = (task_of(pod), pod)
        return hit[0]


def state_from_records(
    nodes: Iterable[NodeInfo],
    pods: Iterable[PodInfo],
    gpu_indices: GpuIndices | None = None,
    *,
    reuse: StateReuse | None = None,
) -> ClusterState:
    """The state from inventory records: placed pods consume their node's GPUs, CPU, memory
    and storage; pods with no node and phase Pending are the demand. Pods in
    ``gpu_indices`` take exactly those GPUs (the others:
    :mod:`gpuscope.analytics.placement.allocation_gpus`).

    ``reuse``: a cache shared by calls over states that mostly repeat (the weekly report's
    states, one per inventory change, read through memoised record parsers): a node whose
    record, pods and their GPU indices are the same objects as before is not rebuilt."""
    known = gpu_indices or {}
    node_list = sorted(nodes, key=lambda n: n.name)
    names = {n.name for n in node_list}
    by_node: dict[str, list[PodInfo]] = {n.name: [] for n in node_list}
    running: list[tuple[str, Task]] = []
    pending: list[tuple[str, Task]] = []
    for pod in pods:
        if pod.phase not in _ACTIVE_PHASES:
            continue
        task = task_of(pod) if reuse is None else reuse.task(pod)
        key = f"{pod.namespace}/{pod.name}"
        if pod.node is None:
            if pod.phase == "Pending" and not is_reservation(pod):
                pending.append((key, task))
            continue
        if pod.node not in names:
            log.debug("pod %s on unknown node %s left out", key, pod.node)
            continue
        by_node[pod.node].append(pod)
        if is_reservation(pod):  # the scheduler's placeholder, not a task
            continue
        if task.asks_gpu or _counts_as_workload(pod):
            running.append((key, task))
    states = tuple(_reused_node_state(n, by_node[n.name], known, reuse) for n in node_list)
    return ClusterState(
        nodes=states,
        running=tuple(t for _, t in sorted(running, key=lambda kt: kt[0])),
        pending=tuple(t for _, t in sorted(pending, key=lambda kt: kt[0])),
    )


def _reused_node_state(
    node: NodeInfo, pods: list[PodInfo], known: GpuIndices, reuse: StateReuse | None
) -> NodeState:
    if reuse is None:
        return _node_state(node, pods, known)
    held = tuple(tuple(known.get(f"{p.namespace}/{p.name}", ())) for p in pods)
    key = (id(node), tuple(map(id, pods)), held)
    hit = reuse.nodes.get(key)
    if hit is None:
        built = _node_state(node, pods, known, reuse.task)
        hit = reuse.nodes[key] = (built, (node, *pods))
    return hit[0]


def _node_state(
    node: NodeInfo,
    pods: list[PodInfo],
    known: GpuIndices,
    task_for: Callable[[PodInfo], Task] | None = None,
) -> NodeState:
    free, _ = gpus_on(node.allocatable_gpus, pods, node.name, known, task_for)
    mig_used: dict[str, int] = {}
    for pod in pods:
        for profile, count in pod.mig.items():
            mig_used[profile] = mig_used.get(profile, 0) + count
    cpu = sum(p.cpu_milli for p in pods)
    memory = sum(p.memory_mib for p in pods)
    storage = sum(p.ephemeral_mib for p in pods)
    return NodeState(
        name=node.name,
        pool=node.pool or DEFAULT_POOL,
        gpu_model=node.gpu_model,
        gpus=tuple(free),
        cpu_milli_free=max(0, node.cpu_milli - cpu),
        cpu_milli_total=node.cpu_milli,
        mig_free=tuple(sorted((p, max(0, c - mig_used.get(p, 0))) for p, c in node.mig.items())),
        mig_total=tuple(sorted(node.mig.items())),
        # a cordon is the scheduler's ``node.kubernetes.io/unschedulable`` taint: closed to
        # every pod but those that tolerate it (as the consolidation executor's target pod)
        schedulable=node.ready,
        memory_mib_free=max(0, node.memory_mib - memory),
        memory_mib_total=node.memory_mib,
        ephemeral_mib_free=max(0, node.ephemeral_mib - storage),
        ephemeral_mib_total=node.ephemeral_mib,
        taints=frozenset(node.taints) | ({CORDON_TAINT} if node.unschedulable else set()),
        labels=tuple(sorted(node.labels.items())),
    )


def blocker(nodes: Sequence[NodeState], task: Task) -> str:
    """Why the task cannot start now: :func:`gpuscope.analytics.placement.blockers.blocker` (kept
    here for callers that import it from the allocation model, where it used to live)."""
    from gpuscope.analytics.placement.blockers import blocker as why

    return why(nodes, task)

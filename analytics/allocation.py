"""Allocation state of the cluster per GPU and per node, as fragmentation analysis needs it.

The records are frozen snapshots: a node's GPUs as the free share of each (1.0 free, 0.0
fully taken), free MIG instances by profile, free CPU; the tasks that run (the observed
workload) and the tasks that wait (the demand). They are built from the collector's
inventory records (:class:`~collector.inventory_records.NodeInfo` /
:class:`~collector.inventory_records.PodInfo`), whether those come from ``kubectl get -o
json`` files or from the store's current inventory rows, through one helper, so both paths
give the same state.

Placement of running pods: Kubernetes says on which *node* a pod runs but not on which of
its GPUs. Whole-GPU pods take fully free GPUs (lowest index first); fractional pods are
then placed largest first, best-fit, onto the GPU whose free share is the smallest that
still holds them, so partially used GPUs fill up before a fresh one is broken. That is what
GPU-sharing schedulers (KAI/Run:ai bin packing, the FGD simulator's best-fit) do, so the
reconstruction is the likely real one and never invents fragmentation the scheduler would
not have made. It can under-state fragmentation where the scheduler spread fractions; where
the agents know a pod's GPU indices (pod-resources, ``gpu_indices`` below), those pods are
placed exactly and only the rest are reconstructed. A node whose pods ask for more than it
has is clamped at 0 free.

CPU: inventory records carry no CPU requests of pods, so from kubectl/inventory tasks ask
0 CPU and nodes keep their allocatable CPU free; the Alibaba trace (:mod:`analytics.trace`)
has CPU on both sides and uses it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import duckdb

from collector.inventory_records import (
    DEFAULT_POOL,
    NodeInfo,
    PodInfo,
    node_from_json,
    pod_from_json,
)
from gpuscope.records import WorkloadKind
from gpuscope.settings import WorkloadSettings

log = logging.getLogger(__name__)

#: Shares closer than this are equal (fractions like 1/3 do not add up exactly).
EPS = 1e-9
_ACTIVE_PHASES = frozenset({"Pending", "Running", "Unknown"})


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
    (``gpu_count`` 0). ``gpu_models`` empty means any model. ``name`` identifies a pending
    pod in evidence; it is not part of the task's group in the task mix.
    """

    cpu_milli: int = 0
    gpu_count: int = 0
    gpu_share: float = 0.0
    gpu_models: frozenset[str] = frozenset()
    name: str = ""

    @property
    def gpus(self) -> float:
        return self.gpu_count * self.gpu_share

    @property
    def whole(self) -> bool:
        """Asks for whole GPUs (the case node fragmentation is about)."""
        return self.gpu_count > 0 and self.gpu_share >= 1.0 - EPS


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node's free resources; ``gpus`` holds the free share of each GPU."""

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


def task_of(pod: PodInfo) -> Task | None:
    """The task a pod is, or None for MIG pods (they take a MIG slice, not GPU share)."""
    name = f"{pod.namespace}/{pod.name}"
    if pod.gpu_request > 0:
        return Task(gpu_count=pod.gpu_request, gpu_share=1.0, name=name)
    if pod.gpu_fraction:
        share = min(1.0, max(0.0, pod.gpu_fraction))
        return Task(gpu_count=max(1, pod.fraction_devices), gpu_share=share, name=name)
    if pod.mig:
        return None
    return Task(name=name)


def _place(free: list[float], task: Task) -> None:
    """Take a placed task's GPUs from its node's free list (module docstring: how)."""
    if task.whole:
        need = task.gpu_count
        for i, f in enumerate(free):
            if need and f >= 1.0 - EPS:
                free[i], need = 0.0, need - 1
        for i in sorted(range(len(free)), key=lambda j: -free[j])[:need]:
            free[i] = 0.0  # over-committed node: clamp rather than go negative
        return
    for _ in range(task.gpu_count):
        fits = [i for i, f in enumerate(free) if f >= task.gpu_share - EPS]
        if fits:
            i = min(fits, key=lambda j: (free[j], j))
        elif free:
            i = max(range(len(free)), key=lambda j: free[j])
        else:
            return
        free[i] = max(0.0, free[i] - task.gpu_share)


def _counts_as_workload(pod: PodInfo) -> bool:
    """CPU-only DaemonSet and system pods would swamp the mix on a real cluster (one per
    node) without being tasks anyone schedules onto GPU nodes; they are left out."""
    return pod.owner_kind != "DaemonSet" and not pod.protected


#: GPU indices a pod holds on its node, by ``namespace/name``, as the agents report them.
GpuIndices = Mapping[str, Sequence[int]]


def _place_known(free: list[float], task: Task, indices: Sequence[int]) -> None:
    for i in indices:
        if 0 <= i < len(free):
            free[i] = max(0.0, free[i] - task.gpu_share)


def state_from_records(
    nodes: Iterable[NodeInfo], pods: Iterable[PodInfo], gpu_indices: GpuIndices | None = None
) -> ClusterState:
    """The state from inventory records: placed pods consume their node's GPUs, pods with no
    node and phase Pending are the demand. Pods in ``gpu_indices`` take exactly those GPUs."""
    known = gpu_indices or {}
    node_list = sorted(nodes, key=lambda n: n.name)
    free: dict[str, list[float]] = {n.name: [1.0] * n.allocatable_gpus for n in node_list}
    mig_used: dict[str, dict[str, int]] = {n.name: {} for n in node_list}
    running: list[tuple[str, Task]] = []
    pending: list[tuple[str, Task]] = []
    placed: list[tuple[str, Task]] = []
    for pod in pods:
        if pod.phase not in _ACTIVE_PHASES:
            continue
        task = task_of(pod)
        key = f"{pod.namespace}/{pod.name}"
        if pod.node is None:
            if pod.phase == "Pending" and task is not None:
                pending.append((key, task))
            continue
        if pod.node not in free:
            log.debug("pod %s on unknown node %s left out", key, pod.node)
            continue
        for profile, count in pod.mig.items():
            used = mig_used[pod.node]
            used[profile] = used.get(profile, 0) + count
        if task is None:
            continue
        if known.get(key):
            _place_known(free[pod.node], task, known[key])
        else:
            placed.append((pod.node, task))
        if task.gpu_count or _counts_as_workload(pod):
            running.append((key, task))
    # whole GPUs first, then fractions largest first: best-fit packs them as a scheduler would
    placed.sort(key=lambda nt: (not nt[1].whole, -nt[1].gpu_share, nt[1].name))
    for node_name, task in placed:
        _place(free[node_name], task)
    states = tuple(
        NodeState(
            name=n.name,
            pool=n.pool or DEFAULT_POOL,
            gpu_model=n.gpu_model,
            gpus=tuple(round(f, 9) for f in free[n.name]),
            cpu_milli_free=n.cpu_milli,
            cpu_milli_total=n.cpu_milli,
            mig_free=tuple(
                sorted((p, max(0, c - mig_used[n.name].get(p, 0))) for p, c in n.mig.items())
            ),
            mig_total=tuple(sorted(n.mig.items())),
            schedulable=n.ready and not n.unschedulable,
        )
        for n in node_list
    )
    return ClusterState(
        nodes=states,
        running=tuple(t for _, t in sorted(running, key=lambda kt: kt[0])),
        pending=tuple(t for _, t in sorted(pending, key=lambda kt: kt[0])),
    )


def records_from_kubectl(
    nodes: Mapping[str, Any], pods: Mapping[str, Any], workloads: WorkloadSettings | None = None
) -> tuple[list[NodeInfo], list[PodInfo]]:
    """Node and pod records from ``kubectl get nodes/pods -o json`` output."""
    node_infos = [node_from_json(obj) for obj in nodes.get("items") or ()]
    by_name = {n.name: n for n in node_infos}
    pod_infos = [
        pod_from_json(
            obj,
            node=by_name.get((obj.get("spec") or {}).get("nodeName") or ""),
            settings=workloads,
        )
        for obj in pods.get("items") or ()
    ]
    return node_infos, pod_infos


def state_from_kubectl(
    nodes: Mapping[str, Any],
    pods: Mapping[str, Any],
    workloads: WorkloadSettings | None = None,
    gpu_indices: GpuIndices | None = None,
) -> ClusterState:
    """The state from ``kubectl get nodes -o json`` and ``kubectl get pods -A -o json``."""
    node_infos, pod_infos = records_from_kubectl(nodes, pods, workloads)
    return state_from_records(node_infos, pod_infos, gpu_indices)


def _record(cls: type[Any], data: Mapping[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def records_from_inventory(
    con: duckdb.DuckDBPyConnection,
) -> tuple[list[NodeInfo], list[PodInfo]]:
    """The store's current inventory rows (``valid_to IS NULL``) as records."""
    node_rows = con.execute(
        "SELECT record FROM inventory_nodes WHERE valid_to IS NULL ORDER BY key"
    ).fetchall()
    pod_rows = con.execute(
        "SELECT record FROM inventory_pods WHERE valid_to IS NULL ORDER BY key"
    ).fetchall()
    nodes = [_record(NodeInfo, json.loads(r[0])) for r in node_rows]
    pods = []
    for (text,) in pod_rows:
        data = json.loads(text)
        kind = data.get("kind", WorkloadKind.UNKNOWN.value)
        data["kind"] = (
            WorkloadKind(kind) if kind in WorkloadKind._value2member_map_ else WorkloadKind.UNKNOWN
        )
        pods.append(_record(PodInfo, data))
    return nodes, pods


def state_from_inventory(
    con: duckdb.DuckDBPyConnection, gpu_indices: GpuIndices | None = None
) -> ClusterState:
    """The state from the store's current inventory rows (``valid_to IS NULL``)."""
    nodes, pods = records_from_inventory(con)
    return state_from_records(nodes, pods, gpu_indices)

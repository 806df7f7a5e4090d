"""The replay's inputs: a node inventory and pod events, built from a trace or kubectl files.

A :class:`Request` is what the scheduler sees of a pod: the allocation model's
:class:`~gpuscope.analytics.placement.allocation.Task` (GPUs, fractional share, CPU, memory, model
constraint, tolerations) plus the MIG instances it asks for, which the task does not
carry. A :class:`PodEvent` is one pod's arrival and how long it runs once started
(``None``: until the end of the replay), so that a pod that waits in the what-if still
runs its real duration, only later.

The trace input follows the FGD paper's arrival inflation: tasks are drawn with
replacement (seeded) until their cumulative GPU request reaches a share of the cluster's
GPU capacity (1.3 in the paper), and arrive one per time step, never leaving.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuscope.analytics.placement.allocation import NodeState, Task, task_of
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo

#: Milli-GPU per GPU: shares are replayed in integer milli-GPU, as the FGD simulator does,
#: so fractions never drift (0.3 + 0.3 + 0.4 is exactly one GPU).
MILLI = 1000


@dataclass(frozen=True, slots=True)
class Request:
    """What one pod asks the scheduler for."""

    task: Task
    #: MIG instances by profile (a MIG pod has no GPU share in ``task``).
    mig: tuple[tuple[str, int], ...] = ()

    @property
    def share_milli(self) -> int:
        return round(self.task.gpu_share * MILLI) if self.task.gpu_count else 0

    @property
    def gpu_milli(self) -> int:
        """All the GPU it takes, in milli-GPU."""
        return self.task.gpu_count * self.share_milli


@dataclass(frozen=True, slots=True)
class PodEvent:
    """One pod: when it arrives and how long it runs once started (None: to the end)."""

    key: str
    request: Request
    arrive: float
    duration: float | None = None
    #: Its priority (``spec.priority``): the queue takes higher priorities first, and a pod
    #: that fits nowhere may preempt pods of a lower one (kube-scheduler's DefaultPreemption).
    priority: int = 0
    #: Whether it may preempt (its ``preemptionPolicy`` is not ``Never``).
    preempts: bool = True
    #: The node it really ran on, for a pod already running where a replayed window
    #: starts: the replay starts from the window's real state, so it is placed there.
    node: str | None = None


@dataclass(frozen=True, slots=True)
class Inventory:
    """The nodes as they are when empty (their totals are their free resources)."""

    nodes: tuple[NodeState, ...]

    @property
    def gpu_capacity(self) -> int:
        """Whole GPUs on nodes that take work (MIG-split GPUs are not in ``gpus``)."""
        return sum(len(n.gpus) for n in self.nodes if n.schedulable)


def empty_nodes(nodes: Iterable[NodeInfo]) -> tuple[NodeState, ...]:
    """Inventory records as empty nodes: every GPU, CPU and MiB free (taints kept)."""
    from gpuscope.analytics.placement.allocation import state_from_records

    return state_from_records(list(nodes), []).nodes


def request_of(pod: PodInfo) -> Request:
    """The request of an inventory pod (MIG pods: their instances, no GPU share)."""
    return Request(task=task_of(pod), mig=tuple(sorted(pod.mig.items())))


def inflate(tasks: Sequence[Task], capacity_gpus: float, share: float, seed: int) -> list[Task]:
    """Tasks drawn with replacement until their GPU requests reach ``share`` of capacity
    (the FGD paper's arrival inflation); [] when no task asks for a GPU."""
    if not any(t.gpus > 0 for t in tasks):
        return []
    rng = random.Random(seed)  # noqa: S311 (seeded sampling, not a secret)
    target = share * capacity_gpus
    drawn: list[Task] = []
    total = 0.0
    while total < target - 1e-9:
        task = tasks[rng.randrange(len(tasks))]
        drawn.append(task)
        total += task.gpus
    return drawn


def arrivals(tasks: Sequence[Task]) -> list[PodEvent]:
    """Tasks as arrivals one time step apart that never leave (the paper's experiment)."""
    return [
        PodEvent(key=f"{i}:{t.name}", request=Request(task=t), arrive=float(i))
        for i, t in enumerate(tasks)
    ]


def snapshot_events(pods: Iterable[PodInfo]) -> list[PodEvent]:
    """Pods of a kubectl snapshot as arrivals in start/creation order, none leaving: the
    same pods on an empty cluster, placed by the policy instead of the real scheduler.
    Finished pods are left out."""
    live = [p for p in pods if p.phase in ("Pending", "Running", "Unknown")]
    live.sort(key=lambda p: (p.start_time if p.start_time is not None else float("inf"), p.name))
    return [
        PodEvent(key=f"{p.namespace}/{p.name}", request=request_of(p), arrive=float(i))
        for i, p in enumerate(live)
    ]

"""The consolidation planner's records and where they come from.

:class:`Placed` is a pod on a node with the GPUs it holds and whether it may move;
:class:`Goal` is what a plan must make possible; :class:`Move` and :class:`Plan` are what the
planner returns (:mod:`gpuscope.analytics.consolidation.plan` explains the goals and the plan).

Which pods may move (:func:`placement_from_state`, docs/design.md Policies): preemptible batch
or training pods only, with GPUs, MIG instances or neither (a CPU-only pod holding the CPU
or memory a job needs is as much in its way as a GPU pod). Never interactive pods, never
inference or unclassified ones, never a DaemonSet's pod or a scheduler's GPU reservation
pod, never a pod of a protected namespace or one marked ``gpuscope.io/protect``, never a
pod whose PodDisruptionBudget has no disruptions left (``pdb_blocked``). A pod is moved at
most once per plan. A pod whose one budget allows some disruptions carries the budget's key
and ``status.disruptionsAllowed`` (``pdb_spend``): the Eviction API decrements that count
on every eviction it grants (kube-apiserver's ``checkAndDecrement``), so a plan evicts at
most that many pods of the budget in all, wherever they run.

Goals from pending pods (:func:`goals_from_pending`) carry everything the fragmentation
detector checks: the GPU-model pin, the node selector and required node affinity, the
tolerations, CPU, memory and storage, and MIG instances by profile.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from gpuscope.analytics.placement.allocation import (
    _ACTIVE_PHASES,
    ClusterState,
    GpuIndices,
    gpus_on,
    task_of,
)
from gpuscope.analytics.placement.allocation_sharing import is_reservation
from gpuscope.collector.cluster.dra_apply import STANDALONE_CLAIMS_ANNOTATION, claim_holder
from gpuscope.collector.cluster.inventory_records import PodInfo
from gpuscope.core.records import WorkloadKind

log = logging.getLogger(__name__)

GoalKind = Literal["pending_job", "free_nodes", "free_gpus"]
#: Annotation with the time of a pod's last checkpoint (RFC 3339 or Unix seconds).
CHECKPOINT_ANNOTATION = "gpuscope.io/last-checkpoint"
#: Workload kinds that may ever be moved.
MOVABLE_KINDS = frozenset({WorkloadKind.BATCH, WorkloadKind.TRAINING})


@dataclass(frozen=True, slots=True)
class Placed:
    """A pod on a node: the GPUs it holds (indices), its share of each (1.0 whole)."""

    namespace: str
    pod: str
    node: str
    gpus: tuple[int, ...]
    share: float = 1.0
    movable: bool = False
    #: Why it may not move ("" when movable).
    reason_fixed: str = ""
    #: GPU-hours of work an eviction loses (since the last checkpoint or the start).
    gpu_hours_lost: float = 0.0
    #: What it requests besides GPUs, freed on its node when it is evicted and needed
    #: wherever it is re-placed.
    cpu_milli: int = 0
    memory_mib: int = 0
    ephemeral_mib: int = 0
    tolerations: frozenset[str] = frozenset()
    #: MIG instances it holds by profile, freed when it is evicted.
    mig: tuple[tuple[str, int], ...] = ()
    #: Where it may be re-placed: GPU models and node selector terms (empty: anywhere).
    gpu_models: frozenset[str] = frozenset()
    node_terms: tuple[str, ...] = ()
    #: The PodDisruptionBudget (``namespace/name``) whose disruptions its eviction spends,
    #: "" when none asks; and how many evictions that budget allows across the whole plan.
    budget: str = ""
    budget_allows: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}"


@dataclass(frozen=True, slots=True)
class Goal:
    """What the plan must make possible (module docstring)."""

    kind: GoalKind
    gpus: int = 1
    share: float = 1.0
    count: int = 1
    label: str = ""
    #: GPU models the goal may use (empty: any).
    gpu_models: frozenset[str] = frozenset()
    #: What each unit of a pending job asks for besides GPUs, and its tolerations.
    cpu_milli: int = 0
    memory_mib: int = 0
    ephemeral_mib: int = 0
    tolerations: frozenset[str] = frozenset()
    #: Node selector and required node affinity of a pending job
    #: (:mod:`gpuscope.collector.cluster.node_selection`).
    node_terms: tuple[str, ...] = ()
    #: MIG instances each unit asks for, by profile (a MIG job: ``gpus`` 0).
    mig: tuple[tuple[str, int], ...] = ()

    @property
    def name(self) -> str:
        return self.label or f"{self.kind}:{self.gpus}x{self.share:g}x{self.count}"


@dataclass(frozen=True, slots=True)
class Move:
    """One eviction; ``to_node`` "" when the pod has nowhere to go and waits as pending."""

    namespace: str
    pod: str
    from_node: str
    to_node: str
    from_gpus: tuple[int, ...]
    to_gpus: tuple[int, ...]
    gpu_hours_lost: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "pod": self.pod,
            "from_node": self.from_node,
            "to_node": self.to_node,
            "from_gpus": list(self.from_gpus),
            "to_gpus": list(self.to_gpus),
            "gpu_hours_lost": round(self.gpu_hours_lost, 6),
        }


@dataclass(frozen=True, slots=True)
class Plan:
    moves: list[Move] = field(default_factory=list)
    #: Every pod the plan evicts, ``namespace/pod`` (moved or sent to pending).
    evictions: list[str] = field(default_factory=list)
    #: (goal label, reason) of the goals not reached.
    unplaceable: list[tuple[str, str]] = field(default_factory=list)
    goals_met: int = 0
    #: Where each goal met was placed: (goal label, node) per unit.
    targets: list[tuple[str, str]] = field(default_factory=list)
    strategy: str = "planner"

    @property
    def gpu_hours_lost(self) -> float:
        return sum(m.gpu_hours_lost for m in self.moves)


# --- building the placement ------------------------------------------------------------


def _hours_since(pod: PodInfo, at: datetime) -> float:
    start = pod.start_time
    text = pod.annotations.get(CHECKPOINT_ANNOTATION, "")
    if text:
        try:
            start = float(text)
        except ValueError:
            try:
                start = datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
            except ValueError:
                log.debug("bad checkpoint annotation on %s/%s", pod.namespace, pod.name)
    if start is None:
        return 0.0
    return max(0.0, (at.timestamp() - start) / 3600.0)


def _fixed_reason(
    pod: PodInfo, protected: frozenset[str], pdb_blocked: frozenset[str] | set[str]
) -> str:
    if pod.terminating:
        return "terminating"
    if claim_holder(pod):
        return "allocated ResourceClaim no running pod reserves: not a pod, nothing to evict"
    if is_reservation(pod):
        return "gpu reservation"
    if pod.owner_kind == "DaemonSet":
        return "daemonset"
    if pod.kind == WorkloadKind.INTERACTIVE:
        return "interactive"
    if pod.protected:
        return "protected"
    if pod.namespace in protected:
        return "protected namespace"
    if f"{pod.namespace}/{pod.name}" in pdb_blocked:
        return "pdb exhausted"
    if pod.kind not in MOVABLE_KINDS:
        return f"kind {pod.kind.value}"
    claims = pod.annotations.get(STANDALONE_CLAIMS_ANNOTATION)
    if claims:  # DRA: a claim other pods reserve keeps its devices when this pod goes
        return f"standalone claim {claims} shared with other pods: evicting frees none"
    if not pod.preemptible:
        return "not preemptible"
    return ""


def placement_from_state(
    state: ClusterState,
    pods: Sequence[PodInfo],
    *,
    at: datetime,
    gpu_indices: GpuIndices | None = None,
    protected_namespaces: Iterable[str] = (),
    pdb_blocked: frozenset[str] | set[str] = frozenset(),
    pdb_spend: Mapping[str, tuple[str, int]] | None = None,
) -> list[Placed]:
    """The pods on each node with their GPUs, placed as
    :mod:`gpuscope.analytics.placement.allocation_gpus` does (the same reconstruction as the
    state's), and whether each may move (module docstring); ``pdb_spend`` gives the budget
    each pod's eviction spends (``namespace/pod`` -> (budget, disruptions allowed))."""
    known = gpu_indices or {}
    spend = pdb_spend or {}
    protected = frozenset(protected_namespaces)
    sizes = {n.name: len(n.gpus) for n in state.nodes}
    by_node: dict[str, list[PodInfo]] = {}
    for pod in pods:
        if pod.phase in _ACTIVE_PHASES and pod.node in sizes:
            by_node.setdefault(pod.node, []).append(pod)
    out: list[Placed] = []
    for node_name, node_pods in sorted(by_node.items()):
        _, taken = gpus_on(sizes[node_name], node_pods, node_name, known)
        for pod in node_pods:
            key = f"{pod.namespace}/{pod.name}"
            task = task_of(pod)
            if task.gpu_count and key not in taken:  # a reservation pod inside its group
                continue
            reason = _fixed_reason(pod, protected, pdb_blocked)
            idx = taken.get(key, ())
            budget, allows = spend.get(key, ("", 0))
            out.append(
                Placed(
                    namespace=pod.namespace,
                    pod=pod.name,
                    node=node_name,
                    gpus=idx,
                    share=task.gpu_share,
                    movable=not reason,
                    reason_fixed=reason,
                    gpu_hours_lost=len(idx) * task.gpu_share * _hours_since(pod, at),
                    cpu_milli=task.cpu_milli,
                    memory_mib=task.memory_mib,
                    ephemeral_mib=task.ephemeral_mib,
                    tolerations=task.tolerations,
                    mig=task.mig,
                    gpu_models=task.gpu_models,
                    node_terms=task.node_terms,
                    budget=budget,
                    budget_allows=allows,
                )
            )
    return out


def goals_from_pending(pods: Iterable[PodInfo]) -> list[Goal]:
    """One pending_job goal per pending GPU or MIG pod (not yet on a node), with its pins,
    selectors and tolerations (module docstring)."""
    goals = []
    for pod in pods:
        if pod.node is not None or pod.phase != "Pending" or pod.terminating:
            continue
        task = task_of(pod)
        if not task.asks_gpu or is_reservation(pod):
            continue
        goals.append(
            Goal(
                "pending_job",
                gpus=task.gpu_count,
                share=task.gpu_share,
                label=f"{pod.namespace}/{pod.name}",
                cpu_milli=task.cpu_milli,
                memory_mib=task.memory_mib,
                ephemeral_mib=task.ephemeral_mib,
                tolerations=task.tolerations,
                gpu_models=task.gpu_models,
                node_terms=task.node_terms,
                mig=task.mig,
            )
        )
    return sorted(goals, key=lambda g: g.label)


def placed_by_key(placed: Sequence[Placed]) -> Mapping[str, Placed]:
    """Placed pods by ``namespace/pod``."""
    return {p.key: p for p in placed}

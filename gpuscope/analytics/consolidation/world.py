"""The planner's working state: free shares and pods per node while a plan is made.

Shared by the planner, the baselines (:mod:`gpuscope.analytics.consolidation.search`) and the exact
solver (:mod:`gpuscope.analytics.consolidation.exact`), so that all three read one cluster the same
way: goals cut into units (one node's worth of a goal each), nodes indexed by a score that
is kept up to date as the plan changes them, and evicted pods placed best fit at the end.

Besides GPU shares the world keeps each node's free CPU, memory and ephemeral storage
(memory and storage only where the node reports them, as
:func:`gpuscope.analytics.placement.allocation.has_room`) and free MIG instances by profile: a unit
lands only where its requests fit, an eviction frees the pod's requests and instances, and
an evicted pod is re-placed only where its own requests fit and its tolerations, GPU-model
pin and node selector allow. Every room test goes through :meth:`World.room_after`; every
"may it go there" test through :meth:`World.admits` (the allocation model's
:func:`gpuscope.analytics.placement.allocation.admits`, so the planner and the fragmentation
detector take the same constraints). Nodes without GPUs are in the world too: CPU-only pods may be
evicted from GPU nodes and re-placed on them.

PodDisruptionBudgets are spent across the plan: the world keeps how many evictions each
budget still allows (``status.disruptionsAllowed`` less the pods of it evicted so far, as
the Eviction API decrements it), and every eviction set a chooser considers is tested with
:meth:`World.within_budgets`, so no plan asks for an eviction the API server would refuse
with a 429. An eviction that spends a budget re-scores every node holding pods of it.

Nodes ranked for a unit are in gpuscope/analytics/consolidation/ranking.py; evicted pods
placed again in gpuscope/analytics/consolidation/relocation.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuscope.analytics.consolidation.model import Goal, Placed
from gpuscope.analytics.placement.allocation import EPS, NodeState, Task, admits

if TYPE_CHECKING:
    from gpuscope.analytics.consolidation.ranking import NodeIndex

#: ``k`` of a unit that needs every GPU of its node (free_nodes).
ALL_GPUS = -1


#: CPU millicores, memory MiB, ephemeral storage MiB.
Resources = tuple[int, int, int]


@dataclass(slots=True)
class Pod:
    idx: int
    node: str
    gpus: tuple[int, ...]
    share: float
    movable: bool
    gph: float
    res: Resources = (0, 0, 0)
    tolerations: frozenset[str] = frozenset()
    mig: tuple[tuple[str, int], ...] = ()
    #: The task it is, for the admission test where it is re-placed.
    task: Task = field(default_factory=Task)
    #: Index of the PodDisruptionBudget its eviction spends (World.allow), -1 for none.
    budget: int = -1

    def clone(self) -> Pod:
        """A copy to move independently (a search branches worlds by the thousand; the
        positional constructor is several times cheaper than ``dataclasses.replace``)."""
        return Pod(
            self.idx, self.node, self.gpus, self.share, self.movable, self.gph,
            self.res, self.tolerations, self.mig, self.task, self.budget,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Unit:
    goal: int
    k: int
    share: float
    models: frozenset[str]
    schedulable: bool
    res: Resources = (0, 0, 0)
    tolerations: frozenset[str] = frozenset()
    mig: tuple[tuple[str, int], ...] = ()
    node_terms: tuple[str, ...] = ()

    @property
    def task(self) -> Task:
        """The unit as the allocation model's task, for the admission test."""
        return Task(
            gpu_models=self.models, tolerations=self.tolerations, node_terms=self.node_terms
        )


class World:
    """Free shares and pods per node while a plan is made (mutable)."""

    def __init__(self, nodes: Sequence[NodeState], placed: Sequence[Placed]) -> None:
        budgets: dict[str, int] = {}
        self.nodes = list(nodes)
        self.info = {n.name: n for n in self.nodes}
        self.free: dict[str, list[float]] = {n.name: list(n.gpus) for n in self.nodes}
        self.mig: dict[str, dict[str, int]] = {n.name: dict(n.mig_free) for n in self.nodes}
        #: Free CPU, memory, storage; a limit of None is not counted (not reported).
        self.res: dict[str, list[int]] = {
            n.name: [n.cpu_milli_free, n.memory_mib_free, n.ephemeral_mib_free] for n in self.nodes
        }
        self.counted: dict[str, tuple[bool, bool, bool]] = {
            n.name: (True, n.memory_mib_total > 0, n.ephemeral_mib_total > 0) for n in self.nodes
        }
        self.pods = [
            Pod(
                i,
                p.node,
                p.gpus,
                p.share,
                p.movable,
                p.gpu_hours_lost,
                (p.cpu_milli, p.memory_mib, p.ephemeral_mib),
                p.tolerations,
                p.mig,
                Task(gpu_models=p.gpu_models, tolerations=p.tolerations, node_terms=p.node_terms),
                budgets.setdefault(p.budget, len(budgets)) if p.budget else -1,
            )
            for i, p in enumerate(placed)
        ]
        #: Evictions each budget still allows in this plan, by index.
        self.allow: list[int] = [0] * len(budgets)
        for p, pod in zip(placed, self.pods, strict=True):
            if pod.budget >= 0:
                self.allow[pod.budget] = max(0, p.budget_allows)
        #: Nodes holding pods of each budget (re-scored when the budget is spent).
        self.budget_nodes: dict[int, set[str]] = {}
        for pod in self.pods:
            if pod.budget >= 0:
                self.budget_nodes.setdefault(pod.budget, set()).add(pod.node)
        self.on: dict[str, list[Pod]] = {n.name: [] for n in self.nodes}
        for pod in self.pods:
            if pod.node in self.on:
                self.on[pod.node].append(pod)
            else:
                pod.movable = False
        self.evicted: list[Pod] = []
        #: Nodes in the order they changed (indexes catch up from it), and their versions.
        self.log: list[str] = []
        self.version: dict[str, int] = {n.name: 0 for n in self.nodes}
        self.indexes: dict[tuple[Any, ...], NodeIndex] = {}

    def touch(self, name: str) -> None:
        self.version[name] += 1
        self.log.append(name)

    def eligible(self, name: str, unit: Unit) -> bool:
        node = self.info[name]
        if unit.schedulable and not self.admits(name, unit.task):
            return False
        if unit.models and node.gpu_model not in unit.models:
            return False
        if unit.mig:
            offered = dict(node.mig_total)
            if any(offered.get(p, 0) < c for p, c in unit.mig):
                return False
            if unit.k == 0:
                return True
        k = len(node.gpus) if unit.k == ALL_GPUS else unit.k
        return 0 < k <= len(node.gpus)

    def admits(self, name: str, task: Task) -> bool:
        """Ready, every hard taint (a cordon included) tolerated, GPU model and node
        selector allowed: :func:`gpuscope.analytics.placement.allocation.admits`."""
        return admits(self.info[name], task)

    def within_budgets(self, pods: Iterable[Pod]) -> bool:
        """Whether evicting ``pods`` (besides those evicted already) stays within every
        PodDisruptionBudget's disruptions left."""
        spent: dict[int, int] = {}
        for pod in pods:
            if pod.budget >= 0:
                spent[pod.budget] = spent.get(pod.budget, 0) + 1
                if spent[pod.budget] > self.allow[pod.budget]:
                    return False
        return True

    def res_fit(self, name: str, need: Resources, pods: Iterable[Pod] = ()) -> bool:
        """Whether the node's free CPU, memory and storage, with ``pods`` evicted, hold
        ``need``."""
        have = list(self.res[name])
        for pod in pods:
            for i in range(3):
                have[i] += pod.res[i]
        counted = self.counted[name]
        return all(not counted[i] or need[i] <= have[i] for i in range(3))

    def mig_fit(self, name: str, need: Iterable[tuple[str, int]], pods: Iterable[Pod] = ()) -> bool:
        """Whether the node's free MIG instances, with ``pods`` evicted, hold ``need``."""
        need = tuple(need)
        if not need:
            return True
        have = dict(self.mig[name])
        for pod in pods:
            for profile, count in pod.mig:
                have[profile] = have.get(profile, 0) + count
        return all(have.get(p, 0) >= c for p, c in need)

    def room_after(self, name: str, unit: Unit, pods: Iterable[Pod] = ()) -> bool:
        """Whether the unit fits on the node once ``pods`` are evicted from it."""
        pods = tuple(pods)
        k = self.k_of(name, unit)
        if k and usable_count(self.free[name], pods, unit.share) < k:
            return False
        return self.res_fit(name, unit.res, pods) and self.mig_fit(name, unit.mig, pods)

    def k_of(self, name: str, unit: Unit) -> int:
        return len(self.free[name]) if unit.k == ALL_GPUS else unit.k

    def ready(self, name: str, share: float) -> list[int]:
        return [g for g, f in enumerate(self.free[name]) if f >= share - EPS]

    def evict(self, pods: Iterable[Pod]) -> None:
        for pod in pods:
            free = self.free[pod.node]
            for g in pod.gpus:
                free[g] = min(1.0, free[g] + pod.share)
            res = self.res[pod.node]
            for i in range(3):
                res[i] += pod.res[i]
            mig = self.mig[pod.node]
            for profile, count in pod.mig:
                mig[profile] = mig.get(profile, 0) + count
            self.on[pod.node].remove(pod)
            pod.movable = False
            self.evicted.append(pod)
            self.touch(pod.node)
            if pod.budget >= 0:  # one disruption fewer for every pod of its budget
                self.allow[pod.budget] -= 1
                for node in sorted(self.budget_nodes[pod.budget] - {pod.node}):
                    if node in self.version:
                        self.touch(node)

    def copy(self) -> World:
        """An independent copy (pods included, indexes left behind) for a search to branch."""
        new = object.__new__(World)
        new.nodes, new.info = self.nodes, self.info
        new.free = {name: list(free) for name, free in self.free.items()}
        new.res = {name: list(res) for name, res in self.res.items()}
        new.mig = {name: dict(mig) for name, mig in self.mig.items()}
        new.counted = self.counted
        new.allow, new.budget_nodes = list(self.allow), self.budget_nodes
        new.pods = [p.clone() for p in self.pods]
        new.on = {name: [new.pods[p.idx] for p in pods] for name, pods in self.on.items()}
        new.evicted = [new.pods[p.idx] for p in self.evicted]
        new.log, new.version, new.indexes = [], dict(self.version), {}
        return new

    def reserve(
        self,
        name: str,
        gpus: Iterable[int],
        share: float,
        res: Resources = (0, 0, 0),
        mig: Iterable[tuple[str, int]] = (),
    ) -> None:
        free = self.free[name]
        for g in gpus:
            free[g] = max(0.0, free[g] - share)
        have = self.res[name]
        for i in range(3):
            have[i] -= res[i]
        instances = self.mig[name]
        for profile, count in mig:
            instances[profile] = instances.get(profile, 0) - count
        self.touch(name)


def usable_count(free: Sequence[float], pods: Iterable[Pod], share: float) -> int:
    f = list(free)
    for pod in pods:
        for g in pod.gpus:
            f[g] += pod.share
    return sum(1 for x in f if x >= share - EPS)


@dataclass(frozen=True, slots=True)
class Option:
    evictions: tuple[Pod, ...]
    gph: float
    #: The GPUs the unit takes; empty: the planner's usual pick (:func:`pick_gpus`).
    gpus: tuple[int, ...] = ()

    @property
    def rank(self) -> tuple[int, float]:
        return len(self.evictions), self.gph


def pick_gpus(world: World, name: str, k: int, share: float) -> list[int]:
    """The k usable GPUs the unit takes: fullest first (best fit), keeping whole GPUs."""
    ready = world.ready(name, share)
    return sorted(ready, key=lambda g: (world.free[name][g], g))[:k]


def units_of(goals: Sequence[Goal], *, decreasing: bool = True) -> list[Unit]:
    units: list[Unit] = []
    for i, goal in enumerate(goals):
        if goal.kind == "pending_job":
            res = (goal.cpu_milli, goal.memory_mib, goal.ephemeral_mib)
            k = goal.gpus if goal.share > 0 else 0
            unit = Unit(
                i,
                k,
                goal.share if k else 0.0,
                goal.gpu_models,
                True,
                res,
                goal.tolerations,
                goal.mig,
                goal.node_terms,
            )
            units += [unit] * goal.count
        elif goal.kind == "free_gpus":
            units += [Unit(i, 1, 1.0, goal.gpu_models, False)] * (goal.gpus * goal.count)
        elif goal.kind == "free_nodes":
            units += [Unit(i, ALL_GPUS, 1.0, goal.gpu_models, False)] * goal.count
        else:
            raise ValueError(f"unknown goal kind {goal.kind!r}")
    if not decreasing:
        return units
    # largest first (whole nodes, then more GPUs, then larger shares): first-fit decreasing
    return sorted(units, key=lambda u: (u.k != ALL_GPUS, -u.k, -u.share, -len(u.mig), u.goal))

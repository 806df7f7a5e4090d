"""The consolidation planner: which pods to move so that goals become placeable.

Input: the placement now (nodes with the free share of each GPU, and the pods placed on
them, :class:`Placed`) and goals (:class:`Goal`): pending jobs to make placeable (``gpus``
GPUs on one node, each with ``share`` free: 1.0 for whole GPUs, less for a fraction), a
number of whole GPUs to free (``free_gpus``: ``gpus * count`` GPUs) or whole nodes to free
(``free_nodes``: ``count`` nodes with every GPU free). Room that is free already counts, so
a goal already met costs nothing. Bin packing fractional allocations onto fewer GPUs is the
``free_gpus`` goal.

Output: a :class:`Plan`. Every pod the plan touches is evicted (it restarts); where it fits
elsewhere the plan says where (a move, ``to_node`` set), else it goes back to pending
(``to_node`` ""). The plan aims for the fewest evictions, then the fewest GPU-hours of work
lost (time since the pod's last checkpoint or start times its GPUs).

Which pods may move (:func:`placement_from_state`, DESIGN.md Policies): preemptible batch
or training pods only. Never interactive pods, never inference or unclassified ones, never
a pod of a protected namespace or one marked ``gpuscope.io/protect``, never a pod whose
PodDisruptionBudget has no disruptions left (``pdb_blocked``). A pod is moved at most once
per plan.

The planner (:func:`plan_consolidation`) is greedy over goal units, largest first. For each
unit it takes a node where the unit fits now (best fit) or else the node where it needs the
fewest evictions (ties: fewest GPU-hours lost). On a node, which pods to evict is a small
covering knapsack: greedily the eviction that makes the most GPUs usable per pod, then
redundant evictions dropped, then, where the node has few movable pods, an exhaustive search
over smaller sets. The unit's room is reserved; once every goal is handled, the evicted pods
are placed best fit into the room left (moves) or sent to pending. The two strategies people
use today are here as baselines with the same signature:
:func:`plan_high_node_utilization` (the Kubernetes descheduler's HighNodeUtilization: empty
the least used node) and :func:`plan_first_fit_decreasing`. The planner also runs them and
keeps the better plan, so it never needs more evictions than they do.
:mod:`analytics.consolidation_exact` has the exact ILP used to measure the gap.

MIG pods take MIG instances, not GPU shares; they are left out (neither moved nor counted).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from analytics.allocation import _ACTIVE_PHASES, EPS, ClusterState, GpuIndices, NodeState, task_of
from analytics.base import Analysis
from collector.inventory_records import PodInfo
from gpuscope.records import Finding, WorkloadKind, finding_id
from gpuscope.settings import AnalyticsSettings, WorkloadSettings

log = logging.getLogger(__name__)

KINDS = ("consolidation",)
GoalKind = Literal["pending_job", "free_nodes", "free_gpus"]
#: Annotation with the time of a pod's last checkpoint (RFC 3339 or Unix seconds).
CHECKPOINT_ANNOTATION = "gpuscope.io/last-checkpoint"
#: Workload kinds that may ever be moved.
MOVABLE_KINDS = frozenset({WorkloadKind.BATCH, WorkloadKind.TRAINING})
#: On a node with at most this many movable pods the eviction set is searched exhaustively.
EXHAUSTIVE_PODS = 14
_EXHAUSTIVE_BUDGET = 4000
#: ``k`` of a unit that needs every GPU of its node (free_nodes).
_ALL = -1


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
) -> list[Placed]:
    """The pods on each node with their GPUs, placed as :mod:`analytics.allocation` does
    (known indices exactly; whole GPUs lowest index first; fractions largest first, best
    fit), and whether each may move (module docstring)."""
    known = gpu_indices or {}
    protected = frozenset(protected_namespaces)
    sizes = {n.name: len(n.gpus) for n in state.nodes}
    by_node: dict[str, list[PodInfo]] = {}
    for pod in pods:
        if pod.phase in _ACTIVE_PHASES and pod.node in sizes:
            by_node.setdefault(pod.node, []).append(pod)
    out: list[Placed] = []
    for node_name, node_pods in sorted(by_node.items()):
        free = [1.0] * sizes[node_name]
        entries: list[tuple[PodInfo, int, float]] = []
        for pod in node_pods:
            task = task_of(pod)
            if task is None or task.gpu_count == 0:
                continue
            entries.append((pod, task.gpu_count, task.gpu_share))
        placed: dict[str, tuple[int, ...]] = {}
        for pod, _, share in entries:
            key = f"{pod.namespace}/{pod.name}"
            idx = tuple(i for i in known.get(key, ()) if 0 <= i < len(free))
            if idx:
                placed[key] = idx
                for i in idx:
                    free[i] = max(0.0, free[i] - share)
        rest = [e for e in entries if f"{e[0].namespace}/{e[0].name}" not in placed]
        rest.sort(key=lambda e: (e[2] < 1.0 - EPS, -e[2], e[0].namespace, e[0].name))
        for pod, count, share in rest:
            idx = _take(free, count, share, best_fit=share < 1.0 - EPS)
            placed[f"{pod.namespace}/{pod.name}"] = idx
        for pod, _, share in entries:
            key = f"{pod.namespace}/{pod.name}"
            reason = _fixed_reason(pod, protected, pdb_blocked)
            idx = placed[key]
            out.append(
                Placed(
                    namespace=pod.namespace,
                    pod=pod.name,
                    node=node_name,
                    gpus=idx,
                    share=share,
                    movable=not reason,
                    reason_fixed=reason,
                    gpu_hours_lost=len(idx) * share * _hours_since(pod, at),
                )
            )
    return out


def _take(free: list[float], count: int, share: float, *, best_fit: bool) -> tuple[int, ...]:
    """GPU indices for a pod reconstructed onto a node (clamped when over-committed)."""
    chosen: list[int] = []
    for _ in range(count):
        fits = [i for i, f in enumerate(free) if f >= share - EPS and i not in chosen]
        if fits:
            i = min(fits, key=lambda j: (free[j], j)) if best_fit else fits[0]
        else:
            rest = [j for j in range(len(free)) if j not in chosen]
            if not rest:
                break
            i = max(rest, key=lambda j: (free[j], -j))
        free[i] = max(0.0, free[i] - share)
        chosen.append(i)
    return tuple(sorted(chosen))


def goals_from_pending(pods: Iterable[PodInfo]) -> list[Goal]:
    """One pending_job goal per pending GPU pod (not yet on a node)."""
    goals = []
    for pod in pods:
        if pod.node is not None or pod.phase != "Pending":
            continue
        task = task_of(pod)
        if task is None or task.gpu_count == 0:
            continue
        goals.append(
            Goal(
                "pending_job",
                gpus=task.gpu_count,
                share=task.gpu_share,
                label=f"{pod.namespace}/{pod.name}",
            )
        )
    return sorted(goals, key=lambda g: g.label)


# --- the working state -----------------------------------------------------------------


@dataclass(slots=True)
class _Pod:
    idx: int
    node: str
    gpus: tuple[int, ...]
    share: float
    movable: bool
    gph: float


@dataclass(frozen=True, slots=True)
class _Unit:
    goal: int
    k: int
    share: float
    models: frozenset[str]
    schedulable: bool


class _World:
    """Free shares and pods per node while a plan is made (mutable)."""

    def __init__(self, nodes: Sequence[NodeState], placed: Sequence[Placed]) -> None:
        self.nodes = [n for n in nodes if n.gpus]
        self.info = {n.name: n for n in self.nodes}
        self.free: dict[str, list[float]] = {n.name: list(n.gpus) for n in self.nodes}
        self.pods = [
            _Pod(i, p.node, p.gpus, p.share, p.movable, p.gpu_hours_lost)
            for i, p in enumerate(placed)
        ]
        self.on: dict[str, list[_Pod]] = {n.name: [] for n in self.nodes}
        for pod in self.pods:
            if pod.node in self.on:
                self.on[pod.node].append(pod)
            else:
                pod.movable = False
        self.evicted: list[_Pod] = []
        #: Nodes in the order they changed (indexes catch up from it), and their versions.
        self.log: list[str] = []
        self.version: dict[str, int] = {n.name: 0 for n in self.nodes}
        self.indexes: dict[tuple[Any, ...], _Index] = {}

    def touch(self, name: str) -> None:
        self.version[name] += 1
        self.log.append(name)

    def eligible(self, name: str, unit: _Unit) -> bool:
        node = self.info[name]
        if unit.schedulable and not node.schedulable:
            return False
        if unit.models and node.gpu_model not in unit.models:
            return False
        k = len(node.gpus) if unit.k == _ALL else unit.k
        return 0 < k <= len(node.gpus)

    def k_of(self, name: str, unit: _Unit) -> int:
        return len(self.free[name]) if unit.k == _ALL else unit.k

    def ready(self, name: str, share: float) -> list[int]:
        return [g for g, f in enumerate(self.free[name]) if f >= share - EPS]

    def evict(self, pods: Iterable[_Pod]) -> None:
        for pod in pods:
            free = self.free[pod.node]
            for g in pod.gpus:
                free[g] = min(1.0, free[g] + pod.share)
            self.on[pod.node].remove(pod)
            pod.movable = False
            self.evicted.append(pod)
            self.touch(pod.node)

    def reserve(self, name: str, gpus: Iterable[int], share: float) -> None:
        free = self.free[name]
        for g in gpus:
            free[g] = max(0.0, free[g] - share)
        self.touch(name)


def _usable(free: Sequence[float], pods: Iterable[_Pod], share: float) -> int:
    f = list(free)
    for pod in pods:
        for g in pod.gpus:
            f[g] += pod.share
    return sum(1 for x in f if x >= share - EPS)


@dataclass(frozen=True, slots=True)
class _Option:
    evictions: tuple[_Pod, ...]
    gph: float

    @property
    def rank(self) -> tuple[int, float]:
        return len(self.evictions), self.gph


def _greedy_node(world: _World, name: str, k: int, share: float) -> _Option | None:
    """A small set of movable pods whose eviction leaves k GPUs of the node with ``share``
    free: the eviction making most GPUs usable per pod first, then redundant ones dropped."""
    free = list(world.free[name])
    movable = [p for p in world.on[name] if p.movable]
    cap = list(free)
    for pod in movable:
        for g in pod.gpus:
            cap[g] += pod.share
    if sum(1 for c in cap if c >= share - EPS) < k:
        return None
    chosen: list[_Pod] = []
    usable = sum(1 for f in free if f >= share - EPS)
    while usable < k:
        need = k - usable
        best: tuple[float, float, list[_Pod]] | None = None
        for g, f in enumerate(free):
            if f >= share - EPS or cap[g] < share - EPS:
                continue
            on_g = sorted(
                (p for p in movable if g in p.gpus and p not in chosen),
                key=lambda p: (-p.share, p.gph, p.idx),
            )
            took: list[_Pod] = []
            acc = f
            for p in on_g:
                if acc >= share - EPS:
                    break
                took.append(p)
                acc += p.share
            gain = _usable(free, took, share) - usable
            if gain <= 0:
                continue
            score = len(took) / min(gain, need)
            gph = sum(p.gph for p in took)
            if best is None or (score, gph) < (best[0], best[1]):
                best = (score, gph, took)
        if best is None:
            return None
        for p in best[2]:
            chosen.append(p)
            for g in p.gpus:
                free[g] += p.share
        usable = sum(1 for f in free if f >= share - EPS)
    # drop evictions not needed, dearest first
    base = world.free[name]
    for p in sorted(chosen, key=lambda p: (-p.gph, p.idx)):
        rest = [q for q in chosen if q is not p]
        if _usable(base, rest, share) >= k:
            chosen = rest
    return _Option(tuple(chosen), sum(p.gph for p in chosen))


def _exhaustive_node(world: _World, name: str, k: int, share: float, bound: _Option) -> _Option:
    """The best eviction set of at most ``len(bound)`` pods, where the search is small."""
    base = world.free[name]
    movable = sorted((p for p in world.on[name] if p.movable), key=lambda p: p.idx)
    if len(movable) > EXHAUSTIVE_PODS or not bound.evictions:
        return bound
    best = bound
    budget = _EXHAUSTIVE_BUDGET
    for r in range(1, len(bound.evictions) + 1):
        found = False
        for combo in itertools.combinations(movable, r):
            budget -= 1
            if budget < 0:
                return best
            if _usable(base, combo, share) >= k:
                option = _Option(combo, sum(p.gph for p in combo))
                if option.rank < best.rank:
                    best = option
                found = True
        if found:
            return best
    return best


def _pick_gpus(world: _World, name: str, k: int, share: float) -> list[int]:
    """The k usable GPUs the unit takes: fullest first (best fit), keeping whole GPUs."""
    ready = world.ready(name, share)
    return sorted(ready, key=lambda g: (world.free[name][g], g))[:k]


def _units(goals: Sequence[Goal], *, decreasing: bool = True) -> list[_Unit]:
    units: list[_Unit] = []
    for i, goal in enumerate(goals):
        if goal.kind == "pending_job":
            units += [_Unit(i, goal.gpus, goal.share, goal.gpu_models, True)] * goal.count
        elif goal.kind == "free_gpus":
            units += [_Unit(i, 1, 1.0, goal.gpu_models, False)] * (goal.gpus * goal.count)
        elif goal.kind == "free_nodes":
            units += [_Unit(i, _ALL, 1.0, goal.gpu_models, False)] * goal.count
        else:
            raise ValueError(f"unknown goal kind {goal.kind!r}")
    if not decreasing:
        return units
    # largest first (whole nodes, then more GPUs, then larger shares): first-fit decreasing
    return sorted(units, key=lambda u: (u.k != _ALL, -u.k, -u.share, u.goal))


#: Chooses (node, evictions) for a unit, or returns a reason it cannot be met.
_Chooser = Callable[[_World, _Unit, int | None], "tuple[str, _Option] | str"]


#: Scores a node for a unit: (sort key, payload), or None when the node cannot serve it.
_Scorer = Callable[[_World, str, _Unit], "tuple[tuple[Any, ...], Any] | None"]


class _Index:
    """Nodes by a scorer's key for one kind of unit, kept up to date lazily from the
    world's change log (a heap with stale entries skipped), so that many units of the same
    shape cost one scan of the cluster, not one each."""

    def __init__(self, world: _World, unit: _Unit, scorer: _Scorer) -> None:
        self.world, self.unit, self.scorer = world, unit, scorer
        self.heap: list[tuple[tuple[Any, ...], str, int, Any]] = []
        self.cursor = len(world.log)
        for node in world.nodes:
            self._push(node.name)

    def _push(self, name: str) -> None:
        if not self.world.eligible(name, self.unit):
            return
        scored = self.scorer(self.world, name, self.unit)
        if scored is not None:
            heapq.heappush(self.heap, (scored[0], name, self.world.version[name], scored[1]))

    def _catch_up(self) -> None:
        log = self.world.log
        for name in dict.fromkeys(log[self.cursor :]):
            self._push(name)
        self.cursor = len(log)

    def top(self, n: int = 1) -> list[tuple[tuple[Any, ...], str, Any]]:
        """The n best current entries (left in the index)."""
        self._catch_up()
        out: list[tuple[tuple[Any, ...], str, int, Any]] = []
        version = self.world.version
        while self.heap and len(out) < n:
            entry = heapq.heappop(self.heap)
            if entry[2] == version[entry[1]]:
                out.append(entry)
        for entry in out:
            heapq.heappush(self.heap, entry)
        return [(key, name, payload) for key, name, _, payload in out]


def _index(world: _World, unit: _Unit, tag: str, scorer: _Scorer) -> _Index:
    key = (tag, unit.k, unit.share, unit.models, unit.schedulable)
    index = world.indexes.get(key)
    if index is None:
        index = world.indexes[key] = _Index(world, unit, scorer)
    return index


def _fit_best(world: _World, name: str, unit: _Unit) -> tuple[tuple[Any, ...], None] | None:
    ready = world.ready(name, unit.share)
    if len(ready) < world.k_of(name, unit):
        return None
    return (sum(world.free[name][g] for g in ready),), None


def _fit_first(world: _World, name: str, unit: _Unit) -> tuple[tuple[Any, ...], None] | None:
    if len(world.ready(name, unit.share)) < world.k_of(name, unit):
        return None
    return (), None


def _fits_now(world: _World, unit: _Unit, *, best_fit: bool) -> str | None:
    if best_fit:
        top = _index(world, unit, "fit-best", _fit_best).top()
    else:
        top = _index(world, unit, "fit-first", _fit_first).top()
    return top[0][1] if top else None


def _no_room(world: _World, unit: _Unit) -> str:
    if not any(world.eligible(n.name, unit) for n in world.nodes):
        return "no node has enough GPUs of the model asked for"
    return "no node has room even after moving every pod that may move"


def _greedy_scorer(world: _World, name: str, unit: _Unit) -> tuple[tuple[Any, ...], _Option] | None:
    option = _greedy_node(world, name, world.k_of(name, unit), unit.share)
    if option is None or not option.evictions:
        return None
    return option.rank, option


def _choose_planner(world: _World, unit: _Unit, budget: int | None) -> tuple[str, _Option] | str:
    now = _fits_now(world, unit, best_fit=True)
    if now is not None:
        return now, _Option((), 0.0)
    options = _index(world, unit, "greedy", _greedy_scorer).top(16)
    if not options:
        return _no_room(world, unit)
    fewest = options[0][0][0]
    best_name, best = options[0][1], options[0][2]
    for _, name, option in options:
        if len(option.evictions) > fewest + 1:
            break
        refined = _exhaustive_node(world, name, world.k_of(name, unit), unit.share, option)
        if (refined.rank, name) < (best.rank, best_name):
            best_name, best = name, refined
    if budget is not None and len(best.evictions) > budget:
        return f"needs {len(best.evictions)} evictions, over the max_evictions budget"
    return best_name, best


def _choose_first(world: _World, unit: _Unit, budget: int | None) -> tuple[str, _Option] | str:
    """The planner's choice, but a unit that fits somewhere now takes the first such node."""
    now = _fits_now(world, unit, best_fit=False)
    if now is not None:
        return now, _Option((), 0.0)
    return _choose_planner(world, unit, budget)


def _evict_in_order(
    world: _World, name: str, k: int, share: float, order: Callable[[_Pod], Any]
) -> _Option | None:
    movable = sorted((p for p in world.on[name] if p.movable), key=order)
    taken: list[_Pod] = []
    base = world.free[name]
    if _usable(base, taken, share) >= k:
        return _Option((), 0.0)
    for pod in movable:
        taken.append(pod)
        if _usable(base, taken, share) >= k:
            return _Option(tuple(taken), sum(p.gph for p in taken))
    return None


def _utilization(world: _World, name: str) -> float:
    free = world.free[name]
    return 1.0 - sum(free) / len(free)


def _baseline_chooser(
    tag: str, node_order: Callable[[_World, str], Any], pod_order: Callable[[_Pod], Any]
) -> _Chooser:
    def scorer(world: _World, name: str, unit: _Unit) -> tuple[tuple[Any, ...], _Option] | None:
        option = _evict_in_order(world, name, world.k_of(name, unit), unit.share, pod_order)
        if option is None:
            return None
        return (node_order(world, name),), option

    def choose(world: _World, unit: _Unit, budget: int | None) -> tuple[str, _Option] | str:
        now = _fits_now(world, unit, best_fit=False)
        if now is not None:
            return now, _Option((), 0.0)
        top = _index(world, unit, tag, scorer).top()
        if not top:
            return _no_room(world, unit)
        _, name, option = top[0]
        if budget is not None and len(option.evictions) > budget:
            return f"needs {len(option.evictions)} evictions, over the max_evictions budget"
        return name, option

    return choose


#: HighNodeUtilization: empty the least used node first, lowest-cost pods first.
_hnu = _baseline_chooser(
    "hnu", lambda w, n: (_utilization(w, n), n), lambda p: (p.share, p.gph, p.idx)
)
#: First-fit decreasing: nodes in order, largest pods out first.
_ffd = _baseline_chooser("ffd", lambda w, n: n, lambda p: (-len(p.gpus) * p.share, p.idx))


def _relocate(world: _World, pod: _Pod, from_node: str) -> tuple[str, tuple[int, ...]]:
    """Best fit for an evicted pod in the room left: the node and GPUs leaving least slack."""
    best: tuple[float, str, tuple[int, ...]] | None = None
    need = len(pod.gpus)
    for node in world.nodes:
        if not node.schedulable:
            continue
        free = world.free[node.name]
        fits = sorted(
            (g for g, f in enumerate(free) if f >= pod.share - EPS), key=lambda g: (free[g], g)
        )
        if len(fits) < need:
            continue
        gpus = tuple(sorted(fits[:need]))
        slack = sum(free[g] - pod.share for g in gpus)
        if best is None or (slack, node.name, gpus) < best:
            best = (slack, node.name, gpus)
            if slack <= EPS:
                break
    if best is None:
        return "", ()
    world.reserve(best[1], best[2], pod.share)
    return best[1], best[2]


def _plan_with(
    choose: _Chooser,
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    max_evictions: int | None,
    strategy: str,
    *,
    decreasing: bool = True,
) -> Plan:
    world = _World(nodes, placed)
    failed: dict[int, str] = {}
    targets: list[tuple[str, str]] = []
    for unit in _units(goals, decreasing=decreasing):
        if unit.goal in failed:
            continue
        budget = None if max_evictions is None else max_evictions - len(world.evicted)
        choice = choose(world, unit, budget)
        if isinstance(choice, str):
            failed[unit.goal] = choice
            continue
        name, option = choice
        world.evict(option.evictions)
        k = world.k_of(name, unit)
        world.reserve(name, _pick_gpus(world, name, k, unit.share), unit.share)
        targets.append((goals[unit.goal].name, name))
    moves = []
    for pod in sorted(world.evicted, key=lambda p: (-len(p.gpus) * p.share, p.idx)):
        src = placed[pod.idx]
        to_node, to_gpus = _relocate(world, pod, src.node)
        moves.append(
            Move(src.namespace, src.pod, src.node, to_node, src.gpus, to_gpus, src.gpu_hours_lost)
        )
    moves.sort(key=lambda m: (m.namespace, m.pod))
    return Plan(
        moves=moves,
        evictions=[f"{m.namespace}/{m.pod}" for m in moves],
        unplaceable=[(goals[i].name, reason) for i, reason in sorted(failed.items())],
        goals_met=len(goals) - len(failed),
        targets=targets,
        strategy=strategy,
    )


def _plan_rank(plan: Plan) -> tuple[int, int, float]:
    return -plan.goals_met, len(plan.evictions), plan.gpu_hours_lost


def plan_greedy(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    *,
    max_evictions: int | None = None,
) -> Plan:
    """The greedy planner alone (module docstring), without the baselines' portfolio."""
    return _plan_with(_choose_planner, nodes, placed, goals, max_evictions, "planner")


def plan_high_node_utilization(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    *,
    max_evictions: int | None = None,
) -> Plan:
    """Baseline: a unit goes where it fits now (first fit), else onto the least used node
    that can hold it, evicting its smallest pods until it does (descheduler
    HighNodeUtilization)."""
    return _plan_with(_hnu, nodes, placed, goals, max_evictions, "high_node_utilization")


def plan_first_fit_decreasing(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    *,
    max_evictions: int | None = None,
) -> Plan:
    """Baseline: units largest first, each on the first node (by name) where it fits or can
    be made to fit by evicting its largest pods first."""
    return _plan_with(_ffd, nodes, placed, goals, max_evictions, "first_fit_decreasing")


def plan_consolidation(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    *,
    max_evictions: int | None = None,
) -> Plan:
    """The plan: the greedy planner's, or a baseline's where one does better (more goals,
    then fewer evictions, then fewer GPU-hours lost)."""
    best = plan_greedy(nodes, placed, goals, max_evictions=max_evictions)
    if not best.evictions and not best.unplaceable:
        return best
    others: list[Callable[[], Plan]] = [
        lambda: plan_high_node_utilization(nodes, placed, goals, max_evictions=max_evictions),
        lambda: plan_first_fit_decreasing(nodes, placed, goals, max_evictions=max_evictions),
        # the goals in the order given, and first fit: other packings of the same room
        lambda: _plan_with(
            _choose_planner, nodes, placed, goals, max_evictions, "planner", decreasing=False
        ),
        lambda: _plan_with(_choose_first, nodes, placed, goals, max_evictions, "planner"),
    ]
    for make in others:
        plan = make()
        if _plan_rank(plan) < _plan_rank(best):
            best = plan
        if not best.evictions and not best.unplaceable:
            break
    return best


# --- the analysis ----------------------------------------------------------------------


def analyze_consolidation(
    state: ClusterState,
    pods: Sequence[PodInfo],
    *,
    at: datetime,
    settings: AnalyticsSettings,
    goals: Sequence[Goal] | None = None,
    gpu_indices: GpuIndices | None = None,
    protected_namespaces: Iterable[str] | None = None,
    pdb_blocked: frozenset[str] | set[str] = frozenset(),
    max_evictions: int | None = None,
) -> Analysis:
    """The plan for the goals (the pending pods when not given), as findings and summary."""
    del settings  # no thresholds yet; kept for the shape every analysis has
    if protected_namespaces is None:
        protected_namespaces = WorkloadSettings().protected_namespaces
    placed = placement_from_state(
        state,
        pods,
        at=at,
        gpu_indices=gpu_indices,
        protected_namespaces=protected_namespaces,
        pdb_blocked=pdb_blocked,
    )
    goal_list = list(goals) if goals is not None else goals_from_pending(pods)
    plan = plan_consolidation(state.nodes, placed, goal_list, max_evictions=max_evictions)
    failed = {label for label, _ in plan.unplaceable}
    by_goal: dict[str, list[str]] = {}
    for label, node in plan.targets:
        by_goal.setdefault(label, []).append(node)
    findings = []
    for goal in goal_list:
        if goal.name in failed:
            continue
        subject = {"goal": goal.name}
        target: dict[str, Any] = {
            "goal": goal.name,
            "kind": goal.kind,
            "gpus": goal.gpus,
            "share": goal.share,
            "count": goal.count,
            "nodes": sorted(set(by_goal.get(goal.name, []))),
        }
        findings.append(
            Finding(
                id=finding_id("consolidation", subject),
                kind="consolidation",
                severity="info",
                subject=subject,
                since=None,
                observed_at=at,
                evidence={"plan_moves": len(plan.moves), "nodes": target["nodes"]},
                recommendation={
                    "action": "consolidate",
                    "target": target,
                    "moves": len(plan.moves),
                },
            )
        )
    summary: dict[str, Any] = {
        "moves": [m.as_dict() for m in plan.moves],
        "evictions": list(plan.evictions),
        "unplaceable": [{"goal": g, "reason": r} for g, r in plan.unplaceable],
        "evictions_count": len(plan.evictions),
        "moves_count": sum(1 for m in plan.moves if m.to_node),
        "gpu_hours_lost": round(plan.gpu_hours_lost, 6),
        "goals": len(goal_list),
        "goals_met": plan.goals_met,
        "strategy": plan.strategy,
        "movable_pods": sum(1 for p in placed if p.movable),
    }
    return Analysis(kinds=KINDS, findings=findings, summary=summary)


def placed_by_key(placed: Sequence[Placed]) -> Mapping[str, Placed]:
    """Placed pods by ``namespace/pod``."""
    return {p.key: p for p in placed}

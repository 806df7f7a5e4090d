"""How the planner and the baselines choose a node and the pods to evict for each unit.

The planner (:func:`choose_planner`) takes a node where the unit fits now (best fit) or else
the node where it needs the fewest evictions (ties: fewest GPU-hours lost). On a node, which
pods to evict is a small covering knapsack: greedily the eviction that makes the most GPUs
usable per pod, then redundant evictions dropped, then, where the node has few movable pods,
an exhaustive search over smaller sets. Every set stays within the PodDisruptionBudgets'
disruptions left (:meth:`World.within_budgets`). The baselines (:data:`choose_hnu`,
:data:`choose_ffd`) choose the way the tools people use today do. :func:`plan_with` runs a
chooser over every unit and turns the result into a :class:`Plan`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from gpuscope.analytics.consolidation.model import Goal, Move, Placed, Plan
from gpuscope.analytics.consolidation.ranking import fits_now, no_room, node_index
from gpuscope.analytics.consolidation.relocation import relocate_all
from gpuscope.analytics.consolidation.world import (
    Option,
    Pod,
    Unit,
    World,
    pick_gpus,
    units_of,
    usable_count,
)
from gpuscope.analytics.placement.allocation import EPS, NodeState

#: On a node with at most this many movable pods the eviction set is searched exhaustively.
EXHAUSTIVE_PODS = 14
_EXHAUSTIVE_BUDGET = 4000
#: Options of equal evictions whose victims' room is checked, cheapest first.
_TIE_CHECKS = 4


def greedy_node(world: World, name: str, unit: Unit) -> Option | None:
    """A small set of movable pods whose eviction makes room for the unit on the node: the
    eviction making most GPUs usable per pod first, then, where CPU, memory or storage is
    still short, the pods that free most of it, then redundant evictions dropped."""
    k, share = world.k_of(name, unit), unit.share
    free = list(world.free[name])
    movable = [p for p in world.on[name] if p.movable]
    if not world.room_after(name, unit, movable):
        return None
    cap = list(free)
    for pod in movable:
        for g in pod.gpus:
            cap[g] += pod.share
    chosen: list[Pod] = []
    usable = sum(1 for f in free if f >= share - EPS)
    while usable < k:
        need = k - usable
        best: tuple[float, float, list[Pod]] | None = None
        for g, f in enumerate(free):
            if f >= share - EPS or cap[g] < share - EPS:
                continue
            on_g = sorted(
                (p for p in movable if g in p.gpus and p not in chosen),
                key=lambda p: (-p.share, p.gph, p.idx),
            )
            took: list[Pod] = []
            acc = f
            for p in on_g:
                if acc >= share - EPS:
                    break
                if not world.within_budgets([*chosen, *took, p]):
                    continue  # its PodDisruptionBudget has no disruption left for it
                took.append(p)
                acc += p.share
            gain = usable_count(free, took, share) - usable
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
    if not world.room_after(name, unit, chosen):
        # CPU, memory, storage or MIG instances still short: the pods freeing most of what
        # is short first (any pod that may move, with GPUs or without)
        short = [i for i in range(3) if unit.res[i]]
        profiles = {p for p, _ in unit.mig}
        rest = sorted(
            (p for p in movable if p not in chosen),
            key=lambda p: (
                -sum(c for q, c in p.mig if q in profiles),
                -sum(p.res[i] / max(1, unit.res[i]) for i in short),
                p.gph,
                p.idx,
            ),
        )
        for p in rest:
            if not world.within_budgets([*chosen, p]):
                continue
            chosen.append(p)
            if world.room_after(name, unit, chosen):
                break
        else:
            return None
    # drop evictions not needed, dearest first
    for p in sorted(chosen, key=lambda p: (-p.gph, p.idx)):
        rest_ = [q for q in chosen if q is not p]
        if world.room_after(name, unit, rest_):
            chosen = rest_
    return Option(tuple(chosen), sum(p.gph for p in chosen))


def _exhaustive_node(world: World, name: str, unit: Unit, bound: Option) -> Option:
    """The best eviction set of at most ``len(bound)`` pods, where the search is small."""
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
            if world.within_budgets(combo) and world.room_after(name, unit, combo):
                option = Option(combo, sum(p.gph for p in combo))
                if option.rank < best.rank:
                    best = option
                found = True
        if found:
            return best
    return best


#: Chooses (node, evictions) for a unit, or returns a reason it cannot be met.
Chooser = Callable[[World, Unit, int | None], "tuple[str, Option] | str"]


def _greedy_scorer(world: World, name: str, unit: Unit) -> tuple[tuple[Any, ...], Option] | None:
    option = greedy_node(world, name, unit)
    if option is None or not option.evictions:
        return None
    return option.rank, option


def choose_planner(world: World, unit: Unit, budget: int | None) -> tuple[str, Option] | str:
    now = fits_now(world, unit, best_fit=True)
    if now is not None:
        return now, Option((), 0.0)
    options = node_index(world, unit, "greedy", _greedy_scorer).top(16)
    if not options:
        return no_room(world, unit)
    fewest = options[0][0][0]
    candidates: list[tuple[str, Option]] = []
    for _, name, option in options:
        if len(option.evictions) > fewest + 1:
            break
        candidates.append((name, _exhaustive_node(world, name, unit, option)))
    least = min(len(o.evictions) for _, o in candidates)
    tied = [(n, o) for n, o in candidates if len(o.evictions) == least]
    # at the same eviction count, prefer victims that can be re-placed over sending running
    # pods back to the queue; then the fewest GPU-hours lost (the first, cheapest option
    # whose victims all find room ends the search; at most _TIE_CHECKS are tried, so a full
    # cluster where no victim finds room costs a bounded number of scans per unit)
    tied.sort(key=lambda no: (no[1].gph, no[0]))
    best_name, best = tied[0]
    if len(tied) > 1:
        fewest_left = None
        for name, option in tied[:_TIE_CHECKS]:
            left = stranded(world, name, unit, option)
            if fewest_left is None or left < fewest_left:
                fewest_left, best_name, best = left, name, option
            if left == 0:
                break
    if budget is not None and len(best.evictions) > budget:
        return f"needs {len(best.evictions)} evictions, over the max_evictions budget"
    return best_name, best


def choose_first(world: World, unit: Unit, budget: int | None) -> tuple[str, Option] | str:
    """The planner's choice, but a unit that fits somewhere now takes the first such node."""
    now = fits_now(world, unit, best_fit=False)
    if now is not None:
        return now, Option((), 0.0)
    return choose_planner(world, unit, budget)


def _evict_in_order(
    world: World, name: str, unit: Unit, order: Callable[[Pod], Any]
) -> Option | None:
    movable = sorted((p for p in world.on[name] if p.movable), key=order)
    taken: list[Pod] = []
    if world.room_after(name, unit):
        return Option((), 0.0)
    for pod in movable:
        if not world.within_budgets([*taken, pod]):
            continue  # its PodDisruptionBudget has no disruption left for it
        taken.append(pod)
        if world.room_after(name, unit, taken):
            return Option(tuple(taken), sum(p.gph for p in taken))
    return None


def _utilization(world: World, name: str) -> float:
    free = world.free[name]
    return 1.0 - sum(free) / len(free) if free else 0.0


def _baseline_chooser(
    tag: str, node_order: Callable[[World, str], Any], pod_order: Callable[[Pod], Any]
) -> Chooser:
    def scorer(world: World, name: str, unit: Unit) -> tuple[tuple[Any, ...], Option] | None:
        option = _evict_in_order(world, name, unit, pod_order)
        if option is None:
            return None
        return (node_order(world, name),), option

    def choose(world: World, unit: Unit, budget: int | None) -> tuple[str, Option] | str:
        now = fits_now(world, unit, best_fit=False)
        if now is not None:
            return now, Option((), 0.0)
        top = node_index(world, unit, tag, scorer).top()
        if not top:
            return no_room(world, unit)
        _, name, option = top[0]
        if budget is not None and len(option.evictions) > budget:
            return f"needs {len(option.evictions)} evictions, over the max_evictions budget"
        return name, option

    return choose


#: HighNodeUtilization: empty the least used node first, lowest-cost pods first.
choose_hnu = _baseline_chooser(
    "hnu", lambda w, n: (_utilization(w, n), n), lambda p: (p.share, p.gph, p.idx)
)
#: First-fit decreasing: nodes in order, largest pods out first.
choose_ffd = _baseline_chooser("ffd", lambda w, n: n, lambda p: (-len(p.gpus) * p.share, p.idx))


def plan_with(
    choose: Chooser,
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    max_evictions: int | None,
    strategy: str,
    *,
    decreasing: bool = True,
) -> Plan:
    world = World(nodes, placed)
    failed: dict[int, str] = {}
    targets: list[tuple[str, str]] = []
    for unit in units_of(goals, decreasing=decreasing):
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
        gpus = option.gpus or pick_gpus(world, name, k, unit.share)
        world.reserve(name, gpus, unit.share, unit.res, unit.mig)
        targets.append((goals[unit.goal].name, name))
    moves = []
    for idx, (to_node, to_gpus) in relocate_all(world).items():
        src = placed[idx]
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


def stranded(world: World, name: str, unit: Unit, option: Option) -> int:
    """How many of the option's victims would find no node to go back to (first fit, in
    the room left once the unit took this option): a tie-breaker between options of equal
    evictions, cheap enough for every unit of a large cluster. (Victims of earlier units
    that the option's room would re-place are left to the bounded search of small
    clusters, which ranks whole plans by pods re-queued: counting them here costs a scan
    of the cluster per earlier victim.) Works on copies of the few nodes it touches, not of
    the world."""
    free: dict[str, list[float]] = {}
    res: dict[str, list[int]] = {}
    mig: dict[str, dict[str, int]] = {}

    def mine(node: str) -> tuple[list[float], list[int]]:
        if node not in free:
            free[node], res[node] = list(world.free[node]), list(world.res[node])
        return free[node], res[node]

    for pod in option.evictions:
        f, r = mine(pod.node)
        for g in pod.gpus:
            f[g] = min(1.0, f[g] + pod.share)
        for i in range(3):
            r[i] += pod.res[i]
        if pod.mig:
            m = mig.setdefault(pod.node, dict(world.mig[pod.node]))
            for q, c in pod.mig:
                m[q] = m.get(q, 0) + c
    if unit.mig:
        m = mig.setdefault(name, dict(world.mig[name]))
        for q, c in unit.mig:
            m[q] = m.get(q, 0) - c
    f, r = mine(name)
    ready = sorted((g for g, x in enumerate(f) if x >= unit.share - EPS), key=lambda g: (f[g], g))
    for g in option.gpus or ready[: world.k_of(name, unit)]:
        f[g] -= unit.share
    for i in range(3):
        r[i] -= unit.res[i]
    left = 0
    for pod in sorted(option.evictions, key=lambda p: (-len(p.gpus) * p.share, p.idx)):
        for node in world.nodes:
            n = node.name
            f, r = free.get(n, world.free[n]), res.get(n, world.res[n])
            counted = world.counted[n]
            if any(counted[i] and pod.res[i] > r[i] for i in range(3)):
                continue
            room = [g for g, x in enumerate(f) if x >= pod.share - EPS][: len(pod.gpus)]
            if len(room) < len(pod.gpus) or not world.admits(n, pod.task):
                continue
            m = mig.get(n, world.mig[n])
            if any(m.get(q, 0) < c for q, c in pod.mig):
                continue
            f, r = mine(n)
            for g in room:
                f[g] -= pod.share
            for i in range(3):
                r[i] -= pod.res[i]
            if pod.mig:
                m = mig.setdefault(n, dict(world.mig[n]))
                for q, c in pod.mig:
                    m[q] -= c
            break
        else:
            left += 1
    return left


def plan_rank(plan: Plan) -> tuple[int, int, int, float]:
    """Plans compare by goals met, then evictions, then running pods sent back to pending
    (no room to re-place them), then GPU-hours lost."""
    pending = sum(1 for m in plan.moves if not m.to_node)
    return -plan.goals_met, len(plan.evictions), pending, plan.gpu_hours_lost

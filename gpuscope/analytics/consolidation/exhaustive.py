"""A bounded branch-and-bound over the goal units, for small clusters.

The greedy planner (:mod:`gpuscope.analytics.consolidation.search`) chooses each unit's node alone,
so it misses plans where one choice serves later units better: emptying the node whose pod
is largest so that its GPUs also meet a ``free_gpus`` goal, evicting one multi-GPU pod
rather than one fractional pod per unit, or taking a fractional job's GPUs so that the next
fractional job still finds room. Where the instance is small this search tries, unit by unit
(largest first, as the planner), every distinct node, each minimal set of evictions there
(few pods, so they can be listed; tried also where the unit fits somewhere now, after the
free room: a pinned unit may need that room), and two ways of picking a fractional unit's
GPUs, pruned by the best plan known. Complete plans rank by goals met, then evictions,
then evicted pods sent back to the queue (:func:`requeued`), so of two plans of equal
evictions the one that re-places its victims is kept. It stops after :data:`MAX_VISITS`
units placed, so its cost has a bound whatever the instance; what it returns is a script
of choices that :func:`gpuscope.analytics.consolidation.search.plan_with` replays into a
plan.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from gpuscope.analytics.consolidation.model import Goal, Placed, Plan
from gpuscope.analytics.consolidation.ranking import no_room
from gpuscope.analytics.consolidation.relocation import requeued
from gpuscope.analytics.consolidation.search import EXHAUSTIVE_PODS, Chooser, greedy_node
from gpuscope.analytics.consolidation.world import Option, Unit, World, units_of
from gpuscope.analytics.placement.allocation import EPS, NodeState

#: Instances with more units or nodes than these are left to the greedy planner.
MAX_UNITS = 64
MAX_NODES = 64
#: Units placed over the whole search before it stops with the best plan found.
MAX_VISITS = 4000
#: Minimal eviction sets tried per node and unit.
_SETS_PER_NODE = 4
#: Room tests spent listing one node's eviction sets for one unit.
_SET_CHECKS = 2000
#: Nodes tried for a unit that fits somewhere without evictions.
_FITS = 3


@dataclass(frozen=True, slots=True)
class Step:
    """One unit's choice: its node ("" gives the goal up), the pods evicted, its GPUs."""

    node: str
    evict: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()


class _Search:
    def __init__(
        self,
        goals: int,
        units: list[Unit],
        best: tuple[int, int, int],
        max_evictions: int | None,
    ) -> None:
        self.goals, self.units, self.max_evictions = goals, units, max_evictions
        #: (-goals met, evictions, evicted pods sent back to the queue) of the best plan
        #: known; only better ones are recorded.
        self.best = best
        self.script: list[Step] | None = None
        self.visits = 0

    def run(self, world: World, i: int, failed: frozenset[int], steps: list[Step]) -> None:
        met_at_most = self.goals - len(failed)
        head = (-met_at_most, len(world.evicted))
        if head > self.best[:2] or self.visits >= MAX_VISITS:
            return
        if head == self.best[:2] and self.best[2] == 0:
            return
        while i < len(self.units) and self.units[i].goal in failed:
            i += 1
        if i == len(self.units):
            rank = (*head, requeued(world))
            if rank < self.best:
                self.best, self.script = rank, list(steps)
            return
        unit = self.units[i]
        for name, option in self._options(world, unit, met_at_most):
            self.visits += 1
            child = world.copy()
            child.evict([child.pods[p.idx] for p in option.evictions])
            child.reserve(name, option.gpus, unit.share, unit.res, unit.mig)
            steps.append(Step(name, tuple(p.idx for p in option.evictions), option.gpus))
            self.run(child, i + 1, failed, steps)
            steps.pop()
        steps.append(Step(""))
        self.run(world, i + 1, failed | {unit.goal}, steps)
        steps.pop()

    def _allowance(self, world: World, met_at_most: int) -> int:
        """The most evictions one unit may add and still lead to a better plan."""
        allow = len(world.pods)
        if -met_at_most == self.best[0]:
            # as many evictions as the best plan only where that plan re-queues pods
            allow = self.best[1] - len(world.evicted) - (0 if self.best[2] else 1)
        if self.max_evictions is not None:
            allow = min(allow, self.max_evictions - len(world.evicted))
        return allow

    def _options(self, world: World, unit: Unit, met_at_most: int) -> list[tuple[str, Option]]:
        allow = self._allowance(world, met_at_most)
        fit: list[tuple[tuple[float, ...], str, Option]] = []
        evict: list[tuple[tuple[float, ...], str, Option]] = []
        seen: set[tuple[object, ...]] = set()
        for node in world.nodes:
            name = node.name
            if not world.eligible(name, unit):
                continue
            signature = (
                node.gpu_model,
                node.schedulable,
                node.taints,
                node.labels,
                node.mig_total,
                tuple(world.free[name]),
                tuple(world.res[name]),
                tuple(sorted(world.mig[name].items())),
                world.counted[name],
                tuple(
                    sorted(
                        (p.gpus, p.share, p.movable, p.res, p.mig, p.budget) for p in world.on[name]
                    )
                ),
            )
            if signature in seen:
                continue
            seen.add(signature)
            k = world.k_of(name, unit)
            ready = world.ready(name, unit.share)
            if world.room_after(name, unit):
                for gpus in _picks(world.free[name], ready, k, unit.share):
                    key = (sum(world.free[name][g] for g in ready),)
                    fit.append((key, name, Option((), 0.0, gpus)))
            elif allow > 0:
                for option in _eviction_sets(world, name, unit, allow):
                    after = list(world.free[name])
                    for p in option.evictions:
                        for g in p.gpus:
                            after[g] = min(1.0, after[g] + p.share)
                    ready = [g for g, f in enumerate(after) if f >= unit.share - EPS]
                    for gpus in _picks(after, ready, k, unit.share):
                        evict.append(
                            (option.rank, name, Option(option.evictions, option.gph, gpus))
                        )
        # room free now first (which free room matters less: the best few), then the
        # eviction sets: a unit that fits somewhere now may still be better placed where
        # evictions make room (another unit, pinned, needs the room it would take)
        fit.sort(key=lambda o: (o[0], o[1]))
        fit = fit[: 1 if unit.k == 1 and unit.share >= 1.0 - EPS else _FITS]
        evict.sort(key=lambda o: (o[0], o[1]))
        return [(name, option) for _, name, option in fit + evict]


def _picks(
    free: Sequence[float], ready: Sequence[int], k: int, share: float
) -> list[tuple[int, ...]]:
    """The unit's GPUs: fullest first (keeps whole GPUs whole) and, for a fraction, emptiest
    first (keeps more GPUs with room for the next fraction)."""
    fullest = tuple(sorted(sorted(ready, key=lambda g: (free[g], g))[:k]))
    if share >= 1.0 - EPS:
        return [fullest]
    emptiest = tuple(sorted(sorted(ready, key=lambda g: (-free[g], g))[:k]))
    return [fullest] if emptiest == fullest else [fullest, emptiest]


def _eviction_sets(world: World, name: str, unit: Unit, allow: int) -> list[Option]:
    """Minimal sets of at most ``allow`` movable pods whose eviction makes room for the unit,
    fewest pods then fewest GPU-hours first; the greedy's set where the node has many pods."""
    movable = sorted((p for p in world.on[name] if p.movable), key=lambda p: p.idx)
    if len(movable) > EXHAUSTIVE_PODS:
        option = greedy_node(world, name, unit)
        return [option] if option is not None and len(option.evictions) <= allow else []
    found: list[Option] = []
    budget = _SET_CHECKS
    for r in range(1, min(allow, len(movable)) + 1):
        for combo in itertools.combinations(movable, r):
            budget -= 1
            if budget < 0:
                break
            if not world.within_budgets(combo) or not world.room_after(name, unit, combo):
                continue
            if any(world.room_after(name, unit, combo[:j] + combo[j + 1 :]) for j in range(r)):
                continue  # not minimal
            found.append(Option(combo, sum(p.gph for p in combo)))
        if len(found) >= _SETS_PER_NODE:  # larger sets rank after these
            break
    found.sort(key=lambda o: o.rank)
    return found[:_SETS_PER_NODE]


def search_small(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    bound: Plan,
    *,
    max_evictions: int | None = None,
) -> Chooser | None:
    """A chooser that replays a plan better than ``bound`` (more goals, or as many with
    fewer evictions), or None when the instance is too large or none was found."""
    units = units_of(goals)
    world = World(nodes, placed)
    if len(units) > MAX_UNITS or len(world.nodes) > MAX_NODES:
        return None
    sent_back = sum(1 for m in bound.moves if not m.to_node)
    search = _Search(
        len(goals), units, (-bound.goals_met, len(bound.evictions), sent_back), max_evictions
    )
    search.run(world, 0, frozenset(), [])
    if search.script is None:
        return None
    script = iter(search.script)

    def replay(world: World, unit: Unit, budget: int | None) -> tuple[str, Option] | str:
        del budget  # the script was made for these units, in this order, within it
        step = next(script)
        if not step.node:
            if max_evictions is not None:
                return "no room within the max_evictions budget beside the other goals"
            return no_room(world, unit)
        pods = tuple(world.pods[i] for i in step.evict)
        return step.node, Option(pods, sum(p.gph for p in pods), step.gpus)

    return replay

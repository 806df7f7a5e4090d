"""Nodes ranked for a unit of a goal, kept up to date as a plan changes the world.

A scorer rates one node for one unit; :class:`NodeIndex` keeps the nodes in a heap by that
score and catches up from the world's change log, so many units of one shape cost one scan
of the cluster. The planner's own fits (best fit, first fit) and the reason given when no
node has room are here too; the world itself is gpuscope/analytics/consolidation/world.py.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from gpuscope.analytics.consolidation.world import Unit, World

__all__ = ["NodeIndex", "Scorer", "fit_best", "fit_first", "fits_now", "no_room", "node_index"]


#: Scores a node for a unit: (sort key, payload), or None when the node cannot serve it.
Scorer = Callable[[World, str, Unit], "tuple[tuple[Any, ...], Any] | None"]


class NodeIndex:
    """Nodes by a scorer's key for one kind of unit, kept up to date lazily from the
    world's change log (a heap with stale entries skipped), so that many units of the same
    shape cost one scan of the cluster, not one each."""

    def __init__(self, world: World, unit: Unit, scorer: Scorer) -> None:
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


def node_index(world: World, unit: Unit, tag: str, scorer: Scorer) -> NodeIndex:
    key = (
        tag,
        unit.k,
        unit.share,
        unit.models,
        unit.schedulable,
        unit.res,
        unit.tolerations,
        unit.mig,
        unit.node_terms,
    )
    index = world.indexes.get(key)
    if index is None:
        index = world.indexes[key] = NodeIndex(world, unit, scorer)
    return index


def fit_best(world: World, name: str, unit: Unit) -> tuple[tuple[Any, ...], None] | None:
    if not world.room_after(name, unit):
        return None
    ready = world.ready(name, unit.share)
    return (sum(world.free[name][g] for g in ready),), None


def fit_first(world: World, name: str, unit: Unit) -> tuple[tuple[Any, ...], None] | None:
    if not world.room_after(name, unit):
        return None
    return (), None


def fits_now(world: World, unit: Unit, *, best_fit: bool) -> str | None:
    if best_fit:
        top = node_index(world, unit, "fit-best", fit_best).top()
    else:
        top = node_index(world, unit, "fit-first", fit_first).top()
    return top[0][1] if top else None


def no_room(world: World, unit: Unit) -> str:
    if not any(world.eligible(n.name, unit) for n in world.nodes):
        offered = {p for n in world.nodes for p, c in n.mig_total if c > 0}
        missing = sorted(p for p, _ in unit.mig if p not in offered)
        if missing:
            return f"no node offers MIG profile {', '.join(missing)}"
        return "no node it may run on has enough GPUs of the model asked for"
    if world.allow and any(
        world.eligible(n.name, unit)
        and world.room_after(n.name, unit, [p for p in world.on[n.name] if p.movable])
        for n in world.nodes
    ):
        return (
            "no node has room within the disruptions its pods' PodDisruptionBudgets allow "
            "(each budget's disruptionsAllowed is spent across the whole plan)"
        )
    return "no node has room even after moving every pod that may move"

"""Which pods a pod that fits nowhere preempts, as kube-scheduler's DefaultPreemption picks.

Why: a replay without preemption leaves a high-priority pod waiting where the real
scheduler evicted lower-priority pods for it, and every figure after that drifts (on the
demo's week the planted 8-node training job never started in the replay). The rules
(``pkg/scheduler/framework/plugins/defaultpreemption`` and ``framework/preemption``):

- only a pod whose ``preemptionPolicy`` is not ``Never`` preempts, and only pods of a
  strictly lower priority are candidates;
- on each node: remove every candidate; if the pod still does not fit, the node is out.
  Otherwise put candidates back one by one, the most important first (higher priority,
  then earlier start: ``MoreImportantPod``), keeping each that leaves the pod room; the
  rest are the node's victims (``selectVictimsOnNode``);
- among the nodes, the one with (in order) the lowest highest-victim priority, the
  lowest sum of victim priorities, the fewest victims, the latest start among its
  highest-priority victims, then the first (``pickOneNodeForPreemption``; PodDisruption-
  Budgets, its first criterion, are not part of a replay's input).

The victims end at once: the replay does not model graceful termination, and a preempted
pod's replacement (its controller makes a new pod) is its own arrival in the history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gpuscope.analytics.whatif.events import Request


class Holder(Protocol):
    """A running pod as the replay keeps it."""

    @property
    def node(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def started(self) -> float: ...


H = TypeVar("H", bound=Holder)
H_contra = TypeVar("H_contra", bound=Holder, contravariant=True)


class Trial(Protocol[H_contra]):
    """The replay's cluster, as preemption tries victims on it."""

    def release(self, placed: H_contra) -> None: ...
    def restore(self, placed: H_contra) -> None: ...
    def fits(self, i: int, req: Request) -> bool: ...


@dataclass(frozen=True, slots=True)
class Choice:
    """The node a preemption frees and the pods (their replay ids) it evicts there."""

    node: int
    victims: tuple[int, ...]


def _victims_on(
    cluster: Trial[H], node: int, req: Request, candidates: list[tuple[int, H]]
) -> list[int] | None:
    for _, h in candidates:
        cluster.release(h)
    if not cluster.fits(node, req):
        for _, h in candidates:
            cluster.restore(h)
        return None
    victims: list[int] = []
    # the most important first: higher priority, then the earlier start
    for j, h in sorted(candidates, key=lambda c: (-c[1].priority, c[1].started, c[0])):
        cluster.restore(h)
        if not cluster.fits(node, req):
            cluster.release(h)
            victims.append(j)
    # undo the trial: the victims are still running until the choice is made
    held = dict(candidates)
    for j in victims:
        cluster.restore(held[j])
    return victims


def choose(
    cluster: Trial[H],
    req: Request,
    priority: int,
    on_node: Mapping[int, Iterable[int]],
    running: Mapping[int, H],
) -> Choice | None:
    """The node and victims DefaultPreemption picks for a pod of ``priority`` asking
    ``req`` (module docstring); None when no node can be freed for it."""
    best: tuple[tuple[float, ...], Choice] | None = None
    for node in sorted(on_node):
        candidates = [(j, running[j]) for j in sorted(on_node[node])
                      if running[j].priority < priority]  # fmt: skip
        if not candidates:
            continue
        victims = _victims_on(cluster, node, req, candidates)
        if not victims:  # None: cannot fit; []: fits without preempting (not this path)
            continue
        held = [running[j] for j in victims]
        top = max(h.priority for h in held)
        latest = max(h.started for h in held if h.priority == top)
        rank = (float(top), float(sum(h.priority for h in held)), float(len(held)), -latest)
        if best is None or rank < best[0]:
            best = (rank, Choice(node, tuple(victims)))
    return None if best is None else best[1]

"""Evicted pods placed again, best fit, in the room a plan leaves.

Shared by the planner and the baselines (gpuscope/analytics/consolidation/search.py and
exhaustive.py): each evicted pod goes to the node and GPUs that leave least slack, in the
order (largest or smallest first) that sends fewer pods back to the queue.
"""

from __future__ import annotations

from gpuscope.analytics.consolidation.world import Pod, World
from gpuscope.analytics.placement.allocation import EPS

__all__ = ["relocate", "relocate_all", "requeued"]


def relocate(world: World, pod: Pod, from_node: str) -> tuple[str, tuple[int, ...]]:
    """Best fit for an evicted pod in the room left: the node and GPUs leaving least slack."""
    best: tuple[float, str, tuple[int, ...]] | None = None
    need, share = len(pod.gpus), pod.share - EPS
    for node in world.nodes:
        name = node.name
        free = world.free[name]
        # the cheap tests first: most nodes of a full cluster lack the GPUs
        if need and sum(1 for f in free if f >= share) < need:
            continue
        if not world.res_fit(name, pod.res) or not world.mig_fit(name, pod.mig):
            continue
        if not world.admits(name, pod.task):
            continue
        fits = sorted((g for g, f in enumerate(free) if f >= share), key=lambda g: (free[g], g))
        gpus = tuple(sorted(fits[:need]))
        slack = sum(free[g] - pod.share for g in gpus)
        if best is None or (slack, name, gpus) < best:
            best = (slack, name, gpus)
            if slack <= EPS:
                break
    if best is None:
        return "", ()
    world.reserve(best[1], best[2], pod.share, pod.res, pod.mig)
    return best[1], best[2]


def _size(pod: Pod) -> float:
    return len(pod.gpus) * pod.share + sum(c for _, c in pod.mig) / 8 + pod.res[0] / 1e9


def relocate_all(world: World) -> dict[int, tuple[str, tuple[int, ...]]]:
    """Where each evicted pod goes (node "" for back to the queue), placed best fit in the
    room left: largest first and smallest first are both tried (on copies) and the order
    that re-queues fewer pods is applied to the world (ties: largest first). Largest first
    keeps big pods running; smallest first fits more pods where room is short (two 1-GPU
    pods rather than one 2-GPU pod in 2 free GPUs)."""
    orders = [
        sorted(world.evicted, key=lambda p: (-_size(p), p.idx)),
        sorted(world.evicted, key=lambda p: (_size(p), p.idx)),
    ]
    best: list[Pod] = orders[0]
    if len(world.evicted) > 1:
        fewest = None
        for order in orders:
            trial = world.copy()
            left = sum(not relocate(trial, trial.pods[p.idx], p.node)[0] for p in order)
            if fewest is None or left < fewest:
                fewest, best = left, order
            if not fewest:  # nobody re-queued: nothing to improve on
                break
    return {p.idx: relocate(world, p, p.node) for p in best}


def requeued(world: World) -> int:
    """How many evicted pods :func:`relocate_all` would send back to the queue (on a copy)."""
    if not world.evicted:
        return 0
    trial = world.copy()
    return sum(1 for node, _ in relocate_all(trial).values() if not node)

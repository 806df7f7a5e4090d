"""Why a pending GPU task cannot start now: the first reason, in the scheduler's terms.

The fragmentation detector counts pending pods by it (``pending_blocked_by``) and the quota
findings name it for a job that waits within its guarantee. It reads the allocation model
(:mod:`gpuscope.analytics.placement.allocation`): the same admission and room tests the detector's
``fits`` and the consolidation planner use.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.analytics.placement.allocation import (
    EPS,
    NodeState,
    Task,
    admits,
    has_room,
    mig_room,
    selects,
)

#: Why a pending GPU task cannot start now (:func:`blocker`), in the order they are tested.
BLOCKERS = (
    "mig_profile",
    "model",
    "selector",
    "closed",
    "cpu",
    "memory",
    "storage",
    "resources",
    "fragmentation",
    "capacity",
)


def blocker(nodes: Sequence[NodeState], task: Task) -> str:
    """Why the scheduler could not start the GPU task now, "" when it fits some node:

    - ``mig_profile``: no node offers a MIG profile the task asks for;
    - ``model``: no node has a GPU model the task allows;
    - ``selector``: nodes of that model exist, but none matches its node selector or
      required node affinity;
    - ``closed``: every node of an allowed model is NotReady, cordoned or tainted against it;
    - ``cpu`` / ``memory`` / ``storage``: nodes that admit it have the GPUs, but every such
      node lacks this (the first short resource of each, when they all agree; else
      ``resources``);
    - ``fragmentation``: the nodes that admit it hold enough usable GPUs together, no one
      node enough (consolidation would help);
    - ``capacity``: not even together do they.
    """
    if not task.asks_gpu:
        return ""
    if task.mig:
        offered = {p for n in nodes for p, c in n.mig_total if c > 0}
        if any(p not in offered for p, _ in task.mig):
            return "mig_profile"
    models = [
        n
        for n in nodes
        if (n.gpus or n.mig_total) and (not task.gpu_models or n.gpu_model in task.gpu_models)
    ]
    if not models:
        return "model"
    selected = [n for n in models if selects(n, task)]
    if not selected:
        return "selector"
    admitting = [n for n in selected if admits(n, task)]
    if not admitting:
        return "closed"
    if task.mig:
        return _mig_blocker(admitting, task)
    usable = [sum(1 for f in n.gpus if f >= task.gpu_share - EPS) for n in admitting]
    with_gpus = [n for n, u in zip(admitting, usable, strict=True) if u >= task.gpu_count]
    if with_gpus:
        short = set()
        for n in with_gpus:
            if has_room(n, task.cpu_milli, task.memory_mib, task.ephemeral_mib):
                return ""
            if task.cpu_milli > n.cpu_milli_free:
                short.add("cpu")
            elif n.memory_mib_total and task.memory_mib > n.memory_mib_free:
                short.add("memory")
            else:
                short.add("storage")
        return short.pop() if len(short) == 1 else "resources"
    return "fragmentation" if sum(usable) >= task.gpu_count else "capacity"


def _mig_blocker(admitting: Sequence[NodeState], task: Task) -> str:
    """The MIG analogue: ``cpu``/``memory``/``storage`` where the instances are free but
    that is not; ``fragmentation`` where the nodes hold the instances together only;
    ``capacity`` otherwise."""
    with_mig = [n for n in admitting if mig_room(n, task.mig)]
    if with_mig:
        short = set()
        for n in with_mig:
            if has_room(n, task.cpu_milli, task.memory_mib, task.ephemeral_mib):
                return ""
            if task.cpu_milli > n.cpu_milli_free:
                short.add("cpu")
            elif n.memory_mib_total and task.memory_mib > n.memory_mib_free:
                short.add("memory")
            else:
                short.add("storage")
        return short.pop() if len(short) == 1 else "resources"
    together = all(sum(dict(n.mig_free).get(p, 0) for n in admitting) >= c for p, c in task.mig)
    return "fragmentation" if together else "capacity"

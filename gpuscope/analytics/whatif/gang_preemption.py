"""Which running jobs a job that fits nowhere preempts in the topology-aware replay.

Why: the main replay models kube-scheduler's DefaultPreemption
(:mod:`gpuscope.analytics.whatif.preemption`); without the same here, a high-priority
multi-node job that really started by preempting lower-priority work (the demo's planted
8-node pre-training job) never started in the gang replay, and the What-if section said
"no policy started it" beside "what happened: started, spread".

The rule, per pod of the job in turn: the node where room for the pod costs least, freeing
lower-priority jobs on it the least important first (lower priority, then the later start:
``MoreImportantPod`` reversed); the cost is the highest victim priority, then the number of
victims. A victim job leaves every node it holds (Kueue and KAI preempt whole workloads).
A job that must stay inside one domain (a required level) does not preempt here: the
gang schedulers that keep domains decide their victims per domain, which this replay does
not model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Running:
    """A running job as the preemption sees it."""

    priority: int
    started: float
    nodes: tuple[str, ...]  # one entry per pod
    gpus_per_pod: int


def _cost(
    node: str, need: int, candidates: Sequence[tuple[int, Running]]
) -> tuple[float, int, list[int]] | None:
    """Victims on ``node`` that free ``need`` GPUs there, least important first."""
    taken: list[int] = []
    freed = 0
    for seq, r in candidates:
        if freed >= need:
            break
        freed += r.nodes.count(node) * r.gpus_per_pod
        taken.append(seq)
    if freed < need:
        return None
    top = max((r.priority for s, r in candidates if s in taken), default=-math.inf)
    return (float(top), len(taken), taken)


def victims_for(
    pods: int,
    gpus_per_pod: int,
    priority: int,
    free: Mapping[str, int],
    running: Mapping[int, Running],
) -> tuple[list[str], list[int]] | None:
    """The nodes the job's pods take and the running jobs (their ids) preempted for them
    (module docstring); None where lower-priority work cannot make room."""
    left = dict(free)
    chosen: list[int] = []
    nodes: list[str] = []
    lower = sorted(
        ((s, r) for s, r in running.items() if r.priority < priority),
        key=lambda c: (c[1].priority, -c[1].started, c[0]),
    )
    for _ in range(pods):
        best: tuple[float, int, str, list[int]] | None = None
        for node in sorted(left):
            need = gpus_per_pod - left[node]
            if need <= 0:
                found: tuple[float, int, list[int]] | None = (-math.inf, 0, [])
            else:
                here = [(s, r) for s, r in lower if s not in chosen and node in r.nodes]
                found = _cost(node, need, here)
            if found is not None and (best is None or (found[0], found[1]) < best[:2]):
                best = (found[0], found[1], node, found[2])
        if best is None:
            return None
        for seq in best[3]:
            chosen.append(seq)
            r = running[seq]
            for n in r.nodes:
                left[n] += r.gpus_per_pod
        left[best[2]] -= gpus_per_pod
        nodes.append(best[2])
    return (nodes, chosen) if chosen else None

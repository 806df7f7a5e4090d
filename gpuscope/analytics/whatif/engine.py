"""The replay: pod events through one placement policy, on a node inventory.

Events are taken in time order. A departure frees its pod's GPUs, CPU, memory and MIG
instances, then the queue is retried in arrival order: each waiting pod that fits now
starts now (only the freed node need be tried). An arrival is placed on the best-scoring
feasible node (:mod:`gpuscope.analytics.whatif.policies`), ties broken as that policy's scheduler
breaks them (at random with the replay's seeded RNG, or the first node in inventory
order); a pod that fits nowhere waits in the queue, or with ``drop=True`` is dropped as
the FGD paper's simulator drops it. The queue does not block: a later pod that fits
starts while an earlier one waits, as in Kubernetes.

The cluster (nodes grouped by signature, memoised scores) is
:class:`~gpuscope.analytics.whatif.replay_cluster.ReplayCluster`; preemption is
:mod:`~gpuscope.analytics.whatif.preemption`.

Arrivals stop at the last arrival; the replay then runs departures up to ``until`` (the
end of a history window) so that queued pods may still start. Figures "when arrivals
stop" are taken at the last arrival.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import random
from collections import Counter
from collections.abc import Sequence

from gpuscope.analytics.placement.fragmentation import TaskMix, learn_task_mix
from gpuscope.analytics.whatif import preemption
from gpuscope.analytics.whatif.events import MILLI, Inventory, PodEvent
from gpuscope.analytics.whatif.policies import POLICIES, TIES, Context
from gpuscope.analytics.whatif.replay_cluster import Placed, ReplayCluster, RequestKey, request_key
from gpuscope.analytics.whatif.results import Placement, PolicyResult, Sample

log = logging.getLogger(__name__)

#: Events between two fragmentation samples, at most this many samples per replay.
FRAGMENTATION_SAMPLES = 100
SECONDS_PER_HOUR = 3600.0


def replay(
    inventory: Inventory,
    events: Sequence[PodEvent],
    policy: str,
    *,
    seed: int = 0,
    mix: TaskMix | None = None,
    drop: bool = False,
    until: float | None = None,
    samples: int = FRAGMENTATION_SAMPLES,
    ties: str | None = None,
) -> PolicyResult:
    """Replay ``events`` on the empty ``inventory`` with ``policy`` (module docstring).

    ``mix``: the task mix FGD and the fragmentation figures use (default: learnt from the
    events' requests, as the detector learns it from the workload). ``ties``: ``random``
    or ``first`` (default: the policy's own, :data:`gpuscope.analytics.whatif.policies.TIES`)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    arrived_events = len(events)
    events = list(events)  # preempted pods' replacements are appended
    order = sorted(range(len(events)), key=lambda j: (events[j].arrive, j))
    if mix is None:
        mix = learn_task_mix([e.request.task for e in events])
    ctx = Context(mix=mix, rng=random.Random(seed))  # noqa: S311 (a seeded replay, not a secret)
    if ties not in (None, "random", "first"):
        raise ValueError(f"ties={ties!r}: expected 'random' or 'first'")
    cluster = ReplayCluster(inventory.nodes, policy, ctx, ties or TIES[policy])
    every = max(1, len(events) // max(1, samples))
    departures: list[tuple[float, int, Placed]] = []
    queue: dict[int, PodEvent] = {}  # event index -> event, in arrival order
    # the queue by request type and priority, arrival order
    waiting: dict[tuple[RequestKey, int], list[int]] = {}
    position = {j: n for n, j in enumerate(order)}
    waited: dict[int, float] = {}
    started = 0
    queued_gpu_seconds = 0.0
    arrived_milli = 0
    timeline: list[Sample] = []
    running: dict[int, Placed] = {}
    finished: dict[int, Placed] = {}
    ended: dict[int, float] = {}
    last_arrival = events[order[-1]].arrive if order else 0.0
    end = max(until if until is not None else last_arrival, last_arrival)
    at_stop: tuple[int, tuple[tuple[int, int], ...], float] | None = None

    on_node: dict[int, set[int]] = {}
    priorities: Counter[int] = Counter()  # of the running pods
    preempted = 0
    by_name = {n.name: i for i, n in enumerate(inventory.nodes)}

    def start(j: int, event: PodEvent, now: float, node: int | None = None) -> bool:
        nonlocal started, queued_gpu_seconds
        victims: list[tuple[int, Placed]] = []
        if node is None and event.node is not None:  # running where the window starts
            real = by_name.get(event.node)
            node = real if real is not None and cluster.fits(real, event.request) else None
        if node is None:
            node = cluster.choose(event.request)
        if node is None:
            node = preempt(event, now, victims)
        if node is None:
            return False
        placed = cluster.place(node, event.request, now)
        placed.key, placed.priority = event.key, event.priority
        running[j] = placed
        priorities[event.priority] += 1
        on_node.setdefault(node, set()).add(j)
        started += j < arrived_events  # a replacement's start is its job's second
        queued_gpu_seconds += (now - event.arrive) * event.request.gpu_milli / MILLI
        if event.duration is not None:
            heapq.heappush(departures, (now + event.duration, j, placed))
        for k, victim in victims:
            requeue(k, victim, now)
        return True

    def preempt(event: PodEvent, now: float, victims: list[tuple[int, Placed]]) -> int | None:
        """The node DefaultPreemption frees for ``event``, its victims ended now and added
        to ``victims`` (:mod:`gpuscope.analytics.whatif.preemption`); None when none can be
        freed."""
        nonlocal preempted
        if not event.preempts or not running:
            return None
        if min(priorities) >= event.priority:  # nothing running is of a lower priority
            return None
        trial = cluster.trial()
        choice = preemption.choose(trial, event.request, event.priority, on_node, running)
        trial.settle()
        if choice is None:
            return None
        for k in choice.victims:
            victims.append((k, running[k]))
            stop(k, now)
            preempted += 1
        return choice.node

    def requeue(k: int, victim: Placed, now: float) -> None:
        """A preempted pod's replacement (its controller makes a new pod): it arrives now
        and runs what the victim had left. Only the replay's own preemptions make one: a
        pod preempted in the history has its replacement there, as its own arrival."""
        duration = events[k].duration
        left = None if duration is None else max(0.0, duration - (now - victim.started))
        j = len(events)
        events.append(dataclasses.replace(events[k], key=f"{events[k].key}#replaced",
                                          arrive=now, duration=left))  # fmt: skip
        position[j] = j
        if not start(j, events[j], now):
            queue[j] = events[j]
            waiting.setdefault((request_key(events[j].request), events[j].priority), []).append(j)

    def stop(k: int, now: float) -> None:
        placed = running.pop(k)
        priorities[placed.priority] -= 1
        if not priorities[placed.priority]:
            del priorities[placed.priority]
        on_node[placed.node].discard(k)
        cluster.release(placed)
        ended[k] = now
        finished[k] = placed

    def record(now: float, n: int) -> None:
        ratio = cluster.fgd_ratio() if n % every == 0 else None
        timeline.append(
            Sample(now, arrived_milli / MILLI, cluster.allocated / MILLI, len(queue), ratio)
        )

    def depart_until(t: float) -> None:
        while departures and departures[0][0] <= t:
            now, k, placed = heapq.heappop(departures)
            if running.get(k) is not placed:  # preempted before its end
                continue
            stop(k, now)
            retry(placed.node, now)
            record(now, len(timeline))

    def retry(node: int, now: float) -> None:
        """Start waiting pods, highest priority then earliest first (kube-scheduler's
        queue order), on the node a departure freed: no other node gained room, and each
        waiting pod fitted nowhere when it was last tried, so this node is the only one it
        can fit now (the queue is kept by request type and priority, so a long queue costs
        one check per type)."""
        while waiting:
            sid = cluster.node_sid[node]
            fit = [
                members[0]
                for wkey, members in waiting.items()
                if cluster.score(sid, events[members[0]].request, wkey[0]) is not None
            ]
            if not fit:
                return
            j = min(fit, key=lambda m: (-events[m].priority, position[m]))
            wkey = (request_key(events[j].request), events[j].priority)
            waiting[wkey].pop(0)
            if not waiting[wkey]:
                del waiting[wkey]
            start(j, queue.pop(j), now, node)

    for n, j in enumerate(order):
        event = events[j]
        depart_until(event.arrive)
        arrived_milli += event.request.gpu_milli
        if not start(j, event, event.arrive):  # it waits (or, with drop, is dropped)
            if drop:
                waited[j] = event.arrive
            else:
                queue[j] = event
                waiting.setdefault((request_key(event.request), event.priority), []).append(j)
        record(event.arrive, n)
        if n == len(order) - 1:
            at_stop = (cluster.allocated, cluster.headroom(), cluster.fgd_ratio())
    depart_until(end)
    for event in queue.values():
        queued_gpu_seconds += (end - event.arrive) * event.request.gpu_milli / MILLI
    allocated, headroom, frag = at_stop or (0, cluster.headroom(), cluster.fgd_ratio())
    log.debug("whatif policy=%s seed=%d started=%d of %d", policy, seed, started, len(events))
    return PolicyResult(
        policy=policy,
        seed=seed,
        capacity_gpus=cluster.capacity,
        arrived_gpus=arrived_milli / MILLI,
        allocated_gpus=allocated / MILLI,
        jobs_arrived=arrived_events,
        jobs_started=started,
        jobs_never_started=arrived_events - started,
        queued_gpu_hours=queued_gpu_seconds / SECONDS_PER_HOUR,
        fgd_ratio=frag,
        headroom=headroom,
        timeline=tuple(timeline),
        placements=tuple(
            Placement(
                key=p.key,
                node=inventory.nodes[p.node].name,
                gpus=tuple(p.gpus),
                start=p.started,
                end=ended.get(j),
            )
            for j, p in sorted((running | finished).items())
        ),
        jobs_preempted=preempted,
    )

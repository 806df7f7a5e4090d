"""The replay: pod events through one placement policy, on a node inventory.

Events are taken in time order. A departure frees its pod's GPUs, CPU, memory and MIG
instances, then the queue is retried in arrival order: each waiting pod that fits now
starts now (only the freed node need be tried). An arrival is placed on the best-scoring
feasible node (:mod:`gpuscope.analytics.whatif.policies`), ties broken as that policy's scheduler
breaks them (at random with the replay's seeded RNG, or the first node in inventory
order); a pod that fits nowhere waits in the queue, or with ``drop=True`` is dropped as
the FGD paper's simulator drops it. The queue does not block: a later pod that fits
starts while an earlier one waits, as in Kubernetes.

Nodes with the same signature (:mod:`gpuscope.analytics.whatif.nodes`) share one score and one FGD
value per request type, so a replay of thousands of pods over a thousand nodes scores a
few dozen distinct node shapes per pod rather than every node.

Arrivals stop at the last arrival; the replay then runs departures up to ``until`` (the
end of a history window) so that queued pods may still start. Figures "when arrivals
stop" are taken at the last arrival.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

from gpuscope.analytics.placement.allocation import NodeState
from gpuscope.analytics.placement.fragmentation import TaskMix, learn_task_mix, node_placements
from gpuscope.analytics.whatif import preemption
from gpuscope.analytics.whatif.events import MILLI, Inventory, PodEvent, Request
from gpuscope.analytics.whatif.nodes import Signature, SimNode, kind_key
from gpuscope.analytics.whatif.policies import (
    GPU_CHOICE,
    POLICIES,
    SCORERS,
    TIES,
    Context,
    feasible,
    take,
)
from gpuscope.analytics.whatif.results import HEADROOM_SIZES, Placement, PolicyResult, Sample

log = logging.getLogger(__name__)

#: Events between two fragmentation samples, at most this many samples per replay.
FRAGMENTATION_SAMPLES = 100
SECONDS_PER_HOUR = 3600.0

#: (request type: the mix's group key plus MIG; hashable)
RequestKey = tuple[object, ...]


@dataclass(slots=True)
class _Placed:
    node: int
    gpus: list[int]
    request: Request
    started: float
    key: str = ""
    priority: int = 0


def _request_key(req: Request) -> RequestKey:
    t = req.task
    return (
        t.cpu_milli,
        req.share_milli,
        t.gpu_count,
        t.spec_text if t.gpu_count else "",
        t.memory_mib,
        t.ephemeral_mib,
        tuple(sorted(t.tolerations)),
        req.mig,
    )


class _Cluster:
    """The nodes, grouped by signature, with memoised feasibility and scores."""

    def __init__(self, nodes: Sequence[NodeState], policy: str, ctx: Context, ties: str) -> None:
        kinds: dict[tuple[object, ...], int] = {}
        self.templates: list[NodeState] = []
        self.nodes: list[SimNode] = []
        for node in nodes:
            key = kind_key(node)
            if key not in kinds:
                kinds[key] = len(self.templates)
                self.templates.append(node)
            self.nodes.append(SimNode.of(kinds[key], node))
        # signatures get small integer ids, so the hot loop hashes ints, not tuples
        self.ids: dict[Signature, int] = {}
        self.sig_of: list[Signature] = []
        self.sigs: list[Signature] = [n.signature() for n in self.nodes]
        self.node_sid: list[int] = [self._sid(sig) for sig in self.sigs]
        self.groups: dict[int, list[int]] = {}
        for i, sid in enumerate(self.node_sid):
            self.groups.setdefault(sid, []).append(i)
        self.scorer = SCORERS[policy]
        self.choice = GPU_CHOICE.get(policy, "best")
        self.ties = ties
        self.ctx = ctx
        self.scores: dict[RequestKey, dict[int, int | None]] = {}
        self.capacity = sum(len(n.gpus) for n in nodes if n.schedulable)
        self.allocated = 0  # milli-GPU

    def _sid(self, sig: Signature) -> int:
        sid = self.ids.get(sig)
        if sid is None:
            sid = self.ids[sig] = len(self.sig_of)
            self.sig_of.append(sig)
        return sid

    def score(self, sid: int, req: Request, rkey: RequestKey) -> int | None:
        """The policy's score of signature ``sid`` for the request, None where it does not
        fit (memoised per request type)."""
        cache = self.scores.setdefault(rkey, {})
        if sid in cache:
            return cache[sid]
        sig = self.sig_of[sid]
        template = self.templates[sig[0]]
        value = self.scorer(template, sig, req, self.ctx) if feasible(template, sig, req) else None
        cache[sid] = value
        return value

    def choose(self, req: Request) -> int | None:
        """The node the policy puts the pod on, None when none fits."""
        rkey = _request_key(req)
        best: int | None = None
        tied: list[list[int]] = []
        cache = self.scores.setdefault(rkey, {})
        for sid, members in self.groups.items():
            s = cache[sid] if sid in cache else self.score(sid, req, rkey)
            if s is None:
                continue
            if best is None or s > best:
                best, tied = s, [members]
            elif s == best:
                tied.append(members)
        if best is None:
            return None
        if self.ties == "first":
            return min(min(m) for m in tied)
        pick = self.ctx.rng.randrange(sum(len(m) for m in tied))
        for members in tied:
            if pick < len(members):
                return members[pick]
            pick -= len(members)
        raise AssertionError("unreachable")

    def _move(self, i: int) -> None:
        old, new = self.sigs[i], self.nodes[i].signature()
        if old == new:
            return
        old_sid, new_sid = self.node_sid[i], self._sid(new)
        members = self.groups[old_sid]
        members.remove(i)
        if not members:
            del self.groups[old_sid]
        self.groups.setdefault(new_sid, []).append(i)
        self.sigs[i] = new
        self.node_sid[i] = new_sid

    def place(self, i: int, req: Request, now: float) -> _Placed:
        node = self.nodes[i]
        template = self.templates[node.kind]
        gpus = take(node.gpus, req, self.choice, self.ctx, template, self.sigs[i])
        share = req.share_milli
        for g in gpus:
            node.gpus[g] -= share
            assert node.gpus[g] >= 0, "GPU over-committed"
        node.cpu -= req.task.cpu_milli
        if template.memory_mib_total:
            node.memory -= req.task.memory_mib
        for profile, count in req.mig:
            node.mig[profile] -= count
        assert node.cpu >= 0, "CPU over-committed"
        assert node.memory >= 0, "memory over-committed"
        self.allocated += share * len(gpus)
        self._move(i)
        return _Placed(i, gpus, req, now)

    def restore(self, placed: _Placed) -> None:
        """Take back exactly what ``placed`` held (a preemption's trial undone)."""
        node = self.nodes[placed.node]
        share = placed.request.share_milli
        for g in placed.gpus:
            node.gpus[g] -= share
        node.cpu -= placed.request.task.cpu_milli
        if self.templates[node.kind].memory_mib_total:
            node.memory -= placed.request.task.memory_mib
        for profile, count in placed.request.mig:
            node.mig[profile] -= count
        self.allocated += share * len(placed.gpus)
        self._move(placed.node)

    def fits(self, i: int, req: Request) -> bool:
        return self.score(self.node_sid[i], req, _request_key(req)) is not None

    def release(self, placed: _Placed) -> None:
        node = self.nodes[placed.node]
        share = placed.request.share_milli
        for g in placed.gpus:
            node.gpus[g] += share
        node.cpu += placed.request.task.cpu_milli
        if self.templates[node.kind].memory_mib_total:
            node.memory += placed.request.task.memory_mib
        for profile, count in placed.request.mig:
            node.mig[profile] += count
        self.allocated -= share * len(placed.gpus)
        self._move(placed.node)

    def fgd_ratio(self) -> float:
        """The cluster's FGD fragmentation ratio (fragmented / free GPU on open nodes)."""
        frag = free = 0.0
        for sid, members in self.groups.items():
            sig = self.sig_of[sid]
            template = self.templates[sig[0]]
            if not template.schedulable or not sig[3]:
                continue
            node_free = sum(sig[3]) / MILLI
            if node_free <= 0:
                continue
            free += node_free * len(members)
            frag += self.ctx.frag(template, sig) * len(members)
        return min(1.0, frag / free) if free > 0 else 0.0

    def headroom(self) -> tuple[tuple[int, int], ...]:
        free = [
            sum(1 for g in n.gpus if g >= MILLI)
            for n in self.nodes
            if self.templates[n.kind].schedulable and n.gpus
        ]
        return tuple((k, node_placements(free, k)[0]) for k in HEADROOM_SIZES)


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
    cluster = _Cluster(inventory.nodes, policy, ctx, ties or TIES[policy])
    every = max(1, len(events) // max(1, samples))
    departures: list[tuple[float, int, _Placed]] = []
    queue: dict[int, PodEvent] = {}  # event index -> event, in arrival order
    # the queue by request type and priority, arrival order
    waiting: dict[tuple[RequestKey, int], list[int]] = {}
    position = {j: n for n, j in enumerate(order)}
    waited: dict[int, float] = {}
    started = 0
    queued_gpu_seconds = 0.0
    arrived_milli = 0
    timeline: list[Sample] = []
    running: dict[int, _Placed] = {}
    finished: dict[int, _Placed] = {}
    ended: dict[int, float] = {}
    last_arrival = events[order[-1]].arrive if order else 0.0
    end = max(until if until is not None else last_arrival, last_arrival)
    at_stop: tuple[int, tuple[tuple[int, int], ...], float] | None = None

    on_node: dict[int, set[int]] = {}
    preempted = 0
    by_name = {n.name: i for i, n in enumerate(inventory.nodes)}

    def start(j: int, event: PodEvent, now: float, node: int | None = None) -> bool:
        nonlocal started, queued_gpu_seconds
        victims: list[tuple[int, _Placed]] = []
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
        on_node.setdefault(node, set()).add(j)
        started += j < arrived_events  # a replacement's start is its job's second
        queued_gpu_seconds += (now - event.arrive) * event.request.gpu_milli / MILLI
        if event.duration is not None:
            heapq.heappush(departures, (now + event.duration, j, placed))
        for k, victim in victims:
            requeue(k, victim, now)
        return True

    def preempt(event: PodEvent, now: float, victims: list[tuple[int, _Placed]]) -> int | None:
        """The node DefaultPreemption frees for ``event``, its victims ended now and added
        to ``victims`` (:mod:`gpuscope.analytics.whatif.preemption`); None when none can be
        freed."""
        nonlocal preempted
        if not event.preempts or not running:
            return None
        if min(p.priority for p in running.values()) >= event.priority:
            return None
        choice = preemption.choose(cluster, event.request, event.priority, on_node, running)
        if choice is None:
            return None
        for k in choice.victims:
            victims.append((k, running[k]))
            stop(k, now)
            preempted += 1
        return choice.node

    def requeue(k: int, victim: _Placed, now: float) -> None:
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
            waiting.setdefault((_request_key(events[j].request), events[j].priority), []).append(j)

    def stop(k: int, now: float) -> None:
        placed = running.pop(k)
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
            wkey = (_request_key(events[j].request), events[j].priority)
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
                waiting.setdefault((_request_key(event.request), event.priority), []).append(j)
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

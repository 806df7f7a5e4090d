"""What-if for pod groups on a topology: how many multi-node jobs a topology-aware policy
starts inside one domain, beside topology-blind ones, on the same trace.

The replay is gang- and domain-aware, which the per-pod engine
(:mod:`gpuscope.analytics.whatif.engine`) is not: a job is ``pods`` pods of
``gpus_per_pod`` whole GPUs, started all at once or not at all (as Kueue admits a
Workload), in arrival order with best-effort FIFO (every waiting job that fits now starts,
as Kueue's ``BestEffortFIFO``); it runs ``duration`` seconds. A multi-pod job asks to stay
inside one domain of ``level`` (Kueue's ``podset-required-topology``).

Policies:

- ``leastallocated`` / ``mostallocated`` (topology-blind): every pod goes to the node with
  the most / the fewest free GPUs left that holds it, as kube-scheduler's LeastAllocated /
  MostAllocated scoring on the GPU would; the job's pods land wherever that is, and the
  job counts as started *inside one domain* only if they happen to share one.
- ``tas-bestfit`` (Kueue TAS, BestFit): among the domains of the level that can hold the
  whole job, the one that fits it tightest (fewest placeable pods; Kueue's BestFit
  optimises the last domain it takes to leave the least free, and a required-topology job
  takes one); inside it nodes with the most room first, the last pods on the node that
  fits them tightest.
- ``kai-fullest`` (KAI-Scheduler): the feasible domain with the fewest free GPUs relative
  to the request (KAI's bin-packing of domains); inside it nodes with the most room first.

A job not ``required`` to stay in one domain (a preferred level, or none) is placed by the
topology-aware policies in one domain when one holds it, else spread as ``mostallocated``
places it (Kueue's preferred mode climbs to coarser levels up to the whole cluster).

Single-pod jobs are placed the same way by every policy's node rule: blind policies as
above, topology-aware ones packing (``mostallocated``: Kueue TAS places unconstrained pods
LeastFreeCapacity, KAI bin-packs by default). The trace used by the tests and the docs is
:func:`synthetic_trace` (docs/analytics.md, "Topology-aware what-if").
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuscope.analytics.whatif.gang_preemption import Running, victims_for

TOPOLOGY_POLICIES = ("leastallocated", "mostallocated", "tas-bestfit", "kai-fullest")


@dataclass(frozen=True, slots=True)
class GangJob:
    name: str
    arrival: float
    duration: float
    pods: int
    gpus_per_pod: int
    #: True: the job waits for one domain to hold it (a required level); False: a
    #: topology-aware policy keeps it in one domain where one holds it, else starts it
    #: spread, packed (a preferred level, or none asked: Kueue climbs to coarser levels,
    #: KAI places it best-effort)
    required: bool = True
    #: Its priority; a job that fits nowhere preempts lower-priority jobs
    #: (:mod:`gpuscope.analytics.whatif.gang_preemption`) unless ``preempts`` is False.
    priority: int = 0
    preempts: bool = True

    @property
    def gpus(self) -> int:
        return self.pods * self.gpus_per_pod


@dataclass(frozen=True, slots=True)
class TopoNode:
    name: str
    gpus: int
    domain: str


@dataclass(frozen=True, slots=True)
class GangResult:
    policy: str
    jobs: int
    started: int
    multi_node_jobs: int
    multi_node_started: int
    #: multi-node jobs whose pods all ran inside one domain
    multi_node_in_one_domain: int
    multi_node_spread: int
    mean_multi_node_wait_hours: float
    waits: dict[str, float] = field(default_factory=dict)
    #: multi-node jobs that started only after waiting (wait > 0)
    multi_node_waited: int = 0
    #: hours every multi-node job waited: to its start, or to ``until`` for one that never
    #: started (0 for those when the replay has no end)
    multi_node_queued_hours: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "jobs": self.jobs,
            "started": self.started,
            "multi_node_jobs": self.multi_node_jobs,
            "multi_node_started": self.multi_node_started,
            "multi_node_in_one_domain": self.multi_node_in_one_domain,
            "multi_node_spread": self.multi_node_spread,
            "multi_node_never_started": self.multi_node_jobs - self.multi_node_started,
            "multi_node_waited": self.multi_node_waited,
            "mean_multi_node_wait_hours": round(self.mean_multi_node_wait_hours, 4),
            "multi_node_queued_hours": round(self.multi_node_queued_hours, 4),
        }


def _pick_node(free: Mapping[str, int], names: Sequence[str], k: int, most_room: bool) -> str:
    """The node with the most (or fewest) free GPUs that holds ``k``, the first in
    ``names`` on a tie; "" for none (one pass: a week's replay calls it per pod)."""
    best, room = "", -1
    for n in names:
        f = free[n]
        if f >= k and (room < 0 or (f > room if most_room else f < room)):
            best, room = n, f
    return best


def place_blind(
    free: Mapping[str, int], names: Sequence[str], job: GangJob, most_room: bool
) -> list[str] | None:
    """Pod by pod on the node with the most (or fewest) free GPUs that holds it."""
    left = dict(free)
    out = []
    for _ in range(job.pods):
        node = _pick_node(left, names, job.gpus_per_pod, most_room)
        if not node:
            return None
        left[node] -= job.gpus_per_pod
        out.append(node)
    return out


def bestfit_nodes(cap: Mapping[str, int], pods: int) -> list[str]:
    """Kueue BestFit inside a domain: nodes with the most room first; the last node taken
    is the one that fits the remaining pods tightest. ``cap``: pods each node holds."""
    left = {n: c for n, c in cap.items() if c > 0}
    out: list[str] = []
    remaining = pods
    while remaining > 0 and left:
        fitting = [n for n, c in left.items() if c >= remaining]
        if fitting:
            node = min(fitting, key=lambda n: (left[n], n))
            out += [node] * remaining
            return out
        node = max(left, key=lambda n: (left[n], [-ord(ch) for ch in n]))
        out += [node] * left[node]
        remaining -= left.pop(node)
    return out if remaining == 0 else []


def choose_domain(
    free: Mapping[str, int],
    domains: Mapping[str, Sequence[str]],
    job: GangJob,
    policy: str,
) -> str:
    """The domain a topology-aware policy starts the job in ("" when none holds it)."""
    k = job.gpus_per_pod
    feasible = {
        d: sum(free[n] // k for n in members)
        for d, members in domains.items()
        if sum(free[n] // k for n in members) >= job.pods
    }
    if not feasible:
        return ""
    if policy == "tas-bestfit":
        return min(feasible, key=lambda d: (feasible[d], d))
    # kai-fullest: the least free GPUs relative to the request
    return min(feasible, key=lambda d: (sum(free[n] for n in domains[d]) / job.gpus, d))


def place_aware(
    free: Mapping[str, int], domains: Mapping[str, Sequence[str]], job: GangJob, policy: str
) -> list[str] | None:
    domain = choose_domain(free, domains, job, policy)
    if not domain:
        return None
    cap = {n: free[n] // job.gpus_per_pod for n in domains[domain]}
    if policy == "tas-bestfit":
        nodes = bestfit_nodes(cap, job.pods)
    else:
        nodes = []
        for n in sorted(cap, key=lambda n: (-cap[n], n)):
            nodes += [n] * min(cap[n], job.pods - len(nodes))
    return nodes or None


def replay_gangs(
    nodes: Sequence[TopoNode],
    jobs: Sequence[GangJob],
    policy: str,
    *,
    until: float | None = None,
) -> GangResult:
    """Replay the jobs under the policy (module docstring); deterministic. ``until``: the
    end of the window replayed (a stored week's end): nothing starts after it, and a job
    still waiting then waited until it. A job of infinite ``duration`` never ends (a
    snapshot's pods)."""
    if policy not in TOPOLOGY_POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {TOPOLOGY_POLICIES}")
    names = [n.name for n in nodes]
    domain_of = {n.name: n.domain for n in nodes}
    domains: dict[str, list[str]] = {}
    for n in nodes:
        domains.setdefault(n.domain, []).append(n.name)
    free = {n.name: n.gpus for n in nodes}
    total = sum(free.values())
    ends: list[tuple[float, int, list[str], int]] = []  # (end, seq, nodes, gpus per pod)
    running: dict[int, tuple[GangJob, Running]] = {}
    waiting: list[GangJob] = []
    order = sorted(jobs, key=lambda j: (j.arrival, j.name))
    started = in_one = spread = 0
    waits: dict[str, float] = {}
    i = seq = 0
    least = min((j.priority for j in jobs), default=0)

    def start(job: GangJob, placed: list[str], now: float) -> None:
        nonlocal total, seq, started, in_one, spread
        total -= job.gpus
        for name in placed:
            free[name] -= job.gpus_per_pod
        seq += 1
        heapq.heappush(ends, (now + job.duration, seq, placed, job.gpus_per_pod))
        running[seq] = (job, Running(job.priority, now, tuple(placed), job.gpus_per_pod))
        if "#" in job.name:  # a preempted job's replacement: its job started already
            return
        started += 1
        waits[job.name] = now - job.arrival
        if job.pods >= 2:
            if len({domain_of[name] for name in placed}) == 1:
                in_one += 1
            else:
                spread += 1

    def release(k: int) -> GangJob:
        nonlocal total
        job, r = running.pop(k)
        for name in r.nodes:
            free[name] += r.gpus_per_pod
        total += r.gpus_per_pod * len(r.nodes)
        return job

    def preempt(job: GangJob, now: float) -> list[GangJob] | None:
        """Room made for ``job`` by preempting lower-priority jobs: the victims'
        replacements (arriving now with what they had left), None when none can be made."""
        if not job.preempts or job.priority <= least or (job.required and job.pods >= 2):
            return None
        found = victims_for(job.pods, job.gpus_per_pod, job.priority, free,
                            {k: r for k, (_, r) in running.items()})  # fmt: skip
        if found is None:
            return None
        nodes, victims = found
        again = []
        for k in victims:
            r = running[k][1]
            victim = release(k)
            left = victim.duration - (now - r.started)
            again.append(dataclasses.replace(victim, name=f"{victim.name}#replaced",
                                             arrival=now, duration=left))  # fmt: skip
        start(job, nodes, now)
        return again

    while i < len(order) or ends:
        now = min(order[i].arrival if i < len(order) else float("inf"),
                  ends[0][0] if ends else float("inf"))  # fmt: skip
        if math.isinf(now) or (until is not None and now > until):
            break
        # a job that waited found no room when last tried, and room only shrank since
        # unless a job ended: without an end only the new arrivals are tried (exact, and
        # what keeps a week's replay with a long queue fast)
        tried = 0 if ends and ends[0][0] <= now else len(waiting)
        while ends and ends[0][0] <= now:
            _, k, _, _ = heapq.heappop(ends)
            if k in running:  # else preempted before its end
                release(k)
        while i < len(order) and order[i].arrival <= now:
            waiting.append(order[i])
            i += 1
        still: list[GangJob] = waiting[:tried]
        room = max(free.values(), default=0)  # placements only lower it: a safe filter
        for job in waiting[tried:]:
            hopeless = job.gpus > total or job.gpus_per_pod > room
            placed = None if hopeless else _place(free, names, domains, job, policy)
            if placed is not None:
                start(job, placed, now)
                continue
            replaced = preempt(job, now)
            if replaced is None:
                still.append(job)
                continue
            room = max(free.values(), default=0)  # preemption made room
            for again in replaced:  # each fits where it can now, or waits
                placed = _place(free, names, domains, again, policy)
                if placed is None:
                    still.append(again)
                else:
                    start(again, placed, now)
        waiting = still
    multi = [j for j in jobs if j.pods >= 2]
    multi_waits = [waits[j.name] for j in multi if j.name in waits]
    queued = sum(multi_waits) + sum(
        max(0.0, until - j.arrival) for j in multi if j.name not in waits and until is not None
    )
    return GangResult(
        policy=policy,
        jobs=len(jobs),
        started=started,
        multi_node_jobs=len(multi),
        multi_node_started=len(multi_waits),
        multi_node_in_one_domain=in_one,
        multi_node_spread=spread,
        mean_multi_node_wait_hours=(sum(multi_waits) / len(multi_waits) / 3600)
        if multi_waits
        else 0.0,
        waits=waits,
        multi_node_waited=sum(1 for w in multi_waits if w > 0),
        multi_node_queued_hours=queued / 3600,
    )


def _place(
    free: Mapping[str, int],
    names: Sequence[str],
    domains: Mapping[str, Sequence[str]],
    job: GangJob,
    policy: str,
) -> list[str] | None:
    if policy == "leastallocated":
        return place_blind(free, names, job, most_room=True)
    if policy == "mostallocated" or job.pods < 2:
        return place_blind(free, names, job, most_room=False)
    placed = place_aware(free, domains, job, policy)
    if placed is None and not job.required:
        return place_blind(free, names, job, most_room=False)
    return placed


def synthetic_trace(
    *,
    leaves: int = 8,
    nodes_per_leaf: int = 4,
    gpus: int = 8,
    hours: float = 72.0,
    mean_gap_minutes: float = 10.0,
    seed: int = 7,
) -> tuple[list[TopoNode], list[GangJob]]:
    """The trace of the docs and tests: ``leaves`` x ``nodes_per_leaf`` nodes of ``gpus``
    GPUs; every ``mean_gap_minutes`` on average a job arrives (exponential gaps), three in four a
    single pod of 1, 2 or 4 GPUs running 1-6 h, one in four a multi-node job of 2-4 pods x
    8 GPUs running 2-8 h that must stay inside one leaf. Seeded: the same trace each run."""
    rng = random.Random(seed)  # noqa: S311 (a seeded trace, not a secret)
    nodes = [
        TopoNode(f"node-{leaf:02d}-{i}", gpus, f"leaf-{leaf:02d}")
        for leaf in range(leaves)
        for i in range(nodes_per_leaf)
    ]
    jobs: list[GangJob] = []
    t = 0.0
    while t < hours * 3600:
        t += rng.expovariate(1 / (mean_gap_minutes * 60))
        if rng.random() < 0.25:
            jobs.append(GangJob(f"multi-{len(jobs):04d}", t, rng.uniform(2, 8) * 3600,
                                rng.choice([2, 2, 3, 4]), gpus))  # fmt: skip
        else:
            jobs.append(GangJob(f"single-{len(jobs):04d}", t, rng.uniform(1, 6) * 3600,
                                1, rng.choice([1, 1, 2, 4])))  # fmt: skip
    return nodes, jobs

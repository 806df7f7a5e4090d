"""A steady-state background for a scenario: jobs that come and go, working-hours notebooks
and inference that scales with the day, so the simulated cluster is as full as real ones
from its first minute.

Why: a cluster that starts empty (the demo's week was 17.8 % allocated) and whose pods
never leave looks like no real cluster, and gives a what-if replay nothing to tell
policies apart by. Real GPU clusters run at 80-90 % allocation with a queue, and their jobs
have a heavy-tailed length.

The shapes come from the Alibaba openb trace (``tests/fixtures/alibaba-gpu-v2023``,
``openb_pod_list_default.csv``, 7,064 GPU pods), summarised here as constants (the file is
test data, not read at run time):

- GPUs per job: 55.4 % one whole GPU, 43.6 % a fraction of one, 0.23 % two, 0.21 % four,
  0.62 % eight (:data:`SIZES`); fractions are 10 % under 0.3, 47 % 0.3-0.6 and 43 % over
  0.6 of a GPU, simulated as 0.25, 0.5 and 0.75 (:data:`FRACTIONS`);
- duration: log-normal, with openb's spread (the standard deviation of log duration is
  1.88) but a median of :data:`MEDIAN_HOURS` instead of openb's 10 minutes, so that a week
  at 85 % of a 256-GPU cluster takes about 2,300 pods (the demo replays every one of
  them under every policy and several seeds), cut at :data:`LONGEST_HOURS`.

How: a small event loop, seeded, over the scenario's own placement. The planted workloads
are placed first (by :class:`~gpuscope.sim.cluster.SimulatedCluster`, as always); the loop
then keeps the cluster's demand (running and recently queued GPUs) at ``target`` of its
capacity: when jobs end or the planted load falls, new jobs arrive; each waits in a queue
(Pending) until a node has room, where the default scheduler's LeastAllocated rule would
put it (the node with the most free GPUs), fractions packed onto GPUs already shared. A
job ends early where a planted workload takes one of its GPUs later. A multi-GPU job that
has waited two hours gets a node kept for it (no new job starts there until it does), as
gang schedulers do, so it waits hours (up to a few days behind long jobs), not forever:
spreading makes big jobs wait, which is what the what-if then has to tell. The result is
ordinary :class:`~gpuscope.sim.scenario.WorkloadSpec` records with their node, GPU
indices, start, end and arrival: the simulator places them exactly there. Nothing runs
past ``cutoff``, so the planted state at the end (the fragmentation the 4-GPU job is
blocked by, the quota story) is the scenario's own.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from gpuscope.sim.cluster import SimulatedCluster
from gpuscope.sim.scenario import DAY, HOUR, Kind, Scenario, WorkloadSpec

#: (GPUs, fraction of one GPU, weight): openb's job sizes (module docstring).
SIZES: tuple[tuple[int, float, float], ...] = (
    (1, 1.0, 55.4),
    (1, 0.0, 43.6),  # a fraction, drawn from FRACTIONS
    (2, 1.0, 0.23),
    (4, 1.0, 0.21),
    (8, 1.0, 0.62),
)
#: (fraction of a GPU, weight): openb's fractional requests, in three classes.
FRACTIONS: tuple[tuple[float, float], ...] = ((0.25, 10.0), (0.5, 47.0), (0.75, 43.0))
#: openb's standard deviation of log(duration).
LOG_SIGMA = 1.88
MEDIAN_HOURS = 6.0
#: Shorter runs than this would slip between the demo's half-hourly inventory listings.
SHORTEST_HOURS = 0.5
LONGEST_HOURS = 4 * 24.0
#: The loop's step: arrivals and starts happen within these.
TICK = 600.0
#: A multi-GPU job that has waited this long gets a node kept for it (at most
#: MAX_RESERVED at once).
RESERVE_AFTER = 2 * HOUR
MAX_RESERVED = 2
WEEK = 7 * DAY


@dataclass
class _Slot:
    """A GPU's holders as (start, end, share); those over before now are dropped."""

    uses: list[tuple[float, float, float]] = field(default_factory=list)

    def taken(self, start: float, end: float) -> float:
        return sum(share for s, e, share in self.uses if s < end and start < e)


@dataclass
class _Job:
    name: str
    namespace: str
    kind: Kind
    gpus: int
    fraction: float
    arrival: float
    duration: float
    utilization: float
    active_seconds: float | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def demand(self) -> float:
        return self.gpus * self.fraction


def _weighted(rng: random.Random, choices: tuple[tuple[float, float], ...]) -> float:
    return rng.choices([c for c, _ in choices], weights=[w for _, w in choices])[0]


def _training(
    rng: random.Random, i: int, t: float, namespaces: tuple[tuple[str, float], ...]
) -> _Job:
    gpus, whole, _ = rng.choices(SIZES, weights=[w for *_, w in SIZES])[0]
    fraction = whole or _weighted(rng, FRACTIONS)
    hours = math.exp(math.log(MEDIAN_HOURS) + LOG_SIGMA * rng.gauss(0.0, 1.0))
    hours = min(LONGEST_HOURS, max(SHORTEST_HOURS, hours))
    ns = rng.choices([n for n, _ in namespaces], weights=[w for _, w in namespaces])[0]
    kind: Kind = "training" if fraction >= 1 else "batch"
    return _Job(f"{ns}-job-{i:04d}", ns, kind, gpus, fraction, t + rng.uniform(0, TICK),
                hours * HOUR, rng.uniform(0.55, 0.95))  # fmt: skip


def _scheduled(rng: random.Random, start: float, cutoff: float, phase: float) -> list[_Job]:
    """Notebooks with working hours and inference replicas that follow the day.

    ``phase``: seconds since Monday 00:00 UTC at scenario time 0. Weekdays: twelve
    researchers open a notebook around 09:00 and close it around 18:00, using it for
    2-6 hours of that (an idle tail is what people do); an inference Deployment scales
    from 0 extra replicas at night to 6 at midday, one more every 40 minutes.
    """
    jobs: list[_Job] = []
    first_day = math.floor((start + phase) / DAY)
    last_day = math.ceil((cutoff + phase) / DAY)
    for day in range(first_day, last_day + 1):
        midnight = day * DAY - phase
        weekday = day % 7 < 5
        for u in range(12 if weekday else 2):
            opens = midnight + 9 * HOUR + rng.uniform(-1.0, 1.5) * HOUR
            stays = rng.uniform(7.0, 10.0) * HOUR
            jobs.append(_Job(f"nb-day{day % 1000:03d}-user{u:02d}", "research", "interactive",
                             1, 1.0, opens, stays, 0.35, rng.uniform(2.0, 6.0) * HOUR,
                             {"app.kubernetes.io/owner": f"user{u:02d}"}))  # fmt: skip
        for r in range(6 if weekday else 2):
            up = midnight + 8 * HOUR + r * 40 * 60
            down = midnight + 20 * HOUR - r * 40 * 60
            jobs.append(_Job(f"chat-serve-d{day % 1000:03d}-r{r}", "serving", "inference",
                             1, 1.0, up, down - up, 0.6))  # fmt: skip
    return [j for j in jobs if start <= j.arrival < cutoff]


class _Loop:
    def __init__(self, planted: Scenario) -> None:
        cluster = SimulatedCluster(planted)
        self.nodes = [n.name for n in planted.nodes if n.gpus and not n.mig_profile]
        self.slots = {n: [_Slot() for _ in range(planted.node(n).gpus)] for n in self.nodes}
        self.capacity = sum(len(s) for s in self.slots.values())
        self.planted: list[tuple[float, float, float]] = []
        for pod in cluster.pods:
            if pod.node not in self.slots:
                continue
            end = math.inf if pod.end is None else pod.end
            for a in pod.assignments:
                self.slots[pod.node][a.gpu_index].uses.append((pod.start, end, a.share))
                self.planted.append((pod.start, end, a.share))
        self.running: list[tuple[float, float]] = []  # (end, demand) of started jobs
        self._views: dict[str, tuple[list[float], list[float]]] = {}
        #: node -> the job it is kept for (a big job that has waited too long)
        self.reserved: dict[str, str] = {}

    def planted_at(self, t: float) -> float:
        return sum(share for s, e, share in self.planted if s <= t < e)

    def view(self, node: str, t: float) -> tuple[list[float], list[float]]:
        """Per GPU of ``node``: the share taken at any time in the next tick and shortest
        run, and when its next holder starts (cached for the tick, until a placement)."""
        got = self._views.get(node)
        if got is None:
            soon = t + (SHORTEST_HOURS * HOUR + TICK)
            slots = self.slots[node]
            taken = [s.taken(t, soon) for s in slots]
            # holders that start after this tick (those within it count as taken)
            later = t + TICK
            nxt = [min((u[0] for u in s.uses if u[0] > later), default=math.inf) for s in slots]
            got = self._views[node] = (taken, nxt)
        return got

    def place(
        self, job: _Job, t: float, begin: float, end: float
    ) -> tuple[str, tuple[int, ...], float] | None:
        """LeastAllocated: the node with the most whole GPUs free; a fraction on the fullest
        GPU it fits (packed, as GPU-sharing schedulers do). A GPU must be free for the
        shortest run at least; the job ends early where a planted workload takes one of
        its GPUs later (its end, the third value)."""
        best: tuple[float, str, tuple[int, ...], float] | None = None
        for node in self.nodes:
            if self.reserved.get(node, job.name) != job.name:
                continue
            taken, nxt = self.view(node, t)
            whole = [i for i, x in enumerate(taken) if x <= 1e-9]
            if job.fraction >= 1:
                if len(whole) >= job.gpus and (best is None or len(whole) > best[0]):
                    chosen = sorted(whole, key=lambda i: -nxt[i])[: job.gpus]
                    best = (len(whole), node, tuple(sorted(chosen)), min(nxt[i] for i in chosen))
                continue
            fits = [i for i, x in enumerate(taken) if 1 - x >= job.fraction - 1e-9]
            if fits:
                i = max(fits, key=lambda k: (taken[k], nxt[k], -k))
                score = len(whole) - 8 * taken[i]  # prefer a shared GPU, then room
                if best is None or score > best[0]:
                    best = (score, node, (i,), nxt[i])
        if best is None:
            return None
        _, node, indices, until = best
        self.reserved = {n: j for n, j in self.reserved.items() if j != job.name}
        end = min(end, until)
        for i in indices:
            self.slots[node][i].uses.append((begin, end, job.fraction))
        self._views.pop(node, None)
        return node, indices, end

    def reserve(self, job: _Job, t: float) -> None:
        """Keep a node for ``job`` from now on (no one else starts there): the one where
        enough GPUs are free soonest, as gang schedulers (Kueue, KAI) do for a job that
        has waited too long, so a big job waits hours, not forever."""
        if job.name in self.reserved.values() or len(self.reserved) >= MAX_RESERVED:
            return
        ready: dict[str, float] = {}
        for n in self.nodes:
            if n in self.reserved or len(self.slots[n]) < job.gpus:
                continue
            # when each GPU's current holders are done (a planted holder that comes later
            # only cuts the job short, as placing it does)
            free_at = sorted(max((u[1] for u in s.uses if u[0] <= t), default=t)
                             for s in self.slots[n])  # fmt: skip
            ready[n] = free_at[job.gpus - 1]
        if ready:
            node = min(ready, key=lambda n: (ready[n], n))
            if ready[node] < math.inf:
                self.reserved[node] = job.name

    def prune(self, t: float) -> None:
        self._views.clear()
        for slots in self.slots.values():
            for s in slots:
                s.uses = [u for u in s.uses if u[1] > t]
        self.running = [r for r in self.running if r[0] > t]


def steady_workloads(
    planted: Scenario,
    *,
    start: float,
    cutoff: float,
    target: float = 0.88,
    phase: float = 0.0,
    namespaces: tuple[str, ...] = ("nlp", "vision"),
) -> list[WorkloadSpec]:
    """The background of ``planted`` from ``start`` to ``cutoff`` (scenario seconds), in
    the order it was placed (the order the simulator must place it in); seeded by the
    scenario's seed. Training jobs go to ``namespaces`` in proportion to their projects'
    guarantees (equally where none is set)."""
    guarantees = {p.name: p.guaranteed_gpus for p in planted.projects}
    weighted = tuple((n, guarantees.get(n) or 1.0) for n in namespaces)
    rng = random.Random(planted.seed * 7919 + 21)  # noqa: S311 (a seeded simulation)
    loop = _Loop(planted)
    fixed = sorted(_scheduled(rng, start, cutoff, phase), key=lambda j: j.arrival)
    queue: list[_Job] = []
    out: list[WorkloadSpec] = []
    made = 0
    t = start
    while t < cutoff:
        loop.prune(t)
        while fixed and fixed[0].arrival < t + TICK:
            queue.append(fixed.pop(0))
        want = target * loop.capacity - loop.planted_at(t)
        # jobs that have waited over an hour no longer count: a big job stuck behind
        # fragmentation must not stop the others from arriving
        fresh = sum(j.demand for j in queue if j.arrival > t - HOUR)
        have = sum(d for _, d in loop.running) + fresh
        while have < want:
            job = _training(rng, made, t, weighted)
            made += 1
            queue.append(job)
            have += job.demand
        queue.sort(key=lambda j: j.arrival)
        waiting: list[_Job] = []
        too_big = math.inf  # the smallest whole-GPU count that did not fit this tick
        for job in queue:
            begin = max(t, job.arrival)
            end = min(begin + job.duration, cutoff)
            got = None
            kept = job.name in loop.reserved.values()
            hopeless = job.fraction >= 1 and job.gpus >= too_big and not kept
            if begin < cutoff and job.arrival < t + TICK and not hopeless:
                got = loop.place(job, t, begin, end)
            if got is None:
                if job.fraction >= 1 and not kept:
                    too_big = min(too_big, job.gpus)
                if job.gpus >= 2 and t - job.arrival >= RESERVE_AFTER:
                    loop.reserve(job, t)
                waiting.append(job)
                continue
            node, indices, end = got
            loop.running.append((end, job.demand))
            out.append(_spec(job, (node, indices), begin, end))
        queue = waiting
        t += TICK
    # what never found room waited, Pending, until the end of the background
    out += [_pending(job, cutoff) for job in queue if job.arrival < cutoff]
    return out


def _pending(job: _Job, cutoff: float) -> WorkloadSpec:
    return WorkloadSpec(
        name=job.name, namespace=job.namespace, kind=job.kind, gpus=job.gpus,
        gpu_fraction=min(1.0, job.fraction), start=math.floor(job.arrival), end=cutoff,
        pending=True, utilization=round(job.utilization, 3),
    )  # fmt: skip


def _spec(job: _Job, got: tuple[str, tuple[int, ...]], begin: float, end: float) -> WorkloadSpec:
    node, indices = got
    waited = begin - job.arrival > 1.0
    return WorkloadSpec(
        name=job.name,
        namespace=job.namespace,
        kind=job.kind,
        gpus=job.gpus,
        gpu_fraction=min(1.0, job.fraction),
        nodes=(node,),
        gpu_indices=indices,
        # whole seconds, as Kubernetes keeps times; floors keep every order (no overlap)
        start=math.floor(begin),
        end=math.floor(end),
        arrival=math.floor(job.arrival) if waited else None,
        utilization=round(job.utilization, 3),
        active_seconds=job.active_seconds,
        # CPUs in proportion to the GPU share (a node has 16 cores a GPU): GPUs, not CPUs,
        # decide where a job fits, here and in any replay of it
        cpu_milli=max(1000, round(14_000 * job.demand)),
        memory_fraction=0.3 if job.kind == "interactive" else 0.6,
        preemptible=job.kind == "batch",
        priority=-10 if job.kind == "batch" else 0,
        ib_load=0.2 if job.gpus >= 8 else 0.0,
        labels=job.labels,
    )

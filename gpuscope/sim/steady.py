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
capacity: when jobs end or the planted load falls, new jobs arrive. The jobs are placed
by a scheduler a user runs: kube-scheduler's default profile, event by event (every
arrival, end and planted start in time order):

- a pod goes to the node NodeResourcesFit's ``LeastAllocated`` scores best over cpu,
  memory and ``nvidia.com/gpu`` (weight 1 each, the pod counted in), ties at random as
  ``selectHost`` breaks them, on its lowest-indexed free GPUs (the device plugin's order);
  a fraction on the fullest GPU it fits (packed, as GPU-sharing schedulers do);
- a pod that fits nowhere waits (Pending), in creation order (one priority); when a pod
  ends, the waiting ones are tried again on its node, the oldest first;
- nothing knows when a GPU's next holder comes, and no node is kept for a big job: under
  spreading, 8-GPU jobs wait for a node that empties, often all week, as they do on real
  clusters that run the default scheduler;
- the background runs at a priority below every planted pod's
  (:data:`BACKGROUND_PRIORITY`): a planted pod that starts preempts what holds its GPUs
  (those pods end then), as DefaultPreemption evicts lower-priority pods for it, and each
  victim's Job makes a new pod (``<job>-r``) that arrives then with the run time it had
  left.

An earlier loop placed with knowledge of each GPU's next holder, and kept a node for a big
job that had waited two hours: no scheduler does the first, and kube-scheduler not the
second, so a replay of the cluster's own policy could not reproduce the week (18.6 % of
capacity apart hour by hour). The result is ordinary :class:`~gpuscope.sim.scenario.WorkloadSpec`
records with their node, GPU indices, start, end and arrival: the simulator places them
exactly there. Nothing runs past ``cutoff``, so the planted state at the end (the
fragmentation the 4-GPU job is blocked by, the quota story) is the scenario's own.

The scheduler's loop is in gpuscope/sim/steady_scheduler.py.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from dataclasses import dataclass, field

from gpuscope.sim.scenario import DAY, HOUR, Kind, Scenario, WorkloadSpec
from gpuscope.sim.steady_scheduler import Holder, Loop, job_cpu

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
#: The background's priority: below every planted pod's, so a planted pod that starts
#: preempts what runs on its GPUs (as kube-scheduler's DefaultPreemption would), and
#: background pods never preempt each other.
BACKGROUND_PRIORITY = -20
WEEK = 7 * DAY


@dataclass
class Job:
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
) -> Job:
    gpus, whole, _ = rng.choices(SIZES, weights=[w for *_, w in SIZES])[0]
    fraction = whole or _weighted(rng, FRACTIONS)
    hours = math.exp(math.log(MEDIAN_HOURS) + LOG_SIGMA * rng.gauss(0.0, 1.0))
    hours = min(LONGEST_HOURS, max(SHORTEST_HOURS, hours))
    ns = rng.choices([n for n, _ in namespaces], weights=[w for _, w in namespaces])[0]
    kind: Kind = "training" if fraction >= 1 else "batch"
    return Job(f"{ns}-job-{i:04d}", ns, kind, gpus, fraction, t + rng.uniform(0, TICK),
                hours * HOUR, rng.uniform(0.55, 0.95))  # fmt: skip


def _scheduled(rng: random.Random, start: float, cutoff: float, phase: float) -> list[Job]:
    """Notebooks with working hours and inference replicas that follow the day.

    ``phase``: seconds since Monday 00:00 UTC at scenario time 0. Weekdays: twelve
    researchers open a notebook around 09:00 and close it around 18:00, using it for
    2-6 hours of that (an idle tail is what people do); an inference Deployment scales
    from 0 extra replicas at night to 6 at midday, one more every 40 minutes.
    """
    jobs: list[Job] = []
    first_day = math.floor((start + phase) / DAY)
    last_day = math.ceil((cutoff + phase) / DAY)
    for day in range(first_day, last_day + 1):
        midnight = day * DAY - phase
        weekday = day % 7 < 5
        for u in range(12 if weekday else 2):
            opens = midnight + 9 * HOUR + rng.uniform(-1.0, 1.5) * HOUR
            stays = rng.uniform(7.0, 10.0) * HOUR
            jobs.append(Job(f"nb-day{day % 1000:03d}-user{u:02d}", "research", "interactive",
                             1, 1.0, opens, stays, 0.35, rng.uniform(2.0, 6.0) * HOUR,
                             {"app.kubernetes.io/owner": f"user{u:02d}"}))  # fmt: skip
        for r in range(6 if weekday else 2):
            up = midnight + 8 * HOUR + r * 40 * 60
            down = midnight + 20 * HOUR - r * 40 * 60
            jobs.append(Job(f"chat-serve-d{day % 1000:03d}-r{r}", "serving", "inference",
                             1, 1.0, up, down - up, 0.6))  # fmt: skip
    return [j for j in jobs if start <= j.arrival < cutoff]


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
    loop = Loop(planted, random.Random(planted.seed * 7919 + 22))  # noqa: S311
    fixed = sorted(_scheduled(rng, start, cutoff, phase), key=lambda j: j.arrival)
    planted_events = [e for e in loop.planted if e[0] >= start]
    # planted pods already running at the start hold their GPUs from then on
    for e in (e for e in loop.planted if e[0] < start):
        loop.planted_event(e)
    placed: list[tuple[Job, Holder, float]] = []  # (job, where, start)
    # the placed that may still run, in placing order: a holder gone or ended stays so
    # (``gone`` is never unset, ``end`` only moves earlier), so each tick sums these
    # instead of every pod placed so far (most of the background's CPU was that sum)
    live: list[Holder] = []
    queue: list[Job] = []  # waiting, in queue order (one priority: creation time)
    ends: list[tuple[float, int, Holder]] = []
    made = 0
    seq = 0

    def start_job(job: Job, h: Holder, now: float) -> None:
        nonlocal seq
        h.spec = len(placed)
        h.end = min(h.end, cutoff)
        placed.append((job, h, now))
        live.append(h)
        seq += 1
        heapq.heappush(ends, (h.end, seq, h))

    def retry(node: str, now: float) -> None:
        """The waiting pods, in queue order, on the node that gained room: it is the only
        place any of them can fit now (each fitted nowhere when last tried)."""
        for job in list(queue):
            h = loop.place(job, now, only=node)
            if h is not None:
                queue.remove(job)
                start_job(job, h, now)

    def replace(victim: Holder, now: float) -> None:
        """A preempted job's controller makes a new pod: it arrives now and runs what the
        victim had left (a Job's pod restarts; its work since the start is lost)."""
        job, _, begin = placed[victim.spec]
        left = job.duration - (now - begin)
        if left < SHORTEST_HOURS * HOUR or now >= cutoff:
            return
        again = dataclasses.replace(job, name=f"{job.name}-r", arrival=now, duration=left)
        arrivals.insert(0, again)  # it arrives now, before the arrivals still to come

    def advance(until: float) -> None:
        """Every event before ``until`` in time order: ends, then planted pods, then
        arrivals."""
        while True:
            t_end = ends[0][0] if ends else math.inf
            t_pl = planted_events[0][0] if planted_events else math.inf
            t_arr = arrivals[0].arrival if arrivals else math.inf
            now = min(t_end, t_pl, t_arr)
            if now >= until:
                return
            if t_end == now:
                _, _, h = heapq.heappop(ends)
                if not h.gone and h.end == now:
                    loop.release(h)
                    retry(h.node, now)
            elif t_pl == now:
                event = planted_events.pop(0)
                for victim in loop.planted_event(event):
                    replace(victim, now)
                    retry(victim.node, now)
                if not event[1]:
                    retry(event[2], now)
            else:
                job = arrivals.pop(0)
                got = loop.place(job, now)
                if got is None:
                    queue.append(job)
                else:
                    start_job(job, got, now)

    arrivals: list[Job] = []
    t = start
    while t < cutoff:
        while fixed and fixed[0].arrival < t + TICK:
            arrivals.append(fixed.pop(0))
        want = target * loop.capacity - loop.planted_at(t)
        # jobs that have waited over an hour no longer count: a big job stuck behind
        # fragmentation must not stop the others from arriving
        fresh = sum(j.demand for j in queue if j.arrival > t - HOUR)
        live[:] = [h for h in live if not h.gone and h.end > t]
        running = sum(h.share * len(h.gpus) for h in live)
        have = running + fresh + sum(j.demand for j in arrivals)
        while have < want:
            job = _training(rng, made, t, weighted)
            made += 1
            arrivals.append(job)
            have += job.demand
        arrivals.sort(key=lambda j: j.arrival)
        advance(min(t + TICK, cutoff))
        t += TICK
    advance(cutoff)
    out = [_spec(job, (h.node, h.gpus), begin, h.end) for job, h, begin in placed]
    # what never found room waited, Pending, until the end of the background
    out += [_pending(job, cutoff) for job in queue + arrivals if job.arrival < cutoff]
    return out


def _pending(job: Job, cutoff: float) -> WorkloadSpec:
    return WorkloadSpec(
        name=job.name, namespace=job.namespace, kind=job.kind, gpus=job.gpus,
        gpu_fraction=min(1.0, job.fraction), start=math.floor(job.arrival), end=cutoff,
        pending=True, utilization=round(job.utilization, 3), cpu_milli=job_cpu(job),
        preemptible=True, priority=BACKGROUND_PRIORITY, labels=job.labels,
    )  # fmt: skip


def _spec(job: Job, got: tuple[str, tuple[int, ...]], begin: float, end: float) -> WorkloadSpec:
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
        cpu_milli=job_cpu(job),
        memory_fraction=0.3 if job.kind == "interactive" else 0.6,
        # below every planted pod's priority: preemptible as the workload rules read it
        preemptible=True,
        priority=BACKGROUND_PRIORITY,
        ib_load=0.2 if job.gpus >= 8 else 0.0,
        labels=job.labels,
    )

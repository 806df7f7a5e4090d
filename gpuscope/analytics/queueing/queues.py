"""The queue model: which quota a pod is charged to, and what a waiting job waits on under
the scheduler that decides (Kueue, KAI-Scheduler, a ResourceQuota), with the jobs that
scheduler would preempt for it.

Pure: pods and quota records in (as the store or ``--objects`` files give them), one
:class:`QueueVerdict` per pending job out. Each rule is documented, with the scheduler's
own docs as the reference, in docs/analytics.md ("Queues"); its name
(``kueue.reclaimWithinCohort``, ``kai.reclaim``...) is what verdicts and findings carry
in ``rule``. The Kueue arithmetic (nominal quota,
lending and borrowing limits, usage that bubbles up a cohort tree) is in
:mod:`gpuscope.analytics.queueing.queue_tree`; the preemption choice in
:mod:`gpuscope.analytics.queueing.queue_preemption`.

* Charging: a pod's ``kueue.x-k8s.io/queue-name`` names a LocalQueue in its namespace,
  whose ``spec.clusterQueue`` holds the quota. Where no LocalQueue is known at all (an
  older store), a queue label or project equal to a ClusterQueue's name is taken as that
  ClusterQueue; a name whose LocalQueue (or its ClusterQueue) does not exist is
  ``inadmissible``, as Kueue leaves it. ``kai.scheduler/queue`` names a KAI Queue.
  Otherwise the pod's project, which a ResourceQuota (its namespace) or the settings
  (``config``) may cover; a project nothing covers is ``unmanaged``: no guarantee, never
  over one.
* Pending jobs are judged one by one in the order Kueue pops them (priority, then
  creation); one that fits is counted as admitted before the next is judged, and the
  victims of a preemption are gone for the next.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuscope.analytics.queueing.kai_reclaim import KaiQueue, kai_reclaim
from gpuscope.analytics.queueing.kai_share import kai_queue_shares
from gpuscope.analytics.queueing.queue_charge import (
    KAI_LABEL,
    KUEUE_LABEL,
    Charger,
    field_of,
    pod_gpus,
)
from gpuscope.analytics.queueing.queue_fair import FairSharing, weights_of
from gpuscope.analytics.queueing.queue_flavors import Flavors
from gpuscope.analytics.queueing.queue_kueue import Fairness, kueue_verdict
from gpuscope.analytics.queueing.queue_preemption import Job
from gpuscope.collector.cluster.dra_apply import CLAIM_HOLDER_KIND

__all__ = ["KAI_LABEL", "KUEUE_LABEL", "Charger", "Project", "QueueState", "QueueVerdict", "judge"]
#: GPU amounts below this are rounding noise of fractional sums.
EPSILON = 1e-6


@dataclass(frozen=True, slots=True)
class QueueVerdict:
    """What one pending job waits on, and why."""

    namespace: str
    job: str
    #: The quota it is charged to (a ClusterQueue, a KAI Queue, a project).
    project: str
    #: ``kueue``, ``kai``, ``resourcequota``, ``config``, ``unmanaged`` or ``inadmissible``
    #: (a Kueue queue name whose LocalQueue or ClusterQueue does not exist).
    scheduler: str
    gpus: float
    priority: int
    #: ``quota`` (the scheduler holds it back for quota) or ``placement`` (quota admits it:
    #: it waits for a node).
    waits_on: str
    #: The rule that decides (docs/analytics.md, "Queues"), e.g. ``kueue.reclaimWithinCohort``.
    rule: str
    #: One line saying why, with the policy values that decide.
    reason: str
    #: Whole jobs the scheduler would preempt to admit it (empty when it would not).
    victims: tuple[Job, ...] = ()
    pods: tuple[str, ...] = ()
    local_queue: str = ""
    cohort: str = ""
    #: The Kueue flavor it is admitted to or preempts in ("" where none, or not Kueue).
    flavor: str = ""


@dataclass(slots=True)
class Project:
    """A quota holder and what it holds as of the instant judged."""

    name: str
    scheduler: str
    guaranteed: float = 0.0
    borrowing_limit: float = math.inf
    weight: float = 1.0
    cohort: str = ""
    used: float = 0.0
    pending: float = 0.0
    pending_pods: int = 0
    largest: float = 0.0
    pending_since: float | None = None
    running: list[Job] = field(default_factory=list)
    record: Any = None
    #: GPUs held as of the instant judged (``used`` then counts what the model admits).
    held_gpus: float = 0.0
    #: Jobs of it the scheduler would preempt.
    victims: list[Job] = field(default_factory=list)
    #: The root of its Kueue cohort tree ("" for none).
    root: str = ""

    @property
    def managed(self) -> bool:
        """Under a quota (an inadmissible Kueue job's queue is missing: no quota either)."""
        return self.scheduler not in ("unmanaged", "inadmissible")

    @property
    def over(self) -> float:
        return max(0.0, self.held_gpus - self.guaranteed) if self.managed else 0.0


@dataclass(frozen=True, slots=True)
class QueueState:
    projects: Mapping[str, Project]
    verdicts: tuple[QueueVerdict, ...]
    #: KAI's fair share of each KAI Queue (gpuscope/analytics/queueing/kai_share.py);
    #: empty where the cluster's GPUs were not given.
    fair_shares: Mapping[str, float] = field(default_factory=dict)


def _projects(charger: Charger) -> dict[str, Project]:
    out: dict[str, Project] = {}
    for scheduler, table in (
        ("kueue", charger.cqs),
        ("kai", charger.kai),
        ("config", charger.config),
    ):
        for name, q in table.items():
            limit = field_of(q, "borrowing_limit")
            if scheduler == "kai" and field_of(q, "limit") is not None:
                limit = max(
                    0.0, float(field_of(q, "limit")) - float(field_of(q, "guaranteed_gpus", 0))
                )
            weight = field_of(q, "over_quota_weight")
            out.setdefault(
                name,
                Project(
                    name,
                    scheduler,
                    float(field_of(q, "guaranteed_gpus", 0.0)),
                    math.inf if limit is None else float(limit),
                    1.0 if weight is None or float(weight) <= 0 else float(weight),
                    str(field_of(q, "cohort", "")),
                    record=q,
                ),
            )
    for ns, hard in charger.rq.items():
        out.setdefault(ns, Project(ns, "resourcequota", hard, 0.0))
    return out


def _job_key(pod: Any) -> tuple[str, str]:
    """(namespace, ``Kind/name`` of its controller, or ``Pod/name`` without one)."""
    owner, owner_kind = field_of(pod, "owner_name", ""), field_of(pod, "owner_kind", "")
    name = f"{owner_kind}/{owner}" if owner else f"Pod/{field_of(pod, 'name', '')}"
    return (str(field_of(pod, "namespace", "")), name)


def _jobs(pods: list[tuple[Any, float]]) -> dict[tuple[str, str], Job]:
    jobs: dict[tuple[str, str], Job] = {}
    for pod, gpus in pods:
        key = _job_key(pod)
        name = key[1]
        job = jobs.get(key)
        priority = int(field_of(pod, "priority", 0) or 0)
        start = float(field_of(pod, "start_time", 0.0) or 0.0)
        created = field_of(pod, "created", None)
        created = start if created is None else float(created)
        if job is None:
            jobs[key] = Job(
                key[0],
                name,
                (str(field_of(pod, "name", "")),),
                gpus,
                priority,
                start,
                bool(field_of(pod, "preemptible", False)),
                bool(field_of(pod, "protected", False)),
                created,
            )
        else:
            jobs[key] = job.merge(
                str(field_of(pod, "name", "")),
                gpus,
                priority,
                start,
                bool(field_of(pod, "preemptible", False)),
                bool(field_of(pod, "protected", False)),
                created,
            )
    return jobs


def judge(
    pods: Iterable[Any],
    quotas: Iterable[Any],
    *,
    free_gpus: float = math.inf,
    capacity_gpus: float | None = None,
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
    fair_sharing: FairSharing | None = None,
) -> QueueState:
    """The queue model as of one instant: every pending job's verdict.

    ``pods`` and ``quotas`` are PodInfo/QuotaInfo records or their JSON mappings;
    ``free_gpus`` (the cluster's unallocated GPUs) is what KAI's over-quota share draws
    on (Kueue's quotas do not depend on it); ``capacity_gpus`` (the GPUs of ready nodes)
    gives KAI's fair shares; ``node_labels`` (node name: labels) tells the Kueue flavor
    a running pod is of (gpuscope/analytics/queueing/queue_flavors.py);
    ``fair_sharing`` is Kueue's configuration (classic preemption where off or None).
    """
    charger = Charger(quotas)
    projects = _projects(charger)
    flavors = Flavors(charger.cqs, charger.cohorts.values(), charger.flavors.values())
    held: dict[tuple[str, str], list[tuple[Any, float]]] = {}
    waiting: dict[str, list[tuple[Any, float]]] = {}
    local_of: dict[tuple[str, str], str] = {}
    first_pod: dict[tuple[str, str], Any] = {}
    for pod in pods:
        gpus = pod_gpus(pod)
        if gpus <= EPSILON or field_of(pod, "owner_kind", "") == CLAIM_HOLDER_KIND:
            continue  # (an allocated DRA claim no pod reserves: taken, but no workload)
        phase, node = field_of(pod, "phase", ""), field_of(pod, "node", None)
        name, scheduler, lq = charger.charge(pod)
        project = projects.setdefault(name, Project(name, scheduler))
        if node and phase in ("Running", "Pending"):
            project.used += gpus
            labels = None if node_labels is None else node_labels.get(str(node))
            flavor = flavors.of_node(name, labels) if scheduler == "kueue" else ""
            held.setdefault((name, flavor), []).append((pod, gpus))
        elif not node and phase == "Pending":
            project.pending += gpus
            project.pending_pods += 1
            since = field_of(pod, "start_time", None) or field_of(pod, "_seen_from", None)
            if since is not None:
                project.pending_since = min(project.pending_since or since, since)
            waiting.setdefault(name, []).append((pod, gpus))
            local_of[(str(field_of(pod, "namespace", "")), name)] = lq
            first_pod.setdefault(_job_key(pod), pod)
    # each Kueue flavor's running jobs per queue: lists that admissions and preemptions
    # below change in place, with each project's ``running``
    running: dict[str, dict[str, list[Job]]] = {}
    for (name, flavor), members in held.items():
        jobs = list(_jobs(members).values())
        projects[name].running += jobs
        if projects[name].scheduler == "kueue":
            running.setdefault(flavor, {}).setdefault(name, []).extend(jobs)
            if flavor in flavors.trees:
                flavors.tree(flavor).add_usage(name, sum(j.gpus for j in jobs))
    for p in projects.values():
        p.held_gpus = p.used
        if p.scheduler == "kueue":
            p.root = flavors.root(p.name)
    shares: dict[str, float] = {}
    if capacity_gpus is not None and charger.kai:
        outside = sum(p.held_gpus for p in projects.values() if p.scheduler != "kai")
        demand = {n: p.held_gpus + p.pending for n, p in projects.items() if p.scheduler == "kai"}
        shares = kai_queue_shares(charger.kai, demand, max(0.0, capacity_gpus - outside))
    pending = [(name, job) for name, members in waiting.items() for job in _jobs(members).values()]
    for name, job in pending:
        projects[name].largest = max(projects[name].largest, job.gpus)
    # Kueue's heads: higher priority first, then the oldest (creation time)
    pending.sort(key=lambda nj: (-nj[1].priority, nj[1].created, nj[1].namespace, nj[1].job))
    fairness = None
    if fair_sharing is not None and fair_sharing.enabled:
        fairness = Fairness(fair_sharing, weights_of(charger.cqs, charger.cohorts))
    kai_free = free_gpus
    kai_queues = _kai_queues(charger, shares)
    verdicts: list[QueueVerdict] = []
    for name, job in pending:
        p = projects[name]
        lq = local_of.get((job.namespace, name), "")
        flavor = ""
        if p.scheduler == "kueue":
            pod = first_pod.get((job.namespace, job.job), {})
            found = kueue_verdict(
                p, job, pod, flavors, projects, charger.cqs[name], running, fairness
            )
            verdict, flavor = found[:4], found[4]
        elif p.scheduler == "kai":
            verdict, kai_free = _kai(p, job, projects, kai_free, kai_queues)
        elif p.scheduler == "inadmissible":
            verdict = (
                "quota",
                "kueue.inadmissible",
                f"its LocalQueue {lq or name} in {job.namespace} or that queue's ClusterQueue "
                f"{name} does not exist: Kueue does not admit it",
                (),
            )
        elif p.scheduler == "resourcequota":
            fits = p.used + job.gpus <= p.guaranteed + EPSILON
            verdict = (
                "placement" if fits else "quota",
                "resourcequota.hard_cap",
                f"ResourceQuota requests.nvidia.com/gpu {p.guaranteed:g} in {name}: "
                f"{p.used:g} used + {job.gpus:g} asked "
                f"{'fits' if fits else 'exceeds it; a hard cap never preempts'}",
                (),
            )
            if fits:
                p.used += job.gpus
        else:
            verdict = (
                "placement",
                f"{p.scheduler}.no_scheduler_quota",
                "no scheduler enforces a quota on it: only placement can hold it back"
                if p.scheduler == "unmanaged"
                else "a guarantee from the settings; no scheduler enforces or reclaims it",
                (),
            )
        waits_on, rule, reason, victims = verdict
        verdicts.append(
            QueueVerdict(
                job.namespace,
                job.job,
                name,
                p.scheduler,
                job.gpus,
                job.priority,
                waits_on,
                rule,
                reason,
                tuple(victims),
                job.pods,
                lq,
                p.cohort,
                flavor if p.scheduler == "kueue" else "",
            )
        )
    return QueueState(projects, tuple(verdicts), shares)


Verdict = tuple[str, str, str, tuple[Job, ...]]


def _kai(
    p: Project,
    job: Job,
    projects: dict[str, Project],
    free: float,
    queues: Mapping[str, KaiQueue],
) -> tuple[Verdict, float]:
    limit = p.guaranteed + p.borrowing_limit
    if p.used + job.gpus > limit + EPSILON:
        return (
            "quota",
            "kai.limit",
            f"KAI Queue {p.name}: {p.used:g} used + {job.gpus:g} asked exceeds its limit {limit:g}",
            (),
        ), free
    if job.gpus <= free + EPSILON:
        p.used += job.gpus
        p.running.append(replace(job, start_time=math.inf))  # the most recently started
        return (
            "placement",
            "kai.fits",
            f"KAI Queue {p.name} within its limit and the cluster has {free:g} free GPUs: "
            "it waits for a node",
            (),
        ), free - job.gpus
    running = {n: pr.running for n, pr in projects.items() if pr.scheduler == "kai"}
    choice = kai_reclaim(p.name, job, free, queues, running)
    if not choice.victims:
        return (choice.waits_on, choice.rule, choice.reason, ()), free
    freed = 0.0
    for victim_queue, victim in choice.taken:
        projects[victim_queue].running.remove(victim)
        projects[victim_queue].victims.append(victim)
        projects[victim_queue].used -= victim.gpus
        freed += victim.gpus
    p.used += job.gpus
    p.running.append(replace(job, start_time=math.inf))
    return ("quota", choice.rule, choice.reason, choice.victims), free + freed - job.gpus


def _kai_queues(charger: Charger, shares: Mapping[str, float]) -> dict[str, KaiQueue]:
    """KAI Queues with their fair shares; where no cluster capacity gave shares, the
    deserved quota stands in (gpuscope/analytics/queueing/kai_reclaim.py)."""
    out = {}
    for name, rec in charger.kai.items():
        deserved = float(field_of(rec, "guaranteed_gpus", 0.0))
        limit = field_of(rec, "limit", None)
        out[name] = KaiQueue(
            name,
            str(field_of(rec, "cohort", "")),
            deserved,
            None if limit is None else float(limit),
            shares.get(name, deserved) if any(shares.values()) else deserved,
        )
    return out

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

from gpuscope.analytics.queueing.kai_share import kai_queue_shares
from gpuscope.analytics.queueing.queue_charge import (
    KAI_LABEL,
    KUEUE_LABEL,
    Charger,
    field_of,
    pod_gpus,
)
from gpuscope.analytics.queueing.queue_preemption import Job, kai_reclaim, kueue_preemption
from gpuscope.analytics.queueing.queue_tree import CohortTree
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


def _jobs(pods: list[tuple[Any, float]]) -> dict[tuple[str, str], Job]:
    jobs: dict[tuple[str, str], Job] = {}
    for pod, gpus in pods:
        owner, owner_kind = field_of(pod, "owner_name", ""), field_of(pod, "owner_kind", "")
        name = f"{owner_kind}/{owner}" if owner else f"Pod/{field_of(pod, 'name', '')}"
        key = (str(field_of(pod, "namespace", "")), name)
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
) -> QueueState:
    """The queue model as of one instant: every pending job's verdict.

    ``pods`` and ``quotas`` are PodInfo/QuotaInfo records or their JSON mappings;
    ``free_gpus`` (the cluster's unallocated GPUs) is what KAI's over-quota share draws
    on (Kueue's quotas do not depend on it); ``capacity_gpus`` (the GPUs of ready nodes)
    gives KAI's fair shares.
    """
    charger = Charger(quotas)
    projects = _projects(charger)
    held: dict[str, list[tuple[Any, float]]] = {}
    waiting: dict[str, list[tuple[Any, float]]] = {}
    local_of: dict[tuple[str, str], str] = {}
    for pod in pods:
        gpus = pod_gpus(pod)
        if gpus <= EPSILON or field_of(pod, "owner_kind", "") == CLAIM_HOLDER_KIND:
            continue  # (an allocated DRA claim no pod reserves: taken, but no workload)
        phase, node = field_of(pod, "phase", ""), field_of(pod, "node", None)
        name, scheduler, lq = charger.charge(pod)
        project = projects.setdefault(name, Project(name, scheduler))
        if node and phase in ("Running", "Pending"):
            project.used += gpus
            held.setdefault(name, []).append((pod, gpus))
        elif not node and phase == "Pending":
            project.pending += gpus
            project.pending_pods += 1
            since = field_of(pod, "start_time", None) or field_of(pod, "_seen_from", None)
            if since is not None:
                project.pending_since = min(project.pending_since or since, since)
            waiting.setdefault(name, []).append((pod, gpus))
            local_of[(str(field_of(pod, "namespace", "")), name)] = lq
    for name, members in held.items():
        projects[name].running = list(_jobs(members).values())
    for p in projects.values():
        p.held_gpus = p.used
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
    tree = CohortTree(charger.cqs.values(), charger.cohorts.values())
    for name, p in projects.items():
        if p.scheduler == "kueue":
            tree.add_usage(name, p.used)
            root = tree.root(name)
            p.root = root[1] if root else ""
    kai_free = free_gpus
    # each Kueue queue's running jobs: the lists themselves, which admissions and
    # preemptions below change in place
    running = {n: pr.running for n, pr in projects.items() if pr.scheduler == "kueue"}
    verdicts: list[QueueVerdict] = []
    for name, job in pending:
        p = projects[name]
        lq = local_of.get((job.namespace, name), "")
        if p.scheduler == "kueue":
            verdict = _kueue(p, job, tree, projects, charger, running)
        elif p.scheduler == "kai":
            verdict, kai_free = _kai(p, job, projects, kai_free)
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
            )
        )
    return QueueState(projects, tuple(verdicts), shares)


Verdict = tuple[str, str, str, tuple[Job, ...]]


def _kueue(
    p: Project,
    job: Job,
    tree: CohortTree,
    projects: dict[str, Project],
    charger: Charger,
    running: Mapping[str, list[Job]],
) -> Verdict:
    q = p.name
    rec = charger.cqs[q]
    selected = field_of(rec, "selected_namespaces", None)
    if selected is not None and job.namespace not in selected:
        selector = field_of(rec, "namespace_selector", "") or "null"
        return (
            "quota",
            "kueue.namespace_not_selected",
            f"namespace {job.namespace} is not selected by ClusterQueue {q}'s "
            f"namespaceSelector {selector}"
            f"{' (unset: selects no namespace)' if selector == 'null' else ''}: Kueue "
            "leaves the workload inadmissible",
            (),
        )
    if not field_of(rec, "gpu_covered", True):
        return (
            "quota",
            "kueue.resource_not_covered",
            f"ClusterQueue {q}'s resourceGroups do not cover nvidia.com/gpu: Kueue finds no "
            "flavor for it and never admits a GPU job there, not even by borrowing "
            "(a queue must define a quota, even 0, for a resource to borrow it)",
            (),
        )
    if job.gpus > tree.potential_available(q) + EPSILON:
        return (
            "quota",
            "kueue.never_fits",
            f"{job.gpus:g} GPUs exceed what ClusterQueue {q} can ever use "
            f"({tree.potential_available(q):g}: nominal quota, borrowing limit and what "
            "its cohort could lend)",
            (),
        )
    available = tree.available(q)
    if job.gpus <= available + EPSILON:
        tree.add_usage(q, job.gpus)
        p.used += job.gpus
        # admitted now: a later head may preempt it (the most recently admitted of all)
        p.running.append(replace(job, start_time=math.inf))
        borrowing = p.used > p.guaranteed + EPSILON
        return (
            "placement",
            "kueue.fits_quota",
            f"fits ClusterQueue {q}'s available quota ({available:g} GPUs"
            f"{', borrowing from cohort ' + p.cohort if borrowing else ''}): "
            "Kueue admits it; it waits for a node",
            (),
        )
    choice = kueue_preemption(q, job, tree, running, rec)
    if choice.victims:
        for victim_queue, victim in choice.taken:
            projects[victim_queue].running.remove(victim)
            projects[victim_queue].victims.append(victim)
            projects[victim_queue].used -= victim.gpus
            tree.add_usage(victim_queue, -victim.gpus)
        tree.add_usage(q, job.gpus)
        p.used += job.gpus
        p.running.append(replace(job, start_time=math.inf))
    return ("quota", choice.rule, choice.reason, choice.victims)


def _kai(p: Project, job: Job, projects: dict[str, Project], free: float) -> tuple[Verdict, float]:
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
        return (
            "placement",
            "kai.fits",
            f"KAI Queue {p.name} within its limit and the cluster has {free:g} free GPUs: "
            "it waits for a node",
            (),
        ), free - job.gpus
    siblings = {
        n: pr
        for n, pr in projects.items()
        if pr.scheduler == "kai" and pr.cohort == p.cohort and n != p.name
    }
    choice = kai_reclaim(
        p.name,
        p.used,
        p.guaranteed,
        job,
        free,
        {n: (pr.used, pr.guaranteed, pr.running, pr.weight) for n, pr in siblings.items()},
    )
    if choice.victims:
        freed = 0.0
        for victim_queue, victim in choice.taken:
            projects[victim_queue].running.remove(victim)
            projects[victim_queue].victims.append(victim)
            projects[victim_queue].used -= victim.gpus
            freed += victim.gpus
        p.used += job.gpus
        return ("quota", choice.rule, choice.reason, choice.victims), free + freed - job.gpus
    return (choice.waits_on, choice.rule, choice.reason, ()), free

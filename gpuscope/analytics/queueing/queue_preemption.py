"""Which running jobs a scheduler would preempt for a job its quota holds back.

Kueue's classic preemption (its "Preemption" page; docs/analytics.md, "Queues"):

* a job may preempt only when it asks no more than its ClusterQueue's nominal quota, or
  ``borrowWithinCohort`` is ``LowerPriority``;
* candidates: jobs of its own ClusterQueue that ``withinClusterQueue`` allows
  (``LowerPriority``: lower priority; ``LowerOrNewerEqualPriority``: lower, or equal and
  newer), and jobs of the other ClusterQueues of its cohort tree that are borrowing, as
  ``reclaimWithinCohort`` allows (``Any``; ``LowerPriority``: lower priority) or, while
  borrowing itself, ``borrowWithinCohort: LowerPriority`` (lower priority, at most
  ``maxPriorityThreshold``); ``Never`` (the default of all three) allows none;
* order: other queues' jobs first, then lower priority, then the most recently started;
* targets: taken greedily until the job fits (a candidate of another queue only while
  that queue still borrows): with borrowing allowed when every candidate is its own
  queue's, or under ``borrowWithinCohort``; else without borrowing while its queue is
  under its nominal quota; else its own queue's candidates with borrowing. Then the set
  is made minimal: walking back from the second-last, a job whose GPUs are not needed
  is given back.

KAI-Scheduler's reclaim (its "Fairness" and "Scheduling Queues" pages): a queue within
its deserved quota may evict whole preemptible jobs (priority below 100: KAI's ``train``
class) of sibling queues that are over their own quota, never taking one below it; the
queue furthest over its quota per unit of ``overQuotaWeight`` (the weight that divides
the over-quota share) gives back first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuscope.analytics.queueing.queue_tree import CohortTree

EPSILON = 1e-6
#: KAI: workloads of priority 100 and above (``build``, ``inference``) are not preemptible.
KAI_NON_PREEMPTIBLE_PRIORITY = 100


@dataclass(frozen=True, slots=True)
class Job:
    """Pods of one controller (a pod with none is its own job): what schedulers preempt."""

    namespace: str
    job: str
    pods: tuple[str, ...]
    gpus: float
    priority: int
    #: The latest start (or creation) time of its pods, unix seconds.
    start_time: float
    preemptible: bool = False
    protected: bool = False

    def merge(
        self,
        pod: str,
        gpus: float,
        priority: int,
        start: float,
        preemptible: bool,
        protected: bool,
    ) -> Job:
        return replace(
            self,
            pods=tuple(sorted((*self.pods, pod))),
            gpus=self.gpus + gpus,
            priority=max(self.priority, priority),
            start_time=max(self.start_time, start),
            preemptible=self.preemptible and preemptible,
            protected=self.protected or protected,
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "job": self.job,
            "pods": list(self.pods),
            "gpus": round(self.gpus, 3),
            "priority": self.priority,
            "preemptible": self.preemptible,
            "protected": self.protected,
        }


@dataclass(frozen=True, slots=True)
class Choice:
    victims: tuple[Job, ...]
    #: (queue, job) of each victim.
    taken: tuple[tuple[str, Job], ...]
    rule: str
    reason: str
    waits_on: str = "quota"


def _policy(rec: Any, key: str) -> str:
    value = rec.get(key) if isinstance(rec, Mapping) else getattr(rec, key, "")
    return str(value or "Never")


def _within_allows(policy: str, victim: Job, job: Job) -> bool:
    if policy == "LowerPriority":
        return victim.priority < job.priority
    if policy == "LowerOrNewerEqualPriority":
        return victim.priority < job.priority or (
            victim.priority == job.priority and victim.start_time > job.start_time
        )
    return False


def kueue_preemption(
    q: str, job: Job, tree: CohortTree, running: Mapping[str, Sequence[Job]], rec: Any
) -> Choice:
    """The jobs Kueue would preempt to admit ``job`` into ClusterQueue ``q`` (module
    docstring); no victims, with the rule that says why, when it would preempt none."""
    reclaim = _policy(rec, "reclaim_within_cohort")
    within = _policy(rec, "within_cluster_queue")
    borrow = _policy(rec, "borrow_within_cohort")
    threshold = (
        rec.get("borrow_max_priority")
        if isinstance(rec, Mapping)
        else getattr(rec, "borrow_max_priority", None)
    )

    def said(key: str, name: str, value: str) -> str:
        unset = not (rec.get(key) if isinstance(rec, Mapping) else getattr(rec, key, ""))
        return f"{name} {value}{' (unset: the default)' if unset else ''}"

    policies = ", ".join((
        said("reclaim_within_cohort", "reclaimWithinCohort", reclaim),
        said("within_cluster_queue", "withinClusterQueue", within),
        said("borrow_within_cohort", "borrowWithinCohort", borrow),
    ))  # fmt: skip
    cohort, cohort_quota, cohort_used = tree.cohort_figures(q)
    where = (
        f"cohort {cohort}: {cohort_quota:g} GPUs of quota, {cohort_used:g} in use"
        if cohort
        else f"ClusterQueue {q} is in no cohort: {cohort_quota:g} nominal, {cohort_used:g} in use"
    )
    nominal = tree.nominal(q)
    if job.gpus > nominal + EPSILON and borrow != "LowerPriority":
        return Choice(
            (),
            (),
            "kueue.exceeds_nominal",
            f"asks {job.gpus:g} GPUs, more than ClusterQueue {q}'s nominal quota "
            f"{nominal:g}: Kueue admits it only from unused quota it may borrow, "
            f"never by preempting (borrowWithinCohort {borrow}); {where}",
        )

    def lower_within_threshold(v: Job) -> bool:
        return v.priority < job.priority and (threshold is None or v.priority <= threshold)

    candidates: list[tuple[str, Job]] = [
        (q, v) for v in running.get(q, ()) if _within_allows(within, v, job)
    ]
    root = tree.root(q)
    for other in tree.members(root) if root is not None else ():
        if other == q or not tree.borrowing(other):
            continue
        for v in running.get(other, ()):
            if (
                reclaim == "Any"
                or (reclaim == "LowerPriority" and v.priority < job.priority)
                or (borrow == "LowerPriority" and lower_within_threshold(v))
            ):
                candidates.append((other, v))
    if not candidates:
        rule = "kueue.preemption_never" if reclaim == within == "Never" else "kueue.no_candidates"
        why = (
            "no policy lets it preempt"
            if rule == "kueue.preemption_never"
            else "no running job is one these policies let it preempt (a borrowing queue's, "
            "or of lower priority)"
        )
        return Choice((), (), rule, f"{policies}: {why}; it waits until quota frees up ({where})")
    candidates.sort(
        key=lambda c: (c[0] == q, c[1].priority, -c[1].start_time, c[1].namespace, c[1].job)
    )

    def fits(allow_borrowing: bool) -> bool:
        if job.gpus > tree.available(q) + EPSILON:
            return False
        return allow_borrowing or tree.cq_usage(q) + job.gpus <= nominal + EPSILON

    def minimal(cands: list[tuple[str, Job]], allow_borrowing: bool) -> list[tuple[str, Job]]:
        taken: list[tuple[str, Job]] = []
        fit = False
        for queue, v in cands:
            if queue != q and not tree.borrowing(queue):
                continue
            tree.add_usage(queue, -v.gpus)
            taken.append((queue, v))
            if fits(allow_borrowing):
                fit = True
                break
        if fit:
            for queue, v in reversed(taken[:-1]):
                tree.add_usage(queue, v.gpus)
                if fits(allow_borrowing):
                    taken.remove((queue, v))
                else:
                    tree.add_usage(queue, -v.gpus)
        for queue, v in taken:  # the caller applies the preemption
            tree.add_usage(queue, v.gpus)
        return taken if fit else []

    rule = ""
    if all(queue == q for queue, _ in candidates):
        targets, rule = minimal(candidates, True), "kueue.withinClusterQueue"
    else:
        targets = []
        if borrow == "LowerPriority":
            targets = minimal([c for c in candidates if lower_within_threshold(c[1])], True)
            rule = "kueue.borrowWithinCohort"
        if not targets and tree.cq_usage(q) < nominal - EPSILON:
            targets, rule = minimal(candidates, False), "kueue.reclaimWithinCohort"
        if not targets:
            own = [c for c in candidates if c[0] == q]
            targets, rule = minimal(own, True), "kueue.withinClusterQueue"
    if not targets:
        return Choice(
            (),
            (),
            "kueue.preemption_insufficient",
            f"{policies}: preempting every job they allow would not make room for "
            f"{job.gpus:g} GPUs; it waits until quota frees up ({where})",
        )
    if rule == "kueue.withinClusterQueue" and any(queue != q for queue, _ in targets):
        rule = "kueue.reclaimWithinCohort"
    policy = {
        "kueue.withinClusterQueue": f"withinClusterQueue {within}",
        "kueue.reclaimWithinCohort": f"reclaimWithinCohort {reclaim}",
        "kueue.borrowWithinCohort": f"borrowWithinCohort {borrow}",
    }[rule]
    victims = tuple(v for _, v in targets)
    return Choice(
        victims,
        tuple(targets),
        rule,
        f"{policy}: Kueue preempts {len(victims)} job(s) "
        f"({sum(v.gpus for v in victims):g} GPUs) to admit it ({where})",
    )


def kai_reclaim(
    name: str,
    used: float,
    quota: float,
    job: Job,
    free: float,
    siblings: Mapping[str, tuple[float, float, Sequence[Job], float]],
) -> Choice:
    """The whole jobs KAI would evict from sibling queues over their quota so that queue
    ``name`` (within its quota with ``job``) can run it; ``free`` GPUs are already free."""
    if used + job.gpus > quota + EPSILON:
        return Choice(
            (),
            (),
            "kai.over_quota_waits",
            f"KAI Queue {name}: {used:g} used + {job.gpus:g} asked is beyond its "
            f"deserved quota {quota:g} and the cluster has only {free:g} free GPUs: "
            "over-quota resources are not reclaimed for it",
        )
    # the queue furthest over its quota for its over-quota weight gives back first
    over = {n: (u - qq) / max(w, 1e-9) for n, (u, qq, _, w) in siblings.items() if u > qq + EPSILON}
    if not over:
        return Choice(
            (),
            (),
            "kai.nothing_to_reclaim",
            f"KAI Queue {name} is within its quota but no sibling queue is over "
            f"its own: it waits for capacity ({free:g} GPUs free)",
            "placement",
        )
    level = {n: siblings[n][0] for n in over}
    order = sorted(
        ((n, v) for n in over for v in siblings[n][2] if v.priority < KAI_NON_PREEMPTIBLE_PRIORITY),
        key=lambda c: (-over[c[0]], c[1].priority, -c[1].start_time, c[1].namespace, c[1].job),
    )
    taken: list[tuple[str, Job]] = []
    need = job.gpus - free
    for n, v in order:
        if need <= EPSILON:
            break
        if level[n] - v.gpus < siblings[n][1] - EPSILON:
            continue  # never below the sibling's own quota
        taken.append((n, v))
        level[n] -= v.gpus
        need -= v.gpus
    if need > EPSILON:
        return Choice(
            (),
            (),
            "kai.reclaim_blocked",
            f"KAI Queue {name} is owed GPUs within its quota, but the over-quota "
            "queues' preemptible jobs (priority below 100) cannot free "
            f"{job.gpus - free:g} GPUs without going below their own quota",
        )
    victims = tuple(v for _, v in taken)
    return Choice(
        victims,
        tuple(taken),
        "kai.reclaim",
        f"KAI Queue {name} is within its deserved quota {quota:g}: KAI reclaims "
        f"{sum(v.gpus for v in victims):g} GPUs as whole preemptible jobs from "
        "sibling queues over their quota",
    )

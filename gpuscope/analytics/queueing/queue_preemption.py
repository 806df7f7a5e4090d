"""Which running jobs a scheduler would preempt for a job its quota holds back.

Kueue's classic preemption, as its scheduler does it (kubernetes-sigs/kueue
``pkg/scheduler/flavorassigner/flavorassigner.go`` ``fitsResourceQuota``,
``pkg/scheduler/preemption/preemption.go`` ``classicalPreemptions``,
``pkg/scheduler/preemption/classical/hierarchical_preemption.go`` and
``candidate_generator.go``; docs/analytics.md, "Queues"):

* a job that does not fit may preempt when it asks no more than its ClusterQueue's
  nominal quota, or fits within the quota of a cohort below the root on its path
  (hierarchical reclaim), or ``borrowWithinCohort`` is ``LowerPriority``;
* candidates: its own queue's jobs as ``withinClusterQueue`` allows (``LowerPriority``;
  ``LowerOrNewerEqualPriority``: lower, or equal and *created* later: Kueue's
  queue-order timestamp); other queues' jobs, walking up from its parent: at each
  cohort, the queues and child cohorts (not the one walked up from) over their own
  quota, as ``reclaimWithinCohort`` allows. Once the job fits within the quota of the
  subtree walked so far, the candidates found further up are *hierarchical* (taken
  whether it borrows or not); before that they may be taken while it borrows only under
  ``borrowWithinCohort: LowerPriority`` (lower priority, at most
  ``maxPriorityThreshold``), else only if it then stays within its nominal quota;
* order: hierarchical candidates, then the other queues', then its own; within each,
  lower priority first, then the most recently started;
* a candidate of another queue counts only while its queue, and every cohort between it
  and the cohort it was found at, is over its quota;
* runs: with borrowing, or first without it where ``borrowWithinCohort`` is not set and
  no candidate is hierarchical (with borrowing only, when no candidate is another
  queue's, or it is at or over its nominal quota with ``borrowWithinCohort`` unset);
  candidates are taken greedily until the job fits, then, walking back from the
  second-last, a job whose GPUs are not needed is given back.

KAI-Scheduler's reclaim is in :mod:`gpuscope.analytics.queueing.kai_reclaim`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuscope.analytics.queueing.queue_tree import CohortTree, Key

EPSILON = 1e-6


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
    #: The earliest creation time of its pods, unix seconds: what Kueue orders and compares
    #: workloads by (its queue-order timestamp); the start time where not known.
    created: float = 0.0

    def merge(
        self,
        pod: str,
        gpus: float,
        priority: int,
        start: float,
        preemptible: bool,
        protected: bool,
        created: float | None = None,
    ) -> Job:
        return replace(
            self,
            pods=tuple(sorted((*self.pods, pod))),
            gpus=self.gpus + gpus,
            priority=max(self.priority, priority),
            start_time=max(self.start_time, start),
            preemptible=self.preemptible and preemptible,
            protected=self.protected or protected,
            created=min(self.created, start if created is None else created),
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


def allows(policy: str, victim: Job, job: Job) -> bool:
    """Kueue's ``priorityTooHighToPreempt``, negated: may ``policy`` take ``victim``?"""
    lower = victim.priority < job.priority
    if policy == "LowerPriority":
        return lower
    if policy == "LowerOrNewerEqualPriority":
        return lower or (victim.priority == job.priority and job.created < victim.created)
    return policy == "Any"


@dataclass(frozen=True, slots=True)
class _Candidate:
    queue: str
    job: Job
    #: ``within`` (its own queue), ``hierarchical``, ``while_borrowing`` or
    #: ``without_borrowing`` (only if the preemptor then stays within its nominal quota).
    variant: str
    #: The cohort it was found at (None for its own queue's).
    lca: Key | None = None


def _order(c: _Candidate) -> tuple[int, float, str, str]:
    return (c.job.priority, -c.job.start_time, c.job.namespace, c.job.job)


def _candidates(
    q: str, job: Job, tree: CohortTree, running: Mapping[str, Sequence[Job]], rec: Any
) -> tuple[list[_Candidate], int, int]:
    """Ordered candidates, how many are hierarchical and how many another queue's."""
    within, reclaim = _policy(rec, "within_cluster_queue"), _policy(rec, "reclaim_within_cohort")
    borrow = _policy(rec, "borrow_within_cohort") == "LowerPriority"
    threshold = (
        rec.get("borrow_max_priority")
        if isinstance(rec, Mapping)
        else getattr(rec, "borrow_max_priority", None)
    )
    same = [
        _Candidate(q, v, "within")
        for v in running.get(q, ())
        if within != "Never" and allows(within, v, job)
    ]
    hier: list[_Candidate] = []
    prio: list[_Candidate] = []
    key: Key = ("cq", q)

    def variant(v: Job, advantage: bool) -> str:
        if advantage:
            return "hierarchical"
        if not borrow or v.priority >= job.priority:
            return "without_borrowing"
        return (
            "without_borrowing"
            if threshold is not None and v.priority > threshold
            else ("while_borrowing")
        )

    def collect(
        node: Key, lca: Key, skip: Key | None, advantage: bool, out: list[_Candidate]
    ) -> None:
        for child in tree.children(node):
            if child[0] != "cohort" or child == skip or tree.within_nominal(child):
                continue
            collect(child, lca, skip, advantage, out)
        for child in tree.children(node):
            if child[0] != "cq" or child == key or tree.within_nominal(child):
                continue
            out += [
                _Candidate(child[1], v, variant(v, advantage), lca)
                for v in running.get(child[1], ())
                if allows(reclaim, v, job)
            ]

    if tree.parent(key) is not None and reclaim != "Never":
        advantage = tree.usage(key) + job.gpus <= tree.subtree(key) + EPSILON
        remaining = max(0.0, job.gpus - tree.local_available(key))
        previous: Key | None = None
        for node in tree.ancestors(key):
            collect(node, node, previous, advantage, hier if advantage else prio)
            fits = tree.usage(node) + remaining <= tree.subtree(node) + EPSILON
            remaining = max(0.0, remaining - tree.local_available(node))
            advantage = advantage or fits
            previous = node
    ordered = sorted(hier, key=_order) + sorted(prio, key=_order) + sorted(same, key=_order)
    return ordered, len(hier), len(hier) + len(prio)


def kueue_preemption(
    q: str, job: Job, tree: CohortTree, running: Mapping[str, Sequence[Job]], rec: Any
) -> Choice:
    """The jobs Kueue would preempt to admit ``job`` into ClusterQueue ``q`` (module
    docstring); no victims, with the rule that says why, when it would preempt none."""
    reclaim = _policy(rec, "reclaim_within_cohort")
    within = _policy(rec, "within_cluster_queue")
    borrow = _policy(rec, "borrow_within_cohort")

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
    if (
        job.gpus > nominal + EPSILON
        and borrow != "LowerPriority"
        and not tree.reclaim_in_hierarchy(q, job.gpus)
    ):
        return Choice(
            (),
            (),
            "kueue.exceeds_nominal",
            f"asks {job.gpus:g} GPUs, more than ClusterQueue {q}'s nominal quota "
            f"{nominal:g} and more than any cohort below the root on its path has unused: "
            f"Kueue admits it only from unused quota it may borrow, never by preempting "
            f"(borrowWithinCohort {borrow}); {where}",
        )
    candidates, n_hier, n_other = _candidates(q, job, tree, running, rec)
    if not candidates:
        rule = "kueue.preemption_never" if reclaim == within == "Never" else "kueue.no_candidates"
        why = (
            "no policy lets it preempt"
            if rule == "kueue.preemption_never"
            else "no running job is one these policies let it preempt (a queue's over its "
            "quota, or of lower priority)"
        )
        return Choice((), (), rule, f"{policies}: {why}; it waits until quota frees up ({where})")
    forbidden = borrow != "LowerPriority"
    under_nominal = tree.cq_usage(q) < nominal - EPSILON
    if n_other == 0 or (forbidden and not under_nominal):
        runs = [True]
    elif forbidden and n_hier == 0:
        runs = [False, True]
    else:
        runs = [True, False]
    key: Key = ("cq", q)

    def valid(c: _Candidate, borrowing: bool) -> bool:
        if c.queue == q:
            return True
        if borrowing and c.variant == "without_borrowing":
            return False
        node: Key | None = ("cq", c.queue)
        while node is not None and node != c.lca:
            if tree.within_nominal(node):
                return False
            node = tree.parent(node)
        return True

    def fits(borrowing: bool) -> bool:
        if not borrowing and tree.borrowing_with(key, job.gpus):
            return False
        return job.gpus <= max(0.0, tree.available(q)) + EPSILON

    targets: list[_Candidate] = []
    for borrowing in runs:
        taken: list[_Candidate] = []
        fit = False
        for c in candidates:
            if not valid(c, borrowing):
                continue
            tree.add_usage(c.queue, -c.job.gpus)
            taken.append(c)
            if fits(borrowing):
                fit = True
                break
        if fit:
            for c in reversed(taken[:-1]):
                tree.add_usage(c.queue, c.job.gpus)
                if fits(borrowing):
                    taken.remove(c)
                else:
                    tree.add_usage(c.queue, -c.job.gpus)
        for c in taken:  # the caller applies the preemption
            tree.add_usage(c.queue, c.job.gpus)
        if fit:
            targets = taken
            break
    if not targets:
        return Choice(
            (),
            (),
            "kueue.preemption_insufficient",
            f"{policies}: preempting every job they allow would not make room for "
            f"{job.gpus:g} GPUs; it waits until quota frees up ({where})",
        )
    variants = {c.variant for c in targets}
    if "while_borrowing" in variants:
        rule, policy = "kueue.borrowWithinCohort", f"borrowWithinCohort {borrow}"
    elif variants - {"within"}:
        rule, policy = "kueue.reclaimWithinCohort", f"reclaimWithinCohort {reclaim}"
    else:
        rule, policy = "kueue.withinClusterQueue", f"withinClusterQueue {within}"
    victims = tuple(c.job for c in targets)
    return Choice(
        victims,
        tuple((c.queue, c.job) for c in targets),
        rule,
        f"{policy}: Kueue preempts {len(victims)} job(s) "
        f"({sum(v.gpus for v in victims):g} GPUs) to admit it ({where})",
    )

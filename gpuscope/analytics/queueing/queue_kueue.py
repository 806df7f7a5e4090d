"""What Kueue does with one pending job: refuse it, admit it into a flavor, or preempt for
it, as its scheduler decides (docs/analytics.md, "Queues").

Flavor assignment (kubernetes-sigs/kueue ``pkg/scheduler/flavorassigner/flavorassigner.go``
``findFlavorForPodSetResource``, ``fitsResourceQuota``, ``shouldTryNextFlavor``,
``isPreferred``; ``pkg/scheduler/preemption/preemption_oracle.go``): the queue's GPU
flavors are tried in its resource group's order, skipping those the pod's node selector or
tolerations rule out (:mod:`gpuscope.analytics.queueing.queue_flavors`). In each:

* more than the flavor's potential capacity: no fit;
* within what is available: a fit (borrowing when beyond the queue's nominal quota);
* else, when the job is within the flavor's nominal quota, or fits a cohort below the
  root (hierarchical reclaim), or ``borrowWithinCohort`` is set, the preemption is
  simulated: victims in its own queue make it *preempt*, victims only in other queues
  *reclaim*, none *no candidates*; otherwise no fit.

The search stops at a fit without borrowing; at a fit with borrowing when
``flavorFungibility.whenCanBorrow`` is ``Borrow`` (the default; ``MayStopSearch`` in
v1beta2); at a preemption when ``whenCanPreempt`` is ``Preempt`` (default
``TryNextFlavor``) and it does not borrow or ``whenCanBorrow`` is ``Borrow``. Otherwise
the best flavor seen wins: fit over reclaim over preempt over no candidates, then one that
does not borrow, then the earlier. Preemption then happens in that flavor only, classic
(:mod:`gpuscope.analytics.queueing.queue_preemption`) or, where Kueue's fair sharing is on,
by its strategies (:mod:`gpuscope.analytics.queueing.queue_fair`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpuscope.analytics.queueing.queue_charge import field_of
from gpuscope.analytics.queueing.queue_fair import FairSharing, fair_preemption
from gpuscope.analytics.queueing.queue_flavors import Flavors
from gpuscope.analytics.queueing.queue_preemption import Choice, Job, kueue_preemption
from gpuscope.analytics.queueing.queue_tree import Key

if TYPE_CHECKING:
    from gpuscope.analytics.queueing.queues import Project

EPSILON = 1e-6
#: (waits_on, rule, reason, victims, flavor)
Verdict = tuple[str, str, str, tuple[Job, ...], str]
#: Flavor assignment modes, in Kueue's order of preference.
NO_FIT, NO_CANDIDATES, PREEMPT, RECLAIM, FIT = range(5)
#: ``flavorFungibility`` values that stop the search (v1beta1 and v1beta2 names).
STOP_BORROW = frozenset({"", "Borrow", "MayStopSearch"})
STOP_PREEMPT = frozenset({"Preempt", "MayStopSearch"})


@dataclass(frozen=True, slots=True)
class _Try:
    flavor: str
    mode: int
    borrows: bool
    #: The preemption simulated (NO_CANDIDATES, PREEMPT, RECLAIM) or the reason of a no fit.
    choice: Choice | None = None
    reason: str = ""


def _preferred(a: _Try, b: _Try | None) -> bool:
    """Kueue's ``isPreferred`` (the implicit-preference feature gate off, its default)."""
    if a.mode == NO_FIT:
        return False
    if b is None or b.mode == NO_FIT:
        return True
    if a.mode != b.mode:
        return a.mode > b.mode
    return not a.borrows and b.borrows


def _stops(t: _Try, rec: Any) -> bool:
    """Kueue's ``shouldTryNextFlavor``, negated."""
    borrow = str(field_of(rec, "when_can_borrow", "") or "") in STOP_BORROW
    preempt = str(field_of(rec, "when_can_preempt", "") or "") in STOP_PREEMPT
    if t.mode in (PREEMPT, RECLAIM) and preempt and (not t.borrows or borrow):
        return True
    return t.mode == FIT and (borrow or not t.borrows)


@dataclass(frozen=True, slots=True)
class Fairness:
    """Kueue's fair sharing configuration and each node's ``fairSharing.weight``."""

    sharing: FairSharing
    weights: Mapping[Key, float]


def _try(
    q: str,
    job: Job,
    flavor: str,
    flavors: Flavors,
    running: Mapping[str, list[Job]],
    rec: Any,
    fairness: Fairness | None,
) -> _Try:
    tree = flavors.tree(flavor)
    key = ("cq", q)
    potential = tree.potential_available(q)
    if job.gpus > potential + EPSILON:
        return _Try(
            flavor,
            NO_FIT,
            True,
            reason=f"{job.gpus:g} GPUs exceed what ClusterQueue {q} can ever use "
            f"({potential:g}: nominal quota, borrowing limit and what its cohort could lend)",
        )
    if job.gpus <= tree.available(q) + EPSILON:
        return _Try(flavor, FIT, tree.borrowing_with(key, job.gpus))
    choice = kueue_preemption(q, job, tree, running, rec)
    reclaim = str(field_of(rec, "reclaim_within_cohort", "") or "Never")
    if fairness is not None and (choice.rule != "kueue.exceeds_nominal" or reclaim != "Never"):
        # with fair sharing a queue that may reclaim may also preempt while borrowing
        # (flavorassigner.go canPreemptWhileBorrowing)
        choice = fair_preemption(
            q, job, flavor, flavors, running, rec, fairness.sharing, fairness.weights
        )
    if choice.rule == "kueue.exceeds_nominal":
        return _Try(flavor, NO_FIT, True, choice, choice.reason)
    if not choice.victims:
        return _Try(flavor, NO_CANDIDATES, tree.borrowing_with(key, job.gpus), choice)
    for victim_queue, victim in choice.taken:
        tree.add_usage(victim_queue, -victim.gpus)
    borrows = tree.borrowing_with(key, job.gpus)
    for victim_queue, victim in choice.taken:
        tree.add_usage(victim_queue, victim.gpus)
    mode = PREEMPT if any(vq == q for vq, _ in choice.taken) else RECLAIM
    return _Try(flavor, mode, borrows, choice)


def kueue_verdict(
    p: Project,
    job: Job,
    pod: Any,
    flavors: Flavors,
    projects: Mapping[str, Project],
    rec: Any,
    running: dict[str, dict[str, list[Job]]],
    fairness: Fairness | None = None,
) -> Verdict:
    """Kueue's answer for ``job`` (whose first pod is ``pod``) of ClusterQueue ``p``;
    ``running`` holds each flavor's running jobs per queue, changed in place (with the
    trees' usage and ``projects``) when it is admitted or preempts."""
    q = p.name
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
            "",
        )
    order = flavors.queue_flavors(q)
    if not field_of(rec, "gpu_covered", True) or not order:
        return (
            "quota",
            "kueue.resource_not_covered",
            f"ClusterQueue {q}'s resourceGroups do not cover nvidia.com/gpu: Kueue finds no "
            "flavor for it and never admits a GPU job there, not even by borrowing "
            "(a queue must define a quota, even 0, for a resource to borrow it)",
            (),
            "",
        )
    several = len(order) > 1
    refused: list[str] = []
    tried: list[_Try] = []
    best: _Try | None = None
    for flavor in order:
        why = flavors.refusal(q, flavor, pod)
        if why is not None:
            refused.append(why)
            continue
        t = _try(q, job, flavor, flavors, running.get(flavor, {}), rec, fairness)
        tried.append(t)
        if _stops(t, rec):
            best = t
            break
        if _preferred(t, best):
            best = t
    if not tried:
        return (
            "quota",
            "kueue.no_matching_flavor",
            f"no flavor of ClusterQueue {q} suits its pods ({'; '.join(refused)}): Kueue "
            "never admits it there",
            (),
            "",
        )
    if best is None:
        if all(t.choice is None for t in tried):
            rule = "kueue.never_fits"
        else:
            rule = "kueue.exceeds_nominal"
        reason = "; ".join((f"flavor {t.flavor}: " if several else "") + t.reason for t in tried)
        return ("quota", rule, reason, (), "")
    return _apply(p, job, best, flavors, projects, running, several)


def _apply(
    p: Project,
    job: Job,
    best: _Try,
    flavors: Flavors,
    projects: Mapping[str, Project],
    running: dict[str, dict[str, list[Job]]],
    several: bool,
) -> Verdict:
    q, flavor = p.name, best.flavor
    tree = flavors.tree(flavor)
    named = f" in flavor {flavor}" if several else ""
    if best.mode == FIT:
        available = tree.available(q)
        _admit(p, job, flavor, flavors, running)
        return (
            "placement",
            "kueue.fits_quota",
            f"fits ClusterQueue {q}'s available quota{named} ({available:g} GPUs"
            f"{', borrowing from cohort ' + p.cohort if best.borrows else ''}): "
            "Kueue admits it; it waits for a node",
            (),
            flavor,
        )
    assert best.choice is not None
    choice = best.choice
    if best.mode in (PREEMPT, RECLAIM):
        for victim_queue, victim in choice.taken:
            running[flavor][victim_queue].remove(victim)
            projects[victim_queue].running.remove(victim)
            projects[victim_queue].victims.append(victim)
            projects[victim_queue].used -= victim.gpus
            tree.add_usage(victim_queue, -victim.gpus)
        _admit(p, job, flavor, flavors, running)
    return ("quota", choice.rule, choice.reason + named, choice.victims, flavor)


def _admit(
    p: Project,
    job: Job,
    flavor: str,
    flavors: Flavors,
    running: dict[str, dict[str, list[Job]]],
) -> None:
    """Counts ``job`` as admitted now: a later head may preempt it (the most recently
    admitted of all)."""
    flavors.tree(flavor).add_usage(p.name, job.gpus)
    p.used += job.gpus
    admitted = replace(job, start_time=math.inf)
    p.running.append(admitted)
    running.setdefault(flavor, {}).setdefault(p.name, []).append(admitted)

"""Consolidation for pending pod groups (gangs): all their pods at once, inside one domain.

A pending multi-node job is not N independent pending pods: the scheduler starts its pods
together or not at all (Kueue admits a Workload whole, KAI and Volcano gang-schedule a
PodGroup), and a job with a required topology level only inside one domain of it. So
``analyze consolidation`` plans for it as one goal, the planner's ``pending_job`` of
``count`` N pods of ``gpus`` k GPUs, fenced into one domain the way
:mod:`gpuscope.analytics.consolidation.domain` fences a domain goal (the nodes outside carry a
taint the group's pods do not tolerate; every other pod and goal tolerates it).

Gangs are planned one after another (by key, at most :data:`MAX_GANGS`), in one plan with
the ungrouped pending pods: for each gang every candidate domain
(:func:`~gpuscope.analytics.consolidation.domain.candidate_domains`: the
:data:`~gpuscope.analytics.consolidation.domain.MAX_DOMAINS` with the most whole GPUs free)
is tried with the goals so far, each gang already placed keeping its own fence, and the
domain kept is the one whose plan keeps every gang so far placed, then meets the most
goals, needs the fewest evictions, then the fewest GPU-hours lost, then had the most GPUs
free already. A gang no domain can be cleared for is reported with the planner's reason
and left out of the plan (its evictions would free nothing it could use). A gang with a
preferred level that no domain of it can hold is planned over the whole cluster (Kueue's
preferred mode climbs up to it); one that names no level is planned over the whole cluster
(nothing keeps its pods together but the gang itself).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuscope.analytics.consolidation.domain import (
    MAX_DOMAINS,
    candidate_domains,
    fence,
    whole_free,
)
from gpuscope.analytics.consolidation.model import Goal, Placed, Plan
from gpuscope.analytics.consolidation.plan import plan_consolidation
from gpuscope.analytics.placement.allocation import NodeState

#: Pending pod groups planned per run (the rest are reported as not planned).
MAX_GANGS = 10
#: The name a plan over the whole cluster gives its "domain".
CLUSTER = "(cluster)"


@dataclass(frozen=True, slots=True)
class GangGoal:
    """A pending pod group as a goal: ``goal`` is its ``pending_job`` (``count`` pods of
    ``gpus`` GPUs, the pods' other requests and tolerations), ``domains`` the level's
    domains (empty: plan over the whole cluster), ``members`` its pending pods
    (``namespace/pod``: no longer goals of their own)."""

    goal: Goal
    level: str
    mode: str
    domains: Mapping[str, frozenset[str]]
    members: tuple[str, ...] = ()
    source: str = ""


@dataclass(frozen=True, slots=True)
class GangOutcome:
    """Where a gang's plan puts it: ``domain`` ("" when none could be cleared, with
    ``reason``), the nodes its pods go to, and the domain's whole free GPUs before."""

    gang: GangGoal
    domain: str
    nodes: tuple[str, ...]
    free_before: int
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        g = self.gang
        return {
            "pod_group": g.goal.name,
            "source": g.source,
            "level": g.level,
            "mode": g.mode,
            "pods": g.goal.count,
            "gpus_per_pod": g.goal.gpus,
            "planned": bool(self.domain),
            "domain": self.domain,
            "nodes": list(self.nodes),
            "free_gpus_before": self.free_before,
            "reason": self.reason,
        }


def _taint(i: int) -> tuple[str, str]:
    """The i-th gang's fence: (taint on the nodes outside, the toleration of it)."""
    return f"gpuscope.io/gang-{i}=outside:NoSchedule", f"gpuscope.io/gang-{i}|Exists||NoSchedule"


def _tolerating(goal: Goal, tols: frozenset[str]) -> Goal:
    return dataclasses.replace(goal, tolerations=goal.tolerations | tols)


def _rank(plan: Plan, kept: set[str], free: int, name: str) -> tuple[Any, ...]:
    lost = sum(1 for label, _ in plan.unplaceable if label in kept)
    return (lost, len(plan.unplaceable), len(plan.evictions), round(plan.gpu_hours_lost, 9),
            -free, name)  # fmt: skip


def _domains_for(gang: GangGoal, nodes: Sequence[NodeState]) -> list[dict[str, frozenset[str]]]:
    """The rounds of domains to try: the level's, then (preferred or no level) the cluster."""
    everything = {CLUSTER: frozenset(n.name for n in nodes)}
    if not gang.domains:
        # a required level no node carries holds nothing; no level (or a preferred one no
        # node carries) constrains nothing
        return [] if gang.level and gang.mode == "required" else [everything]
    rounds = [dict(gang.domains)]
    if gang.mode != "required":
        rounds.append(everything)
    return rounds


def plan_with_gangs(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    gangs: Sequence[GangGoal],
    *,
    max_evictions: int | None = None,
    max_domains: int = MAX_DOMAINS,
    max_gangs: int = MAX_GANGS,
) -> tuple[Plan, list[GangOutcome]]:
    """One plan for the goals and the gangs (module docstring), and where each gang goes."""
    plan = plan_consolidation(nodes, placed, goals, max_evictions=max_evictions)
    fenced = list(nodes)
    tols: frozenset[str] = frozenset()
    kept: list[tuple[GangGoal, str]] = []  # gang, its own toleration
    outcomes: list[GangOutcome] = []
    for i, gang in enumerate(sorted(gangs, key=lambda g: g.goal.name)):
        if i >= max_gangs:
            outcomes.append(GangOutcome(gang, "", (), 0, f"not planned: over {max_gangs} groups"))
            continue
        taint, tol = _taint(i)
        all_tols = tols | {tol}
        base = [_tolerating(g, all_tols) for g in goals]
        earlier = [_tolerating(g.goal, all_tols - {own}) for g, own in kept]
        mine = _tolerating(gang.goal, tols)
        movable = [dataclasses.replace(p, tolerations=p.tolerations | all_tols) for p in placed]
        labels = {g.goal.name for g, _ in kept} | {gang.goal.name}
        best: tuple[tuple[Any, ...], str, Plan, list[NodeState]] | None = None
        rounds = _domains_for(gang, nodes)
        reason = (
            f"no domain of {gang.level} can be cleared for it"
            if rounds
            else f"no node is in a domain of {gang.level}"
        )
        for domains in rounds:
            for name in candidate_domains(fenced, domains, max_domains):
                members = domains[name]
                trial_nodes = fence(fenced, members, taint)
                trial = plan_consolidation(trial_nodes, movable, [*base, *earlier, mine],
                                           max_evictions=max_evictions)  # fmt: skip
                failed = dict(trial.unplaceable)
                if gang.goal.name in failed:
                    reason = failed[gang.goal.name]
                rank = _rank(trial, labels, whole_free(fenced, members), name)
                if rank[0] == 0 and (best is None or rank < best[0]):
                    best = (rank, name, trial, trial_nodes)
            if best is not None:
                break
        if best is None:
            outcomes.append(GangOutcome(gang, "", (), 0, reason))
            continue
        _, name, plan, fenced = best
        tols = all_tols
        kept.append((gang, tol))
        free = whole_free(nodes, _members(gang, name, nodes))
        outcomes.append(GangOutcome(gang, name, _targets(plan, gang.goal.name), free))
    # the outcomes of gangs placed early are read off the final plan (later gangs' plans
    # keep them placed, possibly on other nodes of their domain)
    final = [
        dataclasses.replace(o, nodes=_targets(plan, o.gang.goal.name)) if o.domain else o
        for o in outcomes
    ]
    return plan, final


def _members(gang: GangGoal, name: str, nodes: Sequence[NodeState]) -> frozenset[str]:
    if name == CLUSTER:
        return frozenset(n.name for n in nodes)
    return gang.domains[name]


def _targets(plan: Plan, label: str) -> tuple[str, ...]:
    return tuple(sorted({node for goal, node in plan.targets if goal == label}))

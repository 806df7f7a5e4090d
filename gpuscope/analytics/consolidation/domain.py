"""Consolidation goals that make room for a pod group inside one topology domain.

A pending multi-node job that fits the cluster's free GPUs but no single domain of its
level (:mod:`gpuscope.analytics.domains.topology`) needs a domain cleared for it: its N pods x k
GPUs placed on nodes of *one* domain, after moving small, movable pods out. For each domain
of the level the goal is the planner's own ``pending_job`` goal (``count`` N, ``gpus`` k),
with the domain expressed the way the planner already understands placement limits: every
node outside the domain carries the taint :data:`OUTSIDE_TAINT` that the group's pods do
not tolerate, while every placed pod tolerates it (an evicted pod may go anywhere it could
before). The planner (:func:`plan_consolidation`) and the exact ILP
(:func:`gpuscope.analytics.consolidation.exact.exact_min_evictions`) thus see the same
problem, and the domain whose plan needs the fewest evictions, then the fewest GPU-hours
lost, then has the most GPUs free already (the nearly-free domain) is chosen, among the
:data:`MAX_DOMAINS` domains with the most whole GPUs free (a plan costs a planner run per
domain: all 64 leaves of a 256-node simulated cluster took 9 s on a loaded machine, the
eight 1.2 s). The plan says which domain it frees and what it moves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuscope.analytics.consolidation.model import Goal, Placed, Plan
from gpuscope.analytics.consolidation.plan import plan_consolidation
from gpuscope.analytics.placement.allocation import NodeState

#: Domains planned for per goal, those with the most whole GPUs free first.
MAX_DOMAINS = 8

#: The taint that keeps a domain goal's units off nodes outside the domain.
OUTSIDE_TAINT = "gpuscope.io/outside-domain=true:NoSchedule"
#: Every placed pod's toleration of it (an evicted pod may still go anywhere).
OUTSIDE_TOLERATION = "gpuscope.io/outside-domain|Exists||NoSchedule"


@dataclass(frozen=True, slots=True)
class DomainGoal:
    """N pods x k GPUs inside one domain of ``level`` for the pod group ``label``."""

    label: str
    level: str
    pods: int
    gpus_per_pod: int
    tolerations: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class DomainPlan:
    goal: DomainGoal
    domain: str
    plan: Plan
    #: whole free GPUs the domain had before the plan
    free_before: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "pod_group": self.goal.label,
            "level": self.goal.level,
            "domain": self.domain,
            "pods": self.goal.pods,
            "gpus_per_pod": self.goal.gpus_per_pod,
            "free_gpus_before": self.free_before,
            "nodes": sorted({node for _, node in self.plan.targets}),
            "moves": [m.as_dict() for m in self.plan.moves],
            "evictions": list(self.plan.evictions),
            "gpu_hours_lost": round(self.plan.gpu_hours_lost, 6),
            "strategy": self.plan.strategy,
        }


def fence(nodes: Sequence[NodeState], members: frozenset[str], taint: str) -> list[NodeState]:
    """The nodes, those outside ``members`` carrying ``taint`` (the domain's fence)."""
    return [
        n if n.name in members else dataclasses.replace(n, taints=n.taints | {taint}) for n in nodes
    ]


def candidate_domains(
    nodes: Sequence[NodeState], domains: Mapping[str, frozenset[str]], max_domains: int
) -> list[str]:
    """The ``max_domains`` domains with the most whole GPUs free already (the nearly-free
    ones: a plan costs about a planner run per domain), by name."""
    by_name = {n.name: n for n in nodes}

    def free_of(name: str) -> int:
        return sum(by_name[m].whole_free_gpus for m in domains[name] if m in by_name)

    return sorted(sorted(domains, key=lambda d: (-free_of(d), d))[:max_domains])


def whole_free(nodes: Sequence[NodeState], members: frozenset[str]) -> int:
    """Whole free GPUs on the domain's nodes."""
    return sum(n.whole_free_gpus for n in nodes if n.name in members)


def domain_problem(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    members: frozenset[str],
    goal: DomainGoal,
) -> tuple[list[NodeState], list[Placed], list[Goal]]:
    """The planner's inputs for placing ``goal`` inside the nodes ``members`` (module
    docstring): the same nodes and pods, the outside tainted, every pod tolerating it."""
    fenced = fence(nodes, members, OUTSIDE_TAINT)
    free_to_go = [
        dataclasses.replace(p, tolerations=p.tolerations | {OUTSIDE_TOLERATION}) for p in placed
    ]
    unit = Goal(
        "pending_job",
        gpus=goal.gpus_per_pod,
        count=goal.pods,
        label=goal.label,
        tolerations=goal.tolerations,
    )
    return fenced, free_to_go, [unit]


def plan_domain(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    domains: Mapping[str, frozenset[str]],
    goal: DomainGoal,
    *,
    max_evictions: int | None = None,
    max_domains: int = MAX_DOMAINS,
) -> DomainPlan | None:
    """The best domain to clear for the goal and its plan; None when no domain can be.
    Only the ``max_domains`` domains with the most whole GPUs free already are planned for
    (the nearly-free ones: a plan costs about a planner run per domain)."""
    best: tuple[tuple[int, float, int, str], DomainPlan] | None = None
    for name in candidate_domains(nodes, domains, max_domains):
        members = domains[name]
        fenced, movable, goals = domain_problem(nodes, placed, members, goal)
        plan = plan_consolidation(fenced, movable, goals, max_evictions=max_evictions)
        if plan.unplaceable or plan.goals_met < 1:
            continue
        free = whole_free(nodes, members)
        rank = (len(plan.evictions), round(plan.gpu_hours_lost, 9), -free, name)
        if best is None or rank < best[0]:
            best = (rank, DomainPlan(goal, name, plan, free))
    return best[1] if best else None

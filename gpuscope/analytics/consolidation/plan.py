"""The consolidation planner: which pods to move so that goals become placeable.

Input: the placement now (nodes with the free share of each GPU, and the pods placed on
them, :class:`Placed`) and goals (:class:`Goal`): pending jobs to make placeable (``gpus``
GPUs on one node, each with ``share`` free: 1.0 for whole GPUs, less for a fraction), a
number of whole GPUs to free (``free_gpus``: ``gpus * count`` GPUs) or whole nodes to free
(``free_nodes``: ``count`` nodes with every GPU free). Room that is free already counts, so
a goal already met costs nothing. Bin packing fractional allocations onto fewer GPUs is the
``free_gpus`` goal.

Output: a :class:`Plan`. Every pod the plan touches is evicted (it restarts); where it fits
elsewhere the plan says where (a move, ``to_node`` set), else it goes back to pending
(``to_node`` ""). The plan aims for the fewest evictions, then the fewest GPU-hours of work
lost (time since the pod's last checkpoint or start times its GPUs).

The modules, for a reader new to them:

- :mod:`gpuscope.analytics.consolidation.model`: the records, and which pods may move
  (:func:`placement_from_state`, :func:`goals_from_pending`);
- :mod:`gpuscope.analytics.consolidation.world`: the working state a plan is made in;
- :mod:`gpuscope.analytics.consolidation.search`: how a node and its evictions are chosen for each
  goal unit, by the planner and by the baselines;
- :mod:`gpuscope.analytics.consolidation.exhaustive`: a bounded branch-and-bound over the same
  choices for small clusters, kept where it beats the greedy;
- this module: the entry points and the analysis (findings and summary);
- :mod:`gpuscope.analytics.consolidation.exact`: the exact ILP used to measure the planner's gap.

The planner (:func:`plan_consolidation`) is greedy over goal units, largest first; each unit's
room is reserved, and once every goal is handled the evicted pods are placed best fit into the
room left (moves) or sent to pending. The two strategies people use today are here as
baselines with the same signature: :func:`plan_high_node_utilization` (the Kubernetes
descheduler's HighNodeUtilization: empty the least used node) and
:func:`plan_first_fit_decreasing`. The planner also runs them and keeps the better plan, so
it never needs more evictions than they do. On small clusters (at most 64 nodes and 64
goal units) a bounded search then looks for a plan that meets more goals or needs fewer
evictions.

MIG pods take MIG instances, not GPU shares: a pending MIG pod is a goal for instances of
its profile on one node, a running one frees its instances when evicted. CPU-only pods
hold no GPU but may stand in a job's way (CPU, memory); policy decides whether they move.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.consolidation.budgets import budgets_spent
from gpuscope.analytics.consolidation.exhaustive import search_small
from gpuscope.analytics.consolidation.model import (
    CHECKPOINT_ANNOTATION,
    MOVABLE_KINDS,
    Goal,
    GoalKind,
    Move,
    Placed,
    Plan,
    goals_from_pending,
    placed_by_key,
    placement_from_state,
)
from gpuscope.analytics.consolidation.search import (
    EXHAUSTIVE_PODS,
    choose_ffd,
    choose_first,
    choose_hnu,
    choose_planner,
    plan_rank,
    plan_with,
)
from gpuscope.analytics.placement.allocation import ClusterState, GpuIndices, NodeState
from gpuscope.collector.cluster.inventory_records import PodInfo
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.records import Finding, finding_id
from gpuscope.core.settings import AnalyticsSettings

__all__ = [
    "CHECKPOINT_ANNOTATION",
    "EXHAUSTIVE_PODS",
    "KINDS",
    "MOVABLE_KINDS",
    "Goal",
    "GoalKind",
    "Move",
    "Placed",
    "Plan",
    "analyze_consolidation",
    "goals_from_pending",
    "placed_by_key",
    "placement_from_state",
    "plan_consolidation",
    "plan_first_fit_decreasing",
    "plan_greedy",
    "plan_high_node_utilization",
]

KINDS = ("consolidation",)

if TYPE_CHECKING:  # gangs.py plans with this module's planner
    from gpuscope.analytics.consolidation.gangs import GangGoal, GangOutcome


def plan_greedy(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    *,
    max_evictions: int | None = None,
) -> Plan:
    """The greedy planner alone (module docstring), without the baselines' portfolio."""
    return plan_with(choose_planner, nodes, placed, goals, max_evictions, "planner")


def plan_high_node_utilization(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    *,
    max_evictions: int | None = None,
) -> Plan:
    """Baseline: a unit goes where it fits now (first fit), else onto the least used node
    that can hold it, evicting its smallest pods until it does (descheduler
    HighNodeUtilization)."""
    return plan_with(choose_hnu, nodes, placed, goals, max_evictions, "high_node_utilization")


def plan_first_fit_decreasing(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    *,
    max_evictions: int | None = None,
) -> Plan:
    """Baseline: units largest first, each on the first node (by name) where it fits or can
    be made to fit by evicting its largest pods first."""
    return plan_with(choose_ffd, nodes, placed, goals, max_evictions, "first_fit_decreasing")


def plan_consolidation(
    nodes: Sequence[NodeState],
    placed: Sequence[Placed],
    goals: Sequence[Goal],
    *,
    max_evictions: int | None = None,
) -> Plan:
    """The plan: the greedy planner's, or a baseline's where one does better (more goals,
    then fewer evictions, then fewer GPU-hours lost)."""
    best = plan_greedy(nodes, placed, goals, max_evictions=max_evictions)
    if not best.evictions and not best.unplaceable:
        return best
    others: list[Callable[[], Plan]] = [
        lambda: plan_high_node_utilization(nodes, placed, goals, max_evictions=max_evictions),
        lambda: plan_first_fit_decreasing(nodes, placed, goals, max_evictions=max_evictions),
        # the goals in the order given, and first fit: other packings of the same room
        lambda: plan_with(
            choose_planner, nodes, placed, goals, max_evictions, "planner", decreasing=False
        ),
        lambda: plan_with(choose_first, nodes, placed, goals, max_evictions, "planner"),
    ]
    for make in others:
        plan = make()
        if plan_rank(plan) < plan_rank(best):
            best = plan
        if not best.evictions and not best.unplaceable:
            return best
    # small instances: a bounded search over every unit's choices, pruned by that plan
    script = search_small(nodes, placed, goals, best, max_evictions=max_evictions)
    if script is not None:
        plan = plan_with(script, nodes, placed, goals, max_evictions, "planner")
        if plan_rank(plan) < plan_rank(best):
            best = plan
    return best


# --- the analysis ----------------------------------------------------------------------


def analyze_consolidation(
    state: ClusterState,
    pods: Sequence[PodInfo],
    *,
    at: datetime,
    settings: AnalyticsSettings,
    goals: Sequence[Goal] | None = None,
    gpu_indices: GpuIndices | None = None,
    protected_namespaces: Iterable[str] | None = None,
    pdb_blocked: frozenset[str] | set[str] = frozenset(),
    pdb_spend: Mapping[str, tuple[str, int]] | None = None,
    max_evictions: int | None = None,
    gangs: Sequence[GangGoal] = (),
) -> Analysis:
    """The plan for the goals (the pending pods when not given), as findings and summary;
    pending pod groups (``gangs``) are planned whole, each inside one domain of its level
    (:mod:`gpuscope.analytics.consolidation.gangs`), their pods no goals of their own.
    ``pdb_spend`` (:func:`gpuscope.analytics.consolidation.budgets.budget_spend`) gives the
    PodDisruptionBudget each pod's eviction spends: the plan stays within each budget's
    disruptions across all its evictions, and the summary's ``pdb_spent`` says how much of
    each it spends."""
    del settings  # no thresholds yet; kept for the shape every analysis has
    if protected_namespaces is None:
        protected_namespaces = WorkloadSettings().protected_namespaces
    placed = placement_from_state(
        state,
        pods,
        at=at,
        gpu_indices=gpu_indices,
        protected_namespaces=protected_namespaces,
        pdb_blocked=pdb_blocked,
        pdb_spend=pdb_spend,
    )
    goal_list = list(goals) if goals is not None else goals_from_pending(pods)
    outcomes: list[GangOutcome] = []
    if gangs:
        from gpuscope.analytics.consolidation.gangs import plan_with_gangs

        grouped = {m for g in gangs for m in g.members}
        goal_list = [g for g in goal_list if g.label not in grouped]
        plan, outcomes = plan_with_gangs(
            state.nodes, placed, goal_list, gangs, max_evictions=max_evictions
        )
        goal_list += [o.gang.goal for o in outcomes if o.domain]
    else:
        plan = plan_consolidation(state.nodes, placed, goal_list, max_evictions=max_evictions)
    failed = {label for label, _ in plan.unplaceable}
    by_goal: dict[str, list[str]] = {}
    for label, node in plan.targets:
        by_goal.setdefault(label, []).append(node)
    # a pod group's finding says which domain of which level its plan frees
    placed_in = {o.gang.goal.name: {"level": o.gang.level, "domain": o.domain} for o in outcomes}
    findings = []
    for goal in goal_list:
        if goal.name in failed:
            continue
        subject = {"goal": goal.name}
        target: dict[str, Any] = {
            "goal": goal.name,
            "kind": goal.kind,
            "gpus": goal.gpus,
            "share": goal.share,
            "count": goal.count,
            "nodes": sorted(set(by_goal.get(goal.name, []))),
        }
        target |= placed_in.get(goal.name, {})
        findings.append(
            Finding(
                id=finding_id("consolidation", subject),
                kind="consolidation",
                severity="info",
                subject=subject,
                since=None,
                observed_at=at,
                evidence={"plan_moves": len(plan.moves), "nodes": target["nodes"]},
                recommendation={
                    "action": "consolidate",
                    "target": target,
                    "moves": len(plan.moves),
                },
            )
        )
    summary: dict[str, Any] = {
        "moves": [m.as_dict() for m in plan.moves],
        "evictions": list(plan.evictions),
        "unplaceable": [{"goal": g, "reason": r} for g, r in plan.unplaceable]
        + [{"goal": o.gang.goal.name, "reason": o.reason} for o in outcomes if not o.domain],
        "evictions_count": len(plan.evictions),
        "moves_count": sum(1 for m in plan.moves if m.to_node),
        "gpu_hours_lost": round(plan.gpu_hours_lost, 6),
        "goals": len(goal_list) + sum(1 for o in outcomes if not o.domain),
        "goals_met": plan.goals_met,
        "strategy": plan.strategy,
        # pending pod groups, each planned whole inside one domain (consolidation/gangs.py)
        "pod_groups": [o.as_dict() for o in outcomes],
        "movable_pods": sum(1 for p in placed if p.movable),
        # each PodDisruptionBudget the plan's evictions spend: allowed, planned, which pods
        "pdb_spent": budgets_spent(plan.evictions, pdb_spend or {}),
        # DRA: pods whose shared standalone claims keep their devices; evicting frees none
        "held_by_standalone_claims": [
            {"pod": p.key, "node": p.node, "reason": p.reason_fixed}
            for p in placed
            if p.reason_fixed.startswith("standalone claim")
        ],
    }
    return Analysis(kinds=KINDS, findings=findings, summary=summary)

"""Steps for a pending pod group's consolidation plan (pure).

A pending pod group (a gang: Kueue pod group or Workload, KAI/Volcano PodGroup, JobSet, one
Job's pods) starts whole inside one domain of its topology level or not at all, so its plan
(:func:`gpuscope.analytics.consolidation.gangs.plan_with_gangs`) puts all its pods on nodes
of one domain. Its steps are one unit, carried out whole or not at all
(gpuscope/actions/group_freeing.py): ``reserve`` every node the plan puts a member on (with
or without evictions there: free room left open would let other pods in), ``tolerate`` for
every member (one toleration, the group's), ``evict`` every victim on those nodes. A group
whose evictions exceed ``max_evictions_per_node`` on a node or the run's
``max_evictions_per_run`` is left out whole, with a note: half a group's room frees nothing
it can use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from gpuscope.actions.plan import Step, evict_step, reserve_key
from gpuscope.actions.policy import Policy
from gpuscope.analytics.consolidation.gangs import GangOutcome
from gpuscope.analytics.consolidation.model import Plan
from gpuscope.collector.cluster.inventory_records import PodInfo


def group_steps(
    policy: Policy,
    plan: Plan,
    outcome: GangOutcome,
    pods: Mapping[str, PodInfo],
    now: datetime,
    evictions_so_far: int = 0,
) -> tuple[list[Step], str]:
    """The group's steps (empty, with why, when it is left out)."""
    gang = outcome.gang
    label = gang.goal.name
    nodes = sorted({node for goal, node in plan.targets if goal == label})
    if not outcome.domain or not nodes:
        return [], f"pod group {label}: no domain can be cleared for it ({outcome.reason})"
    members = tuple(
        (key, pods[key].uid)
        for key in sorted(gang.members)
        if key in pods and pods[key].node is None
    )
    if len(members) < len(gang.members) or not members:
        return [], f"pod group {label}: not every member is a pending pod in the inventory"
    victims: dict[str, list[str]] = {n: [] for n in nodes}
    for move in plan.moves:
        if move.from_node in victims:
            victims[move.from_node].append(f"{move.namespace}/{move.pod}")
    total = sum(len(v) for v in victims.values())
    if not total:
        return [], ""  # it fits the domain now: the scheduler needs no help
    for node, vs in victims.items():
        if len(vs) > policy.max_evictions_per_node:
            return [], (
                f"pod group {label} on {node}: needs {len(vs)} evictions, over "
                f"max_evictions_per_node={policy.max_evictions_per_node}"
            )
    if evictions_so_far + total > policy.max_evictions_per_run:
        return [], (
            f"pod group {label}: needs {total} evictions, over "
            f"max_evictions_per_run={policy.max_evictions_per_run}"
        )
    deadline = now + timedelta(minutes=policy.cordon_minutes)
    reason = (
        f"free {', '.join(nodes)} in {gang.level or 'the cluster'} {outcome.domain} for pod "
        f"group {label} ({len(members)} pods, {total} eviction(s))"
    )
    steps = [
        Step("reserve", policy, reason, node=n, key=reserve_key(n), due_at=deadline,
             goal=label, members=members)
        for n in nodes
    ]  # fmt: skip
    for key, uid in members:
        info = pods[key]
        steps.append(
            Step(
                "tolerate",
                policy,
                f"let the pods of {label}, and only them, schedule onto the nodes reserved "
                "for the group",
                namespace=info.namespace,
                pod=info.name,
                uid=uid,
                gpus=float(info.gpu_request),
                goal=label,
                members=members,
            )
        )
    for node, vs in victims.items():
        steps += [evict_step(policy, reason, v, pods, node, label, members) for v in sorted(vs)]
    return steps, ""


def split_groups(steps: Sequence[Step]) -> tuple[list[Step], dict[str, list[Step]]]:
    """Single pods' steps (in order) and each pod group's steps by the group."""
    single: list[Step] = []
    groups: dict[str, list[Step]] = {}
    for step in steps:
        if step.members:
            groups.setdefault(step.goal or "", []).append(step)
        else:
            single.append(step)
    return single, groups

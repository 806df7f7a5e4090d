"""Pending pod groups as consolidation goals: the bridge from the topology code (which pods
form a group, which level it asks for, the level's domains) to the planner's gang goals
(:mod:`gpuscope.analytics.consolidation.gangs`).

A group is recognised as ``gpuscope analyze topology`` recognises it
(:func:`gpuscope.analytics.domains.topology_groups.pod_groups`: Kueue pod groups and Workloads,
Volcano and KAI PodGroups, JobSets, Kubeflow jobs, one Job's pods) and its domains resolved
as it resolves them (:func:`gpuscope.analytics.domains.topology_levels.topology_of`). Only pending
groups of two or more pods count (no pod placed yet: a gang starts whole). The goal carries
what its pods ask for besides GPUs (CPU, memory, node selector, GPU model, tolerations),
taken from its first pending pod; a Workload with no pod yet carries its GPUs and
tolerations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpuscope.analytics.consolidation.gangs import GangGoal
from gpuscope.analytics.consolidation.model import Goal, goals_from_pending
from gpuscope.analytics.domains.topology_groups import pod_groups
from gpuscope.analytics.domains.topology_levels import topology_of
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.kube_objects import ObjectSet


def gang_goals(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    objects: ObjectSet | None = None,
    labels: Sequence[str] | None = None,
) -> list[GangGoal]:
    """The pending pod groups of the records as gang goals (module docstring)."""
    objects = objects or ObjectSet()
    groups = [g for g in pod_groups(pods, objects) if g.pending and g.pods >= 2]
    if not groups:
        return []
    asked = {lv for g in groups for lv in (g.required_level, g.preferred_level) if lv}
    topo = topology_of(nodes, objects, labels, sorted(asked))
    per_pod = {g.label: g for g in goals_from_pending(pods)}
    out = []
    for g in groups:
        level, mode = (
            (g.required_level, "required")
            if g.required_level
            else (g.preferred_level, "preferred")
            if g.preferred_level
            else ("", "unconstrained")
        )
        members = tuple(f"{g.namespace}/{m}" for m in g.members)
        first = next((per_pod[m] for m in members if m in per_pod), None)
        if first is not None:
            goal = dataclasses.replace(
                first, gpus=g.gpus_per_pod, share=1.0, count=g.pods, label=g.key
            )
        else:
            goal = Goal(
                "pending_job", gpus=g.gpus_per_pod, count=g.pods, label=g.key,
                tolerations=g.tolerations,
            )  # fmt: skip
        domains: dict[str, set[str]] = {}
        for node, domain in topo.domains.get(level, {}).items():
            domains.setdefault(domain, set()).add(node)
        out.append(
            GangGoal(
                goal=goal,
                level=level,
                mode=mode,
                domains={d: frozenset(m) for d, m in domains.items()},
                members=members,
                source=g.source,
            )
        )
    return out

"""PodDisruptionBudgets spent across a plan: which budget each pod's eviction spends, and
how much of each a plan spends.

kube-apiserver's eviction handler (``pkg/registry/core/pod/storage/eviction.go``) asks the
one budget that selects a Running, not Terminating pod; its ``checkAndDecrement`` refuses
(429) while ``status.disruptionsAllowed`` is 0 and otherwise grants the eviction and writes
the count back one lower (the pod goes into ``status.disruptedPods``, so the disruption
controller does not count it healthy meanwhile). Two evictions under a budget that allows
one are thus one grant and one 429, whichever nodes the pods run on: the planner spends
each budget across the whole plan (:class:`gpuscope.analytics.consolidation.world.World`).

Pods a budget keeps in place altogether (none left, a status lagging its spec, two budgets
selecting the pod) are held by :func:`gpuscope.collector.cluster.pdb_records.blocked_by_budgets`;
this module gives the others their budget and its count. Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuscope.collector.cluster.inventory_records import PodInfo
from gpuscope.collector.cluster.pdb_records import Budget


def asks_budget(pod: PodInfo) -> bool:
    """Whether evicting the pod asks its budget: the eviction handler deletes Pending,
    Succeeded, Failed and Terminating pods without asking (its ``canIgnorePDB``)."""
    return pod.phase not in ("Pending", "Succeeded", "Failed") and not pod.terminating


def budget_spend(budgets: Iterable[Budget], pods: Sequence[PodInfo]) -> dict[str, tuple[str, int]]:
    """``namespace/pod`` -> (the budget its eviction spends, that budget's
    ``disruptionsAllowed``), for every pod exactly one budget selects and whose eviction
    asks it."""
    by_ns: dict[str, list[Budget]] = {}
    for b in budgets:
        by_ns.setdefault(b.namespace, []).append(b)
    out: dict[str, tuple[str, int]] = {}
    for pod in pods:
        if not asks_budget(pod):
            continue
        mine = [b for b in by_ns.get(pod.namespace, ()) if b.selects(pod.labels)]
        if len(mine) == 1:
            allowed = 0 if mine[0].stale else max(0, mine[0].disruptions_allowed)
            out[f"{pod.namespace}/{pod.name}"] = (mine[0].key, allowed)
    return out


def budgets_spent(
    evictions: Iterable[str], spend: Mapping[str, tuple[str, int]]
) -> dict[str, dict[str, Any]]:
    """Per budget a plan's evictions spend: ``{"allowed": n, "planned": m, "pods": [...]}``
    (``planned`` never exceeds ``allowed`` in the planner's plans)."""
    out: dict[str, dict[str, Any]] = {}
    for key in evictions:
        if key not in spend:
            continue
        budget, allowed = spend[key]
        row = out.setdefault(budget, {"allowed": allowed, "planned": 0, "pods": []})
        row["planned"] += 1
        row["pods"].append(key)
    return dict(sorted(out.items()))

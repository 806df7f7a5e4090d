"""PodDisruptionBudgets as records, and which pods they keep in place now, so the
consolidation planner never chooses a victim whose eviction the API server would refuse.

The Eviction API (policy/v1) decides from the budget's *status*, which the disruption
controller keeps: it refuses (429, ``DisruptionBudget`` cause) while
``status.disruptionsAllowed`` is 0, or while ``status.observedGeneration`` is behind
``metadata.generation`` (the budget "is still being processed"), and it refuses a pod that
more than one budget selects. In policy/v1 an empty selector (``selector: {}``) selects
every pod of the budget's namespace and an absent (null) one selects none (kube-apiserver's
``getPodDisruptionBudgets`` and the disruption controller both read it so). Pods that are
not Running (Pending, Succeeded, Failed) or are Terminating are evicted without asking their
budget; a Running pod that is not Ready (its ``Ready`` condition not ``True``) is evicted
without spending the budget when the budget's ``unhealthyPodEvictionPolicy`` is
``AlwaysAllow``, or, under ``IfHealthyBudget`` (the default), while the budget is met
(``currentHealthy >= desiredHealthy > 0``). ``minAvailable``/``maxUnavailable`` are kept as
written; :func:`desired_healthy` turns them into the count the controller wants healthy
(a percentage of the expected pods rounded up). This module reads those same fields and
rules, without I/O:
the actions runner lists the budgets live (gpuscope/actions/kube.py), the collector's
inventory lists them and stores them with the other inventory kinds (``inventory_pdbs``,
one JSON record per version: :func:`budget_record`), and plans made from a database read
them back (:func:`stored_budgets`), so a plan from the database honours the budgets a live
plan honours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb

from gpuscope.collector.cluster.inventory_records import PodInfo
from gpuscope.core.kube_objects import ObjectSet

#: ``spec.unhealthyPodEvictionPolicy`` values (policy/v1).
IF_HEALTHY_BUDGET = "IfHealthyBudget"
ALWAYS_ALLOW = "AlwaysAllow"


@dataclass(frozen=True, slots=True)
class Budget:
    """One PodDisruptionBudget as the eviction handler sees it."""

    namespace: str
    name: str
    match_labels: Mapping[str, str] = field(default_factory=dict)
    #: ``matchExpressions`` as (key, operator, values).
    expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()
    disruptions_allowed: int = 0
    #: The controller has not caught up with the spec (the API server refuses evictions).
    stale: bool = False
    desired_healthy: int = 0
    current_healthy: int = 0
    #: ``spec.minAvailable`` / ``spec.maxUnavailable``: an IntOrString (``1``, ``"50%"``),
    #: as text; None where unset.
    min_available: str | None = None
    max_unavailable: str | None = None
    #: ``status.expectedPods``: the pods the controller counted for the budget.
    expected_pods: int = 0
    #: ``spec.selector`` was given (``{}`` included); an absent one selects no pod.
    has_selector: bool = True
    #: ``spec.unhealthyPodEvictionPolicy``: ``IfHealthyBudget`` (also when unset) or
    #: ``AlwaysAllow``.
    unhealthy_policy: str = IF_HEALTHY_BUDGET

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, labels: Mapping[str, str]) -> bool:
        """The LabelSelector's answer for a pod's labels (policy/v1): an empty selector
        selects every pod, an absent one none."""
        if not self.has_selector:
            return False
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for key, op, values in self.expressions:
            ok = {
                "In": key in labels and labels[key] in values,
                "NotIn": labels.get(key) not in values,
                "Exists": key in labels,
                "DoesNotExist": key not in labels,
            }.get(op, False)
            if not ok:
                return False
        return True

    def lets_unready_pod_go(self) -> bool:
        """Whether a Running pod that is not Ready is evicted without spending the budget
        (the eviction handler's check before its budget check)."""
        if self.unhealthy_policy == ALWAYS_ALLOW:
            return True
        return self.current_healthy >= self.desired_healthy > 0

    def why_blocked(self) -> str:
        """Why the budget refuses an eviction now ("" when it allows one)."""
        if self.stale:
            return "is still being processed by its controller"
        if self.disruptions_allowed < 0:
            return "has a negative disruptionsAllowed (the API server forbids evictions)"
        if self.disruptions_allowed == 0:
            return (
                f"allows no disruption (needs {self.desired_healthy} healthy pods, "
                f"has {self.current_healthy})"
            )
        return ""


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _int_or_percent(value: Any) -> str | None:
    return None if value is None else str(value)


def scaled_value(value: int | str, total: int) -> int:
    """An IntOrString of a budget against ``total`` pods, as the disruption controller
    reads it (``intstr.GetScaledValueFromIntOrPercent`` rounding up): a number as it is,
    ``"N%"`` as N percent of ``total`` rounded up. Anything else (``"1"`` as a string,
    ``"x%"``) raises ValueError, which makes the controller set no disruption allowed."""
    if isinstance(value, bool):
        raise ValueError(f"invalid IntOrString {value!r}")
    if isinstance(value, int):
        return value
    text = str(value)
    if not text.endswith("%") or not text[:-1].lstrip("-").isdigit():
        raise ValueError(f"invalid value for IntOrString: {text!r} is not a percentage")
    return -(-int(text[:-1]) * total // 100)


def desired_healthy(
    min_available: int | str | None, max_unavailable: int | str | None, expected: int
) -> int:
    """The healthy pods a budget wants, given the pods the controller expects: ``expected``
    less ``maxUnavailable`` (never below 0) when that is set, else ``minAvailable`` (a
    number as it is, a percentage of ``expected`` rounded up), else 0. For a number
    ``minAvailable`` the controller expects the pods the budget selects; for the other
    forms, the replicas of their controllers (pods without one are not counted)."""
    if max_unavailable is not None:
        return max(0, expected - scaled_value(max_unavailable, expected))
    if min_available is not None:
        return scaled_value(min_available, expected)
    return 0


def disruptions_allowed(current_healthy: int, desired: int, expected: int) -> int:
    """``status.disruptionsAllowed`` as the controller sets it: healthy pods over the wanted
    count, and none while it expects no pod."""
    allowed = current_healthy - desired
    return allowed if expected > 0 and allowed > 0 else 0


def budget_from_json(obj: Mapping[str, Any]) -> Budget:
    """A policy/v1 PodDisruptionBudget as the API server returns it."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    raw_selector = spec.get("selector")
    selector = raw_selector if isinstance(raw_selector, Mapping) else {}
    expressions = tuple(
        (str(e.get("key", "")), str(e.get("operator", "")), frozenset(e.get("values") or ()))
        for e in selector.get("matchExpressions") or ()
    )
    generation = _int(meta.get("generation"))
    observed = _int(status.get("observedGeneration"))
    return Budget(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        match_labels={str(k): str(v) for k, v in (selector.get("matchLabels") or {}).items()},
        expressions=expressions,
        disruptions_allowed=_int(status.get("disruptionsAllowed")),
        stale=observed < generation,
        desired_healthy=_int(status.get("desiredHealthy")),
        current_healthy=_int(status.get("currentHealthy")),
        min_available=_int_or_percent(spec.get("minAvailable")),
        max_unavailable=_int_or_percent(spec.get("maxUnavailable")),
        expected_pods=_int(status.get("expectedPods")),
        has_selector=isinstance(raw_selector, Mapping),
        unhealthy_policy=_policy(spec.get("unhealthyPodEvictionPolicy")),
    )


def _policy(value: Any) -> str:
    return ALWAYS_ALLOW if value == ALWAYS_ALLOW else IF_HEALTHY_BUDGET


def budget_record(b: Budget) -> dict[str, Any]:
    """The JSON record the inventory stores (``inventory_pdbs``, keyed ``namespace/name``)."""
    return {
        "namespace": b.namespace,
        "name": b.name,
        "match_labels": dict(b.match_labels),
        "expressions": [[k, op, sorted(values)] for k, op, values in b.expressions],
        "disruptions_allowed": b.disruptions_allowed,
        "stale": b.stale,
        "desired_healthy": b.desired_healthy,
        "current_healthy": b.current_healthy,
        "min_available": b.min_available,
        "max_unavailable": b.max_unavailable,
        "expected_pods": b.expected_pods,
        "has_selector": b.has_selector,
        "unhealthy_policy": b.unhealthy_policy,
    }


def budget_from_record(rec: Mapping[str, Any]) -> Budget:
    """A stored record (:func:`budget_record`) back as the budget it was."""
    return Budget(
        namespace=str(rec.get("namespace", "")),
        name=str(rec.get("name", "")),
        match_labels={str(k): str(v) for k, v in (rec.get("match_labels") or {}).items()},
        expressions=tuple(
            (str(k), str(op), frozenset(map(str, values)))
            for k, op, values in rec.get("expressions") or ()
        ),
        disruptions_allowed=_int(rec.get("disruptions_allowed")),
        stale=bool(rec.get("stale")),
        desired_healthy=_int(rec.get("desired_healthy")),
        current_healthy=_int(rec.get("current_healthy")),
        min_available=_int_or_percent(rec.get("min_available")),
        max_unavailable=_int_or_percent(rec.get("max_unavailable")),
        expected_pods=_int(rec.get("expected_pods")),
        # records stored before the key kept only budgets with a selector that mattered
        has_selector=bool(rec.get("has_selector", True)),
        unhealthy_policy=_policy(rec.get("unhealthy_policy")),
    )


def budgets_of(objects: ObjectSet) -> list[Budget]:
    """The PodDisruptionBudgets (policy/v1) among ``--objects`` files: ``kubectl get pdb -A
    -o json`` as it is. A budget without a status (written by hand) allows no disruption,
    as the Eviction API treats one its controller has not processed yet."""
    return [budget_from_json(o) for o in objects.of("PodDisruptionBudget", group="policy")]


#: The budgets the inventory holds now (the current version of each).
CURRENT_BUDGETS = "SELECT record FROM inventory_pdbs WHERE valid_to IS NULL ORDER BY key"


def stored_budgets(con: duckdb.DuckDBPyConnection) -> list[Budget]:
    """The PodDisruptionBudgets the collector's inventory holds now; none in a database
    written before it stored them (schema version 6 or older, read-only)."""
    try:
        rows = con.execute(CURRENT_BUDGETS).fetchall()
    except duckdb.CatalogException:
        return []
    return [budget_from_record(json.loads(text)) for (text,) in rows]


def _needs_budget(pod: PodInfo) -> bool:
    """Whether an eviction of the pod asks its budgets (the API server skips them for
    Pending, Succeeded and Failed pods and for Terminating pods)."""
    return pod.phase not in ("Pending", "Succeeded", "Failed") and not pod.terminating


def blocked_by_budgets(budgets: Iterable[Budget], pods: Sequence[PodInfo]) -> dict[str, str]:
    """``namespace/pod`` -> why its eviction would be refused now, naming the budget(s),
    for every pod a budget keeps in place."""
    by_ns: dict[str, list[Budget]] = {}
    for b in budgets:
        by_ns.setdefault(b.namespace, []).append(b)
    out: dict[str, str] = {}
    for pod in pods:
        if not _needs_budget(pod):
            continue
        mine = [b for b in by_ns.get(pod.namespace, ()) if b.selects(pod.labels)]
        if len(mine) > 1:
            names = ", ".join(b.key for b in mine)
            out[f"{pod.namespace}/{pod.name}"] = (
                f"PodDisruptionBudgets {names} all select it (the Eviction API refuses a pod "
                "with more than one)"
            )
        elif mine and not (not pod.ready and mine[0].lets_unready_pod_go()):
            why = mine[0].why_blocked()
            if why:
                out[f"{pod.namespace}/{pod.name}"] = f"PodDisruptionBudget {mine[0].key} {why}"
    return out

"""The scheduler's placement rules as gpuscope reads them from Kubernetes objects: hard
taints and tolerations (the TaintToleration and NodeUnschedulable plugins' matching), and a
pod's pinning to GPU models by ``nodeSelector`` or required node affinity on the GPU
product label. Pure functions of plain JSON; :mod:`gpuscope.collector.cluster.inventory_records`
stores what they return, :mod:`gpuscope.analytics.placement.allocation` decides placement with
:func:`tolerates`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuscope.core import kube_names as names

#: Taint effects that keep a pod off a node (``PreferNoSchedule`` is a preference).
HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
#: Taints of NotReady / unreachable nodes: every pod tolerates them for a while by default,
#: and such nodes are not placeable whatever the tolerations.
DEFAULT_TOLERATED = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def taint_text(key: str, value: str, effect: str) -> str:
    """A taint as ``key=value:effect`` (``key:effect`` without value)."""
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def toleration(t: Mapping[str, Any]) -> str | None:
    effect = t.get("effect") or ""
    if effect and effect not in HARD_EFFECTS:
        return None
    key = t.get("key") or ""
    if key in DEFAULT_TOLERATED:
        return None
    operator = t.get("operator") or "Equal"
    value = "" if operator == "Exists" else str(t.get("value") or "")
    return f"{key}|{operator}|{value}|{effect}"


def tolerates(tolerations: Iterable[str], taint: str) -> bool:
    """Whether a pod with these tolerations (``key|operator|value|effect``) tolerates the
    taint (``key=value:effect``), by the Kubernetes rules: an empty key with ``Exists``
    tolerates everything, an empty effect matches every effect."""
    head, _, effect = taint.rpartition(":")
    key, _, value = head.partition("=")
    for text in tolerations:
        t_key, operator, t_value, t_effect = [*text.split("|"), "", "", ""][:4]
        if t_effect and t_effect != effect:
            continue
        if not t_key:
            if operator == "Exists":
                return True
            continue
        if t_key != key:
            continue
        if operator == "Exists" or t_value == value:
            return True
    return False


def gpu_spec(spec: Mapping[str, Any]) -> str:
    """The GPU models a pod is pinned to: ``nodeSelector`` on the product label, else the
    ``In`` values of required node affinity on it (terms OR'ed: their values joined)."""
    label = names.GPU_PRODUCT_LABEL
    selected = (spec.get("nodeSelector") or {}).get(label)
    if selected:
        return str(selected)
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    values: list[str] = []
    for term in affinity.get("nodeSelectorTerms") or ():
        for expr in term.get("matchExpressions") or ():
            if expr.get("key") == label and expr.get("operator") == "In":
                values += [str(v) for v in expr.get("values") or ()]
    return "|".join(values)

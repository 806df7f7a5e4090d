"""Queue and quota objects as records: Kueue ClusterQueues, LocalQueues, Cohorts and
ResourceFlavors, KAI
Queues, ResourceQuotas.

Pure functions from the objects as the API server (or ``kubectl get -o json``) gives them
to :class:`~gpuscope.collector.cluster.inventory_records.QuotaInfo`; the inventory lists the
objects, ``--objects FILE`` reads them from files, and both end here, so a live cluster
and a snapshot of it give one queue model (gpuscope/analytics/queueing/queues.py). Only GPUs are
read (``nvidia.com/gpu``); each rule's source is in docs/analytics.md ("Queues").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from gpuscope.collector.cluster.inventory_records import QuotaInfo, parse_quantity, parse_time
from gpuscope.collector.cluster.scheduling_rules import HARD_EFFECTS, taint_text, toleration
from gpuscope.core import kube_names as names
from gpuscope.core.kube_objects import ObjectSet

KUEUE_GROUP = "kueue.x-k8s.io"
KAI_GROUP = "scheduling.run.ai"
#: The label the API server puts on every Namespace: its own name.
NAME_LABEL = "kubernetes.io/metadata.name"
#: Namespaces by name, each with its labels.
NamespaceLabels = Mapping[str, Mapping[str, str]]


def _opt_num(value: Any) -> float | None:
    return None if value is None or str(value).strip() == "" else parse_quantity(value)


def _gpu_quotas(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(flavor, quota) for each flavor's ``nvidia.com/gpu`` entry in ``resourceGroups``."""
    out = []
    for group in spec.get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for res in flavor.get("resources") or ():
                if res.get("name") == names.GPU_RESOURCE:
                    out.append((str(flavor.get("name") or ""), res))
    return out


def _covers_gpu(spec: Mapping[str, Any]) -> bool:
    """Does a resource group cover ``nvidia.com/gpu``? (Kueue's flavor assigner finds no
    flavor for a resource no group covers: the workload never fits.)"""
    return any(
        names.GPU_RESOURCE in (group.get("coveredResources") or ())
        for group in spec.get("resourceGroups") or ()
    ) or bool(_gpu_quotas(spec))


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector's answer for a namespace's labels, as Kueue reads a ClusterQueue's
    ``namespaceSelector`` (metav1.LabelSelectorAsSelector): None (unset) selects nothing,
    ``{}`` everything; ``matchLabels`` and every ``matchExpressions`` entry must hold."""
    if selector is None:
        return False
    if any(labels.get(k) != str(v) for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        key, op = str(expr.get("key", "")), str(expr.get("operator", ""))
        values = {str(v) for v in expr.get("values") or ()}
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(op, False)
        if not ok:
            return False
    return True


def _namespace_fields(
    spec: Mapping[str, Any], namespaces: NamespaceLabels | None
) -> dict[str, Any]:
    """``namespace_selector`` (as text) and ``selected_namespaces``: the namespaces of
    ``namespaces`` it selects (None where no namespace is known, or for ``{}``)."""
    selector = spec.get("namespaceSelector")
    text = json.dumps(selector, sort_keys=True, separators=(",", ":"))
    if selector is None:  # unset: Kueue's nothing selector
        return {"namespace_selector": text, "selected_namespaces": ()}
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return {"namespace_selector": text, "selected_namespaces": None}
    if namespaces is None:
        return {"namespace_selector": text, "selected_namespaces": None}
    chosen = tuple(
        sorted(
            ns for ns, labels in namespaces.items() if selects(selector, {NAME_LABEL: ns, **labels})
        )
    )
    return {"namespace_selector": text, "selected_namespaces": chosen}


def namespace_labels(
    objects: Iterable[Mapping[str, Any]], also: Iterable[str] = ()
) -> dict[str, dict[str, str]]:
    """Labels of each Namespace object, plus the namespaces in ``also`` with only the label
    the API server gives every namespace (its name)."""
    out: dict[str, dict[str, str]] = {ns: {NAME_LABEL: ns} for ns in also if ns}
    for obj in objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if name:
            out[name] = {
                NAME_LABEL: name,
                **{str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            }
    return out


def _limit_sum(values: list[float | None]) -> float | None:
    """A limit over flavors: their sum, or None (no limit) when any flavor has none."""
    return None if not values or None in values else sum(v or 0.0 for v in values)


def _quotas(spec: Mapping[str, Any]) -> dict[str, Any]:
    gpu = _gpu_quotas(spec)
    weight = (spec.get("fairSharing") or {}).get("weight")
    return {
        "guaranteed_gpus": sum(parse_quantity(r.get("nominalQuota", 0)) for _, r in gpu),
        "borrowing_limit": _limit_sum([_opt_num(r.get("borrowingLimit")) for _, r in gpu]),
        "lending_limit": _limit_sum([_opt_num(r.get("lendingLimit")) for _, r in gpu]),
        "over_quota_weight": _opt_num(weight),
        "flavors": tuple(f for f, _ in gpu),
        "flavor_quotas": tuple(
            (
                f,
                parse_quantity(r.get("nominalQuota", 0)),
                _opt_num(r.get("borrowingLimit")),
                _opt_num(r.get("lendingLimit")),
            )
            for f, r in gpu
        ),
    }


def quota_from_clusterqueue(
    obj: Mapping[str, Any], namespaces: NamespaceLabels | None = None
) -> QuotaInfo:
    """A Kueue ClusterQueue: nominal quota, borrowing and lending limits summed over its GPU
    flavors, its cohort (``spec.cohort`` in v1beta1, ``spec.cohortName`` in v1beta2), its
    preemption policies ("" where unset: Kueue's default, Never), whether it covers GPUs
    at all, and which of ``namespaces`` (name: labels) its ``namespaceSelector`` selects."""
    spec = obj.get("spec") or {}
    pre = spec.get("preemption") or {}
    borrow = pre.get("borrowWithinCohort") or {}
    threshold = borrow.get("maxPriorityThreshold")
    fungibility = spec.get("flavorFungibility") or {}
    return QuotaInfo(
        project=str((obj.get("metadata") or {}).get("name", "")),
        source="kueue",
        cohort=str(spec.get("cohortName") or spec.get("cohort") or ""),
        reclaim_within_cohort=str(pre.get("reclaimWithinCohort") or ""),
        within_cluster_queue=str(pre.get("withinClusterQueue") or ""),
        borrow_within_cohort=str(borrow.get("policy") or ""),
        borrow_max_priority=int(threshold) if isinstance(threshold, int | float) else None,
        gpu_covered=_covers_gpu(spec),
        when_can_borrow=str(fungibility.get("whenCanBorrow") or ""),
        when_can_preempt=str(fungibility.get("whenCanPreempt") or ""),
        **_namespace_fields(spec, namespaces),
        **_quotas(spec),
    )


def quota_from_localqueue(obj: Mapping[str, Any]) -> QuotaInfo:
    """A Kueue LocalQueue: no quota of its own, the name a pod's
    ``kueue.x-k8s.io/queue-name`` gives in its namespace, and the ClusterQueue it feeds."""
    meta = obj.get("metadata") or {}
    return QuotaInfo(
        project=str(meta.get("name", "")),
        guaranteed_gpus=0.0,
        source="kueue-localqueue",
        namespace=str(meta.get("namespace") or ""),
        cluster_queue=str((obj.get("spec") or {}).get("clusterQueue") or ""),
    )


def quota_from_cohort(obj: Mapping[str, Any]) -> QuotaInfo:
    """A Kueue Cohort object: its own quota (shared by its subtree), its parent
    (``spec.parent`` in v1beta1, ``spec.parentName`` in v1beta2) and the limits towards it."""
    spec = obj.get("spec") or {}
    return QuotaInfo(
        project=str((obj.get("metadata") or {}).get("name", "")),
        source="kueue-cohort",
        cohort=str(spec.get("parentName") or spec.get("parent") or ""),
        **_quotas(spec),
    )


def quota_from_resourceflavor(obj: Mapping[str, Any]) -> QuotaInfo:
    """A Kueue ResourceFlavor: the node labels and taints that tell which nodes are of it
    (Kueue's flavor assigner matches a workload's node selector and tolerations against
    them; gpuscope also tells a running pod's flavor by its node's labels). No quota."""
    spec = obj.get("spec") or {}
    taints = tuple(
        taint_text(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("nodeTaints") or ()
        if t.get("effect") in HARD_EFFECTS
    )
    tolerations = tuple(t for t in map(toleration, spec.get("tolerations") or ()) if t)
    return QuotaInfo(
        project=str((obj.get("metadata") or {}).get("name", "")),
        guaranteed_gpus=0.0,
        source="kueue-flavor",
        node_labels=tuple(sorted(f"{k}={v}" for k, v in (spec.get("nodeLabels") or {}).items())),
        node_taints=taints,
        tolerations=tolerations,
    )


def quota_from_kai_queue(obj: Mapping[str, Any]) -> QuotaInfo:
    """A KAI Scheduler Queue: ``spec.resources.gpu`` quota, overQuotaWeight and limit
    (negative values mean "not set" there) and ``spec.parentQueue``."""
    spec = obj.get("spec") or {}
    gpu = (spec.get("resources") or {}).get("gpu") or {}

    def nonneg(key: str) -> float | None:
        value = _opt_num(gpu.get(key))
        return None if value is None or value < 0 else value

    return QuotaInfo(
        project=str((obj.get("metadata") or {}).get("name", "")),
        guaranteed_gpus=nonneg("quota") or 0.0,
        over_quota_weight=nonneg("overQuotaWeight"),
        limit=nonneg("limit"),
        source="kai",
        cohort=str(spec.get("parentQueue") or ""),
        created=parse_time((obj.get("metadata") or {}).get("creationTimestamp")),
    )


def quota_from_resourcequota(obj: Mapping[str, Any]) -> QuotaInfo | None:
    """A ResourceQuota with ``requests.nvidia.com/gpu``: a hard cap on the namespace,
    which is its project's guarantee and limit alike; None for quotas without GPUs."""
    hard = (obj.get("spec") or {}).get("hard") or {}
    value = hard.get(f"requests.{names.GPU_RESOURCE}")
    if value is None:
        return None
    namespace = str((obj.get("metadata") or {}).get("namespace", ""))
    gpus = parse_quantity(value)
    return QuotaInfo(namespace, gpus, 0.0, None, gpus, "resourcequota", namespace)


def quotas_from_objects(objects: ObjectSet) -> list[QuotaInfo]:
    """Every queue and quota object of an ``--objects`` set, as the inventory records them."""
    quotas: list[QuotaInfo] = []
    quotas += [q for q in map(quota_from_resourcequota, objects.of("ResourceQuota")) if q]
    # a Namespace object's labels where the files hold one; any other namespace they name
    # has the one label the API server gives every namespace (its name)
    named = {
        str((o.get("metadata") or {}).get("namespace") or "")
        for kind in objects.kinds()
        for o in objects.of(kind)
    }
    labels = namespace_labels(objects.of("Namespace", group=""), named)
    quotas += [
        quota_from_clusterqueue(o, labels) for o in objects.of("ClusterQueue", group=KUEUE_GROUP)
    ]
    quotas += map(quota_from_localqueue, objects.of("LocalQueue", group=KUEUE_GROUP))
    quotas += map(quota_from_cohort, objects.of("Cohort", group=KUEUE_GROUP))
    quotas += map(quota_from_resourceflavor, objects.of("ResourceFlavor", group=KUEUE_GROUP))
    quotas += map(quota_from_kai_queue, objects.of("Queue", group=KAI_GROUP))
    return sorted(quotas, key=lambda q: (q.source, q.namespace, q.project))


def by_source(quotas: Iterable[QuotaInfo], *sources: str) -> list[QuotaInfo]:
    return [q for q in quotas if q.source in sources]

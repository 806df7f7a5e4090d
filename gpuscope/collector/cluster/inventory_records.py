"""What the collector knows of the cluster's inventory: nodes, pods, quotas.

Frozen records, and the pure functions that build them from Kubernetes objects as the API
server or ``kubectl get -o json`` gives them (:mod:`gpuscope.collector.cluster.inventory` re-exports
them; ``--nodes FILE --pods FILE`` reads files with them). Pods are classified with
:mod:`gpuscope.core.workload`, so the collector and the agent always agree on what a pod is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuscope.collector.cluster.node_selection import node_selector_terms
from gpuscope.collector.cluster.scheduling_rules import (
    HARD_EFFECTS,
    gpu_spec,
    taint_text,
    toleration,
)
from gpuscope.core import kube_names as names
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.records import WorkloadKind
from gpuscope.core.workload import PodFacts, classify

#: Pool of nodes that carry no pool label (the fragmentation analysis and the node gauges
#: both use it, so a dashboard's pool filter sees the same pools in each).
DEFAULT_POOL = "default"
#: Labels that may name a node's rack, in the order they are consulted.
RACK_LABELS = (names.RACK_LABEL, "topology.kubernetes.io/rack", "rack")
FRACTION_ANNOTATIONS = (names.FRACTION_ANNOTATION, "runai/gpu-fraction")
FRACTION_DEVICES_ANNOTATION = "gpu-fraction-num-devices"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    #: ``nvidia.com/gpu.product`` as GPU feature discovery labels it, "" when unknown.
    gpu_model: str = ""
    #: Allocatable whole GPUs (``nvidia.com/gpu``, plus the node's DRA GPUs where
    #: :mod:`gpuscope.collector.cluster.dra_apply` folded them in).
    allocatable_gpus: int = 0
    #: Allocatable MIG instances by profile (``nvidia.com/mig-3g.40gb`` -> ``"3g.40gb"``).
    mig: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    pool: str = ""
    rack: str = ""
    #: InfiniBand HCA by rail (``gpuscope.io/ib-rail-<rail>`` labels), e.g. ``{"0": "mlx5_0"}``.
    ib_rails: Mapping[str, str] = field(default_factory=dict)
    #: Allocatable CPU in millicores.
    cpu_milli: int = 0
    #: Memory of one GPU in MiB (``nvidia.com/gpu.memory``), for ``gpu-memory`` requests.
    gpu_memory_mib: int | None = None
    #: Time-slicing replicas per GPU (``nvidia.com/gpu.replicas``).
    gpu_replicas: int | None = None
    #: Allocatable time-sliced GPU replicas (``nvidia.com/gpu.shared``).
    shared_gpus: int = 0
    ready: bool = True
    #: Cordoned (``spec.unschedulable``).
    unschedulable: bool = False
    #: Allocatable memory in MiB (``status.allocatable.memory``); 0 when not reported.
    memory_mib: int = 0
    #: Allocatable ephemeral storage in MiB; 0 when not reported (then not counted).
    ephemeral_mib: int = 0
    #: Taints that keep pods off (effects ``NoSchedule`` and ``NoExecute``), each as
    #: ``key=value:effect`` (``key:effect`` without a value). ``PreferNoSchedule`` is only a
    #: preference and is left out.
    taints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    #: ``spec.nodeName``; None while the pod is not scheduled.
    node: str | None
    phase: str
    #: ``status.startTime`` (unix seconds), else the creation time; None if neither.
    start_time: float | None
    owner_kind: str = ""
    owner_name: str = ""
    priority: int | None = None
    #: Whole GPUs requested (``nvidia.com/gpu``, plus whole devices of its DRA claims).
    gpu_request: int = 0
    #: Share of one GPU per device for fractional pods (``gpu-fraction``, ``gpu-memory``
    #: against the node's GPU memory, or ``nvidia.com/gpu.shared`` against the node's
    #: time-slicing replicas); None for pods that do not share GPUs.
    gpu_fraction: float | None = None
    #: Devices a fractional pod spreads over (KAI ``gpu-fraction-num-devices``).
    fraction_devices: int = 1
    #: MIG instances requested by profile.
    mig: Mapping[str, int] = field(default_factory=dict)
    kind: WorkloadKind = WorkloadKind.UNKNOWN
    project: str = ""
    preemptible: bool = False
    protected: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: Why a pending pod waits (``Unschedulable``), "" otherwise.
    pending_reason: str = ""
    #: CPU requested in millicores, as the scheduler counts it (containers' sum or the
    #: largest init container, plus the pod overhead).
    cpu_milli: int = 0
    #: Memory requested in MiB, counted the same way.
    memory_mib: int = 0
    #: Ephemeral storage requested in MiB, counted the same way.
    ephemeral_mib: int = 0
    #: Tolerations of hard taints, each as ``key|operator|value|effect`` (empty parts where
    #: the toleration leaves them out); the defaults every pod gets for ``not-ready`` and
    #: ``unreachable`` are left out (such nodes are not placeable anyway).
    tolerations: tuple[str, ...] = ()
    #: GPU models the pod may run on, as its ``nodeSelector`` or required node affinity on
    #: ``nvidia.com/gpu.product`` lists them (``A|B``, as written); "" for any.
    gpu_spec: str = ""
    #: Deleted and going (``metadata.deletionTimestamp`` set): never an action's target.
    terminating: bool = False
    #: The ``Ready`` condition is ``True`` (what the Eviction API and the disruption
    #: controller call healthy); records stored without it read as ready.
    ready: bool = True
    #: Hard node constraints on labels (``nodeSelector``, required node affinity), as
    #: :func:`gpuscope.collector.cluster.node_selection.node_selector_terms` encodes them.
    node_selector_terms: tuple[str, ...] = ()
    #: Whether the scheduler may preempt lower-priority pods for it: ``spec.preemptionPolicy``
    #: (copied from its PriorityClass at admission) is not ``Never``.
    preempts: bool = True
    #: ``metadata.creationTimestamp`` (unix seconds); None if not given. Kueue orders and
    #: compares workloads by when they were created (its queue-order timestamp), not by
    #: when they started.
    created: float | None = None

    @property
    def gpus(self) -> float:
        """GPU-equivalents the pod holds or asks for (MIG instances not counted)."""
        return self.gpu_request + (self.gpu_fraction or 0.0) * self.fraction_devices


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    project: str
    #: Deserved GPUs (Kueue ``nominalQuota``, KAI ``quota``, ResourceQuota hard).
    guaranteed_gpus: float
    #: How many GPUs over the guarantee it may borrow; None for no limit.
    borrowing_limit: float | None = None
    #: Share of unused GPUs it gets over its quota (KAI ``overQuotaWeight``, Kueue
    #: ``fairSharing.weight``); None when not set.
    over_quota_weight: float | None = None
    #: The most GPUs it may use at all; None for no limit.
    limit: float | None = None
    #: ``kueue`` (a ClusterQueue), ``kueue-localqueue``, ``kueue-cohort``,
    #: ``kueue-flavor`` (a ResourceFlavor), ``kai``, ``resourcequota`` or ``config``.
    source: str = ""
    #: The namespace of a ResourceQuota or a LocalQueue, "" for cluster-scoped queues.
    namespace: str = ""
    #: The queue model's fields (gpuscope/collector/cluster/queue_records.py reads them from the
    #: objects; docs/analytics.md, "Queues"): the Kueue cohort of a ClusterQueue, the parent
    #: of a Kueue Cohort or a KAI Queue; "" for none.
    cohort: str = ""
    #: A LocalQueue's ``spec.clusterQueue``.
    cluster_queue: str = ""
    #: How much of its nominal quota it lends to its cohort; None for all of it.
    lending_limit: float | None = None
    #: ``spec.preemption`` of a ClusterQueue, "" where not set (Kueue's default: Never).
    reclaim_within_cohort: str = ""
    within_cluster_queue: str = ""
    borrow_within_cohort: str = ""
    #: ``borrowWithinCohort.maxPriorityThreshold``; None for no threshold.
    borrow_max_priority: int | None = None
    #: The ResourceFlavors its GPU quota is spread over (their quotas are added up).
    flavors: tuple[str, ...] = ()
    #: False for a ClusterQueue whose ``resourceGroups`` do not cover ``nvidia.com/gpu``:
    #: Kueue never admits a GPU job to it, not even by borrowing.
    gpu_covered: bool = True
    #: The namespaces a ClusterQueue's ``namespaceSelector`` selected when recorded (Kueue
    #: refuses a workload from any other as inadmissible); None: every namespace (``{}``,
    #: or a record from before the selector was read).
    selected_namespaces: tuple[str, ...] | None = None
    #: The ``namespaceSelector`` as compact JSON ("null": unset, which selects none).
    namespace_selector: str = ""
    #: ``metadata.creationTimestamp`` of a KAI Queue (unix seconds): KAI's last
    #: tie-break when it hands out what is left of the fair shares.
    created: float | None = None
    #: Per GPU flavor, in the resource group's order (the order Kueue's flavor assigner
    #: tries them): ``(flavor, nominalQuota, borrowingLimit, lendingLimit)``, limits None
    #: where unset; empty in records from before flavors were kept apart.
    flavor_quotas: tuple[tuple[str, float, float | None, float | None], ...] = ()
    #: A ClusterQueue's ``flavorFungibility`` ("" where unset: Kueue's defaults, ``Borrow``
    #: and ``TryNextFlavor``).
    when_can_borrow: str = ""
    when_can_preempt: str = ""
    #: A Kueue ResourceFlavor (``source`` ``kueue-flavor``): its ``nodeLabels`` as
    #: ``key=value``, its ``nodeTaints`` as ``key=value:effect`` and its ``tolerations``
    #: as ``key|operator|value|effect``.
    node_labels: tuple[str, ...] = ()
    node_taints: tuple[str, ...] = ()
    tolerations: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class InventorySnapshot:
    nodes: tuple[NodeInfo, ...] = ()
    pods: tuple[PodInfo, ...] = ()
    quotas: tuple[QuotaInfo, ...] = ()
    namespaces: tuple[str, ...] = ()
    #: Unix time of the last successful sync; None before the first.
    synced_at: float | None = None
    #: Last seen resourceVersion per watched resource (``nodes``, ``pods``).
    resource_versions: Mapping[str, str] = field(default_factory=dict)
    #: PodDisruptionBudgets (gpuscope/collector/cluster/pdb_records.py ``Budget``); None when they
    #: could not be read.
    pdbs: tuple[Any, ...] | None = None


# -- pure parsing -------------------------------------------------------------------------
_SUFFIX = {
    **{s: 1024.0**i for i, s in enumerate(("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{s: 1000.0**i for i, s in enumerate(("", "k", "M", "G", "T", "P", "E"))},
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity (``8``, ``1500m``, ``2Ti``, ``1e3``) as a number; 0 if malformed."""
    if isinstance(value, int | float):
        return float(value)
    found = _QUANTITY.match(str(value).strip())
    if found is None or found.group(2) not in _SUFFIX:
        return 0.0
    try:
        return float(found.group(1)) * _SUFFIX[found.group(2)]
    except ValueError:
        return 0.0


def _num(value: Any) -> float:
    return parse_quantity(value)


def _opt_num(value: Any) -> float | None:
    return None if value is None or str(value).strip() == "" else _num(value)


def _opt_int(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() else None


def parse_time(value: str | None) -> float | None:
    """RFC 3339 (``2024-05-01T12:00:00Z``) to unix seconds."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        return None


def _mig(resources: Mapping[str, Any]) -> dict[str, int]:
    prefix = names.MIG_RESOURCE_PREFIX
    return {k[len(prefix) :]: int(_num(v)) for k, v in resources.items() if k.startswith(prefix)}


def node_from_json(obj: Mapping[str, Any]) -> NodeInfo:
    """A Node object as a record."""
    meta, status = obj.get("metadata", {}), obj.get("status", {})
    labels: dict[str, str] = dict(meta.get("labels") or {})
    alloc: Mapping[str, Any] = status.get("allocatable") or status.get("capacity") or {}
    prefix = names.IB_RAIL_LABEL_PREFIX
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return NodeInfo(
        name=meta.get("name", ""),
        gpu_model=labels.get(names.GPU_PRODUCT_LABEL, ""),
        allocatable_gpus=int(_num(alloc.get(names.GPU_RESOURCE, 0))),
        mig=_mig(alloc),
        labels=labels,
        pool=labels.get(names.POOL_LABEL, ""),
        rack=next((labels[k] for k in RACK_LABELS if labels.get(k)), ""),
        ib_rails={k[len(prefix) :]: v for k, v in labels.items() if k.startswith(prefix)},
        cpu_milli=round(_num(alloc.get("cpu", 0)) * 1000),
        gpu_memory_mib=_opt_int(labels.get(names.GPU_MEMORY_LABEL)),
        gpu_replicas=_opt_int(labels.get(names.GPU_REPLICAS_LABEL)),
        shared_gpus=int(_num(alloc.get(names.SHARED_GPU_RESOURCE, 0))),
        ready=ready or not status.get("conditions"),
        unschedulable=bool(obj.get("spec", {}).get("unschedulable", False)),
        memory_mib=_mib(alloc.get("memory", 0)),
        ephemeral_mib=_mib(alloc.get("ephemeral-storage", 0)),
        taints=tuple(
            sorted(
                taint_text(t.get("key", ""), t.get("value", ""), t.get("effect", ""))
                for t in (obj.get("spec") or {}).get("taints") or ()
                if t.get("effect") in HARD_EFFECTS
            )
        ),
    )


def _mib(value: Any) -> int:
    """Allocatable bytes in whole MiB, rounded down: a node never offers more than it has."""
    return math.floor(_num(value) / 2**20)


def _mib_request(value: float) -> int:
    """Requested bytes in whole MiB, rounded up: a pod 88 kB over what a node has never
    "fits" (with allocatable rounded down, a fit in MiB is a fit in bytes)."""
    return math.ceil(value / 2**20 - 1e-9)


def _requests(spec: Mapping[str, Any]) -> dict[str, float]:
    """Effective requests of a pod: the containers' sum, or the largest init container's if
    that is more, plus the pod overhead (as the scheduler counts them)."""

    def of(container: Mapping[str, Any]) -> dict[str, float]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: _num(v) for k, v in merged.items()}

    total: dict[str, float] = {}
    for c in spec.get("containers") or ():
        for k, v in of(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or ():
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0.0), v)
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0.0) + _num(v)
    return total


def _fraction(
    annotations: Mapping[str, str], requests: Mapping[str, float], node: NodeInfo | None
) -> float | None:
    for key in FRACTION_ANNOTATIONS:
        if key in annotations:
            value = _opt_num(annotations[key])
            return None if value is None else min(1.0, value)
    memory = _opt_num(annotations.get(names.GPU_MEMORY_ANNOTATION))
    if memory is not None and node is not None and node.gpu_memory_mib:
        return min(1.0, memory / node.gpu_memory_mib)
    shared = requests.get(names.SHARED_GPU_RESOURCE, 0.0)
    if shared:
        replicas = node.gpu_replicas if node is not None else None
        return shared / replicas if replicas else shared
    return None


def pod_from_json(
    obj: Mapping[str, Any],
    *,
    node: NodeInfo | None = None,
    settings: WorkloadSettings | None = None,
) -> PodInfo:
    """A Pod object as a record; ``node`` (the pod's node) resolves ``gpu-memory`` and
    time-sliced requests into a fraction of a GPU."""
    settings = settings or WorkloadSettings()
    meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status", {})
    labels: dict[str, str] = dict(meta.get("labels") or {})
    annotations: dict[str, str] = dict(meta.get("annotations") or {})
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    priority = spec.get("priority")
    namespace = meta.get("namespace", "default")
    facts = PodFacts(namespace, labels, annotations, owner.get("kind", ""), priority)
    cls = classify(
        facts,
        rules=settings.rules,
        preemptible_priority_below=settings.preemptible_priority_below,
        protected_namespaces=settings.protected_namespaces,
    )
    requests = _requests(spec)
    pending = next(
        (
            c.get("reason", "")
            for c in status.get("conditions") or ()
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ),
        "",
    )
    return PodInfo(
        namespace=namespace,
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        node=spec.get("nodeName") or None,
        phase=status.get("phase", "Unknown"),
        start_time=parse_time(status.get("startTime") or meta.get("creationTimestamp")),
        owner_kind=owner.get("kind", ""),
        owner_name=owner.get("name", ""),
        priority=priority,
        gpu_request=int(requests.get(names.GPU_RESOURCE, 0)),
        gpu_fraction=_fraction(annotations, requests, node),
        fraction_devices=_opt_int(annotations.get(FRACTION_DEVICES_ANNOTATION)) or 1,
        mig=_mig(requests),
        kind=cls.kind,
        project=cls.project,
        preemptible=cls.preemptible,
        protected=cls.protected,
        labels=labels,
        annotations=annotations,
        pending_reason=pending,
        cpu_milli=round(requests.get("cpu", 0.0) * 1000),
        memory_mib=_mib_request(requests.get("memory", 0.0)),
        ephemeral_mib=_mib_request(requests.get("ephemeral-storage", 0.0)),
        tolerations=tuple(
            sorted({t for t in map(toleration, spec.get("tolerations") or ()) if t is not None})
        ),
        gpu_spec=gpu_spec(spec),
        terminating=bool(meta.get("deletionTimestamp")),
        ready=any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        ),
        node_selector_terms=node_selector_terms(spec),
        preempts=spec.get("preemptionPolicy") != "Never",
        created=parse_time(meta.get("creationTimestamp")),
    )

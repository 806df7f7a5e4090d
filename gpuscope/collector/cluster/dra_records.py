"""Dynamic Resource Allocation (DRA, ``resource.k8s.io/v1``) objects as frozen records.

Kubernetes 1.34 hands out GPUs through DRA as well as through device plugins: a driver
(NVIDIA's is ``gpu.nvidia.com``) publishes each GPU or MIG placement as a *device* in a
ResourceSlice; a pod asks through ResourceClaims (its own, generated from a
ResourceClaimTemplate, or a standalone one it names) and the scheduler writes what it
allocated into each claim's ``status.allocation.devices.results[]``. This module reads those
objects, as the API server or ``kubectl get -o json`` gives them, into records;
:mod:`gpuscope.collector.cluster.dra_apply` folds them into the node and pod records every placement
question already reads.

What a consumer must honour (the ResourceSlice type's own rules): a pool (driver + pool name)
may span several slices; only slices of the pool's highest ``generation`` count, and only
once all ``resourceSliceCount`` of them are seen (an incomplete pool is being rewritten by
its driver and is left out until it is whole). Pure: no I/O.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuscope.collector.cluster.inventory_records import parse_quantity

log = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
VERSION = "v1"
#: The kinds gpuscope reads, by plural (as the API serves them).
KINDS = {
    "resourceslices": "ResourceSlice",
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
    "deviceclasses": "DeviceClass",
}
#: NVIDIA's DRA driver, whose attributes (``type``, ``uuid``...) gpuscope understands.
NVIDIA_DRIVER = "gpu.nvidia.com"

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One device of a complete pool at its newest generation."""

    driver: str
    pool: str
    name: str
    #: The node that offers it (``spec.nodeName``, or the device's own with per-device
    #: node selection); "" for devices not local to one node (not counted on any node).
    node: str
    #: Attribute values by name, the driver's domain prefix dropped (``type``, ``uuid``...).
    attributes: Mapping[str, str | int | bool] = field(default_factory=dict)
    #: Capacity values by name (``memory`` in bytes, ``shares``...).
    capacity: Mapping[str, float] = field(default_factory=dict)
    #: ``allowMultipleAllocations``: shared by several claims, each consuming capacity.
    shared: bool = False
    #: Counters it consumes while allocated: ``((counter set, counter), amount)``.
    consumes: tuple[tuple[tuple[str, str], float], ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)

    @property
    def type(self) -> str:
        """``gpu``, ``mig`` (NVIDIA's driver), else the ``type`` attribute or ""."""
        return str(self.attributes.get("type", ""))

    @property
    def is_gpu(self) -> bool:
        return self.type == "gpu"

    @property
    def is_mig(self) -> bool:
        return self.type == "mig"

    @property
    def uuid(self) -> str:
        return str(self.attributes.get("uuid", ""))

    @property
    def parent_uuid(self) -> str:
        return str(self.attributes.get("parentUUID", ""))

    @property
    def profile(self) -> str:
        return str(self.attributes.get("profile", ""))

    @property
    def product(self) -> str:
        return str(self.attributes.get("productName", ""))


@dataclass(frozen=True, slots=True)
class CounterSet:
    """A pool's shared counters (``spec.sharedCounters``): what partitionable devices
    (the driver's dynamic MIG) draw from; a device is free only while its counters are."""

    driver: str
    pool: str
    node: str
    name: str
    counters: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One ``spec.devices.requests[]`` entry (its ``exactly`` form)."""

    name: str
    device_class: str
    #: ``ExactCount`` (default) or ``All``.
    mode: str = "ExactCount"
    count: int = 1
    #: CEL expressions of the request's selectors.
    selectors: tuple[str, ...] = ()
    #: ``capacity.requests`` (``memory`` in bytes, ``shares``...).
    capacity: Mapping[str, float] = field(default_factory=dict)
    #: ``firstAvailable`` was used: the first subrequest is taken as the request.
    first_available: bool = False


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One ``status.allocation.devices.results[]`` entry."""

    request: str
    driver: str
    pool: str
    device: str
    share_id: str = ""
    consumed: Mapping[str, float] = field(default_factory=dict)
    admin: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class DraClaim:
    namespace: str
    name: str
    uid: str = ""
    requests: tuple[DeviceRequest, ...] = ()
    allocated: tuple[AllocatedDevice, ...] = ()
    #: UIDs of the pods in ``status.reservedFor``.
    reserved_for: tuple[str, ...] = ()
    #: UID of the pod that owns it (a claim generated from a template dies with its pod).
    owner_pod_uid: str = ""
    #: Made by the scheduler for DRA-backed extended resources (``nvidia.com/gpu`` served
    #: by DRA): the pod's container request already counts these devices.
    extended: bool = False


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    name: str
    selectors: tuple[str, ...] = ()
    #: ``spec.extendedResourceName`` (e.g. ``nvidia.com/gpu``), "" when not set.
    extended_resource: str = ""


@dataclass(frozen=True, slots=True)
class DraObjects:
    """Everything DRA of one cluster, read (pure) from its objects."""

    devices: tuple[DraDevice, ...] = ()
    counter_sets: tuple[CounterSet, ...] = ()
    claims: tuple[DraClaim, ...] = ()
    #: Template requests by (namespace, name).
    templates: Mapping[tuple[str, str], tuple[DeviceRequest, ...]] = field(default_factory=dict)
    classes: Mapping[str, DeviceClassInfo] = field(default_factory=dict)
    #: Pools left out, each with why (incomplete, not node-local...), for one log line.
    skipped_pools: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.devices or self.claims or self.templates)


# -- parsing --------------------------------------------------------------------------------
def _attr_value(value: Obj) -> str | int | bool | None:
    for key in ("string", "version", "int", "bool"):
        if key in value:
            raw = value[key]
            return raw if isinstance(raw, int | bool) else str(raw)
    return None


def _short(name: str) -> str:
    """``gpu.nvidia.com/uuid`` -> ``uuid``: names without a domain are the driver's own."""
    return name.rsplit("/", 1)[-1]


def _quantities(values: Obj | None, *, nested: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in (values or {}).items():
        raw = value.get("value") if nested and isinstance(value, Mapping) else value
        out[_short(str(name))] = parse_quantity(raw)
    return out


def _device(driver: str, pool: str, node: str, obj: Obj) -> DraDevice:
    attributes: dict[str, str | int | bool] = {}
    for name, value in (obj.get("attributes") or {}).items():
        parsed = _attr_value(value) if isinstance(value, Mapping) else None
        if parsed is not None:
            attributes[_short(str(name))] = parsed
    consumes = []
    for entry in obj.get("consumesCounters") or ():
        counter_set = str(entry.get("counterSet", ""))
        for counter, amount in _quantities(entry.get("counters"), nested=True).items():
            consumes.append(((counter_set, counter), amount))
    return DraDevice(
        driver=driver,
        pool=pool,
        name=str(obj.get("name", "")),
        node=str(obj.get("nodeName") or node),
        attributes=attributes,
        capacity=_quantities(obj.get("capacity"), nested=True),
        shared=bool(obj.get("allowMultipleAllocations")),
        consumes=tuple(sorted(consumes)),
    )


def devices_from_slices(
    slices: Iterable[Obj],
) -> tuple[list[DraDevice], list[CounterSet], list[str]]:
    """The devices and counter sets of every complete pool at its highest generation, and
    the pools left out (with why)."""
    pools: dict[tuple[str, str], list[Obj]] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        pools.setdefault((str(spec.get("driver", "")), str(pool.get("name", ""))), []).append(obj)
    devices: list[DraDevice] = []
    counter_sets: list[CounterSet] = []
    skipped: list[str] = []
    for (driver, pool_name), members in sorted(pools.items()):

        def generation(o: Obj) -> int:
            return int(((o.get("spec") or {}).get("pool") or {}).get("generation") or 0)

        newest = max(generation(o) for o in members)
        current = [o for o in members if generation(o) == newest]
        wanted = max(
            int(((o.get("spec") or {}).get("pool") or {}).get("resourceSliceCount") or 1)
            for o in current
        )
        if len(current) < wanted:
            skipped.append(
                f"{driver}/{pool_name}: {len(current)} of {wanted} slices at generation "
                f"{newest} (incomplete)"
            )
            continue
        for obj in current:
            spec = obj.get("spec") or {}
            node = str(spec.get("nodeName") or "")
            for entry in spec.get("sharedCounters") or ():
                counter_sets.append(
                    CounterSet(
                        driver,
                        pool_name,
                        node,
                        str(entry.get("name", "")),
                        _quantities(entry.get("counters"), nested=True),
                    )
                )
            for dev in spec.get("devices") or ():
                devices.append(_device(driver, pool_name, node, dev))
    return devices, counter_sets, skipped


def _selectors(entries: Iterable[Obj] | None) -> tuple[str, ...]:
    return tuple(
        str((s.get("cel") or {}).get("expression", ""))
        for s in entries or ()
        if (s.get("cel") or {}).get("expression")
    )


def _request(obj: Obj) -> DeviceRequest:
    exact = obj.get("exactly")
    first = False
    if not exact and obj.get("firstAvailable"):
        exact, first = obj["firstAvailable"][0], True
    exact = exact or {}
    return DeviceRequest(
        name=str(obj.get("name", "")),
        device_class=str(exact.get("deviceClassName", "")),
        mode=str(exact.get("allocationMode") or "ExactCount"),
        count=int(exact.get("count") or 1),
        selectors=_selectors(exact.get("selectors")),
        capacity=_quantities((exact.get("capacity") or {}).get("requests"), nested=False),
        first_available=first,
    )


def requests_of(claim_spec: Obj | None) -> tuple[DeviceRequest, ...]:
    """The device requests of a ResourceClaimSpec."""
    devices = (claim_spec or {}).get("devices") or {}
    return tuple(_request(r) for r in devices.get("requests") or ())


#: The annotation the scheduler puts on the claim it makes for DRA-backed extended resources.
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def claim_from_json(obj: Obj) -> DraClaim:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    allocation = ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()
    owner = next(
        (
            str(o.get("uid", ""))
            for o in meta.get("ownerReferences") or ()
            if o.get("kind") == "Pod" and o.get("controller", True)
        ),
        "",
    )
    return DraClaim(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        requests=requests_of(obj.get("spec")),
        allocated=tuple(
            AllocatedDevice(
                request=str(r.get("request", "")),
                driver=str(r.get("driver", "")),
                pool=str(r.get("pool", "")),
                device=str(r.get("device", "")),
                share_id=str(r.get("shareID") or ""),
                consumed=_quantities(r.get("consumedCapacity"), nested=False),
                admin=bool(r.get("adminAccess")),
            )
            for r in allocation
        ),
        reserved_for=tuple(
            str(r.get("uid", ""))
            for r in status.get("reservedFor") or ()
            if r.get("resource") == "pods"
        ),
        owner_pod_uid=owner,
        extended=(meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true",
    )


def class_from_json(obj: Obj) -> DeviceClassInfo:
    spec = obj.get("spec") or {}
    return DeviceClassInfo(
        name=str((obj.get("metadata") or {}).get("name", "")),
        selectors=_selectors(spec.get("selectors")),
        extended_resource=str(spec.get("extendedResourceName") or ""),
    )


def dra_objects(
    slices: Iterable[Obj] = (),
    claims: Iterable[Obj] = (),
    templates: Iterable[Obj] = (),
    classes: Iterable[Obj] = (),
) -> DraObjects:
    """The records of one cluster's DRA objects (each iterable: one kind's items)."""
    devices, counter_sets, skipped = devices_from_slices(slices)
    template_requests = {}
    for obj in templates:
        meta = obj.get("metadata") or {}
        spec = (obj.get("spec") or {}).get("spec")
        key = (str(meta.get("namespace", "default")), str(meta.get("name", "")))
        template_requests[key] = requests_of(spec)
    infos = [class_from_json(o) for o in classes]
    return DraObjects(
        devices=tuple(devices),
        counter_sets=tuple(counter_sets),
        claims=tuple(claim_from_json(o) for o in claims),
        templates=template_requests,
        classes={c.name: c for c in infos},
        skipped_pools=tuple(skipped),
    )


def dra_from_object_set(objects: Any) -> DraObjects:
    """The DRA records of an ``--objects`` :class:`~gpuscope.core.kube_objects.ObjectSet`
    (only ``resource.k8s.io/v1`` objects; other versions are named in one log line)."""
    by_kind: dict[str, list[Obj]] = {}
    other: set[str] = set()
    for kind in KINDS.values():
        for obj in objects.of(kind, group=GROUP):
            version = str(obj.get("apiVersion", "")).rsplit("/", 1)[-1]
            if version == VERSION:
                by_kind.setdefault(kind, []).append(obj)
            else:
                other.add(f"{kind} {obj.get('apiVersion')}")
    if other:
        log.warning(
            "DRA objects not of %s/%s left out: %s", GROUP, VERSION, ", ".join(sorted(other))
        )
    return dra_objects(
        by_kind.get("ResourceSlice", ()),
        by_kind.get("ResourceClaim", ()),
        by_kind.get("ResourceClaimTemplate", ()),
        by_kind.get("DeviceClass", ()),
    )


_NUMBERED = re.compile(r"(\d+)")


def device_order(device: DraDevice) -> tuple[Any, ...]:
    """Devices in the order their names number them (``gpu-2`` before ``gpu-10``)."""
    parts = tuple(
        (0, int(p), "") if p.isdigit() else (1, 0, p) for p in _NUMBERED.split(device.name) if p
    )
    return (device.node, device.driver, device.pool, parts)

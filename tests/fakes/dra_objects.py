"""DRA objects (``resource.k8s.io/v1``) and pods that use them, shaped as the API server
serves them, for tests and the fake API server.

Written from kubernetes/api ``resource/v1/types.go`` and ``core/v1/types.go`` (field names
and nesting; tests/unit/test_dra_schema.py holds every object built here to a transcription
of those types) and from NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu): its
device attributes (``type`` gpu/mig, ``uuid``, ``productName``, ``parentUUID``,
``profile``), its ``memory`` capacity in bytes, its device names (``gpu-<minor>``,
``gpu-<minor>-mig-<profile>-<profile id>-<placement start>``) and its DeviceClasses
``gpu.nvidia.com`` and ``mig.nvidia.com``. Shares no code with gpuscope.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]
API = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
GIB = 2**30


def _uid(text: str) -> str:
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, text))


def _owner(api: str, kind: str, name: str, uid: str) -> Obj:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True}


def device_class(name: str, kind: str, extended_resource: str | None = None) -> Obj:
    expr = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"
    spec: Obj = {"selectors": [{"cel": {"expression": expr}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": name, "uid": _uid(f"class/{name}")},
        "spec": spec,
    }


def nvidia_classes(extended: bool = False) -> list[Obj]:
    return [
        device_class("gpu.nvidia.com", "gpu", "nvidia.com/gpu" if extended else None),
        device_class("mig.nvidia.com", "mig"),
    ]


def _common_attrs(product: str) -> Obj:
    return {
        "productName": {"string": product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper" if "H100" in product else "Ampere"},
        "cudaComputeCapability": {"version": "9.0.0" if "H100" in product else "8.0.0"},
        "driverVersion": {"version": "560.35.3"},
        "cudaDriverVersion": {"version": "12.6.0"},
    }


def gpu_device(
    minor: int,
    gpu_uuid: str,
    product: str = "NVIDIA H100 80GB HBM3",
    memory_gib: int = 80,
    *,
    shared: bool = False,
    shares: int | None = None,
) -> Obj:
    """A whole GPU as the driver publishes it; ``shared``: consumable capacity (the
    driver's ``--consumable-shares``), with a ``shares`` capacity where given."""
    capacity: Obj = {"memory": {"value": f"{memory_gib}Gi"}}
    dev: Obj = {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid},
            **_common_attrs(product),
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x18 + minor:02x}:00.0"},
        },
        "capacity": capacity,
    }
    if shared:
        dev["allowMultipleAllocations"] = True
        capacity["memory"]["requestPolicy"] = {
            "default": f"{memory_gib}Gi",
            "validRange": {"min": "1Mi", "max": f"{memory_gib}Gi", "step": "1Mi"},
        }
        if shares:
            capacity["shares"] = {
                "value": str(shares),
                "requestPolicy": {
                    "default": "1",
                    "validRange": {"min": "1", "max": str(shares), "step": "1"},
                },
            }
    return dev


def mig_device(
    parent_minor: int,
    parent_uuid: str,
    profile: str,
    profile_id: int,
    start: int,
    mig_uuid: str = "",
    product: str = "NVIDIA A100-SXM4-80GB",
    memory_gib: int = 10,
    counter_set: str | None = None,
    slices: int = 1,
) -> Obj:
    """A MIG device; with ``counter_set``, a partitionable placement that consumes
    ``slices`` memory slices from ``start`` of its GPU's counter set."""
    attrs: Obj = {
        "type": {"string": "mig"},
        "parentUUID": {"string": parent_uuid},
        "profile": {"string": profile},
        **_common_attrs(product),
    }
    if mig_uuid:
        attrs["uuid"] = {"string": mig_uuid}
    dev: Obj = {
        "name": f"gpu-{parent_minor}-mig-{profile.replace('.', '')}-{profile_id}-{start}",
        "attributes": attrs,
        "capacity": {
            "memory": {"value": f"{memory_gib}Gi"},
            "multiprocessors": {"value": "14"},
        },
    }
    if counter_set:
        dev["consumesCounters"] = [
            {
                "counterSet": counter_set,
                "counters": {
                    f"memory-slice-{i}": {"value": "1"} for i in range(start, start + slices)
                },
            }
        ]
    return dev


def counter_set(name: str, slices: int) -> Obj:
    return {"name": name, "counters": {f"memory-slice-{i}": {"value": "1"} for i in range(slices)}}


def resource_slice(
    node: str,
    devices: Sequence[Obj] = (),
    *,
    generation: int = 1,
    count: int = 1,
    index: int = 0,
    pool: str | None = None,
    shared_counters: Sequence[Obj] = (),
) -> Obj:
    pool_name = pool or node
    spec: Obj = {
        "driver": DRIVER,
        "pool": {"name": pool_name, "generation": generation, "resourceSliceCount": count},
        "nodeName": node,
    }
    if devices:
        spec["devices"] = list(devices)
    if shared_counters:
        spec["sharedCounters"] = list(shared_counters)
    name = f"{node}-{DRIVER}-{index}-g{generation}"
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {
            "name": name,
            "uid": _uid(f"slice/{name}"),
            "generateName": f"{node}-{DRIVER}-",
            "ownerReferences": [_owner("v1", "Node", node, _uid(f"node/{node}"))],
        },
        "spec": spec,
    }


def request(
    name: str,
    device_class: str,
    count: int = 1,
    selectors: Sequence[str] = (),
    capacity: Mapping[str, str] | None = None,
    mode: str | None = None,
) -> Obj:
    exactly: Obj = {"deviceClassName": device_class}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if mode:
        exactly["allocationMode"] = mode
    if mode != "All":
        exactly["count"] = count
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    return {"name": name, "exactly": exactly}


def profile_selector(profile: str) -> str:
    return f"device.attributes['{DRIVER}'].profile == '{profile}'"


def template(namespace: str, name: str, requests: Sequence[Obj]) -> Obj:
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "uid": _uid(f"rct/{namespace}/{name}")},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def result(
    request_name: str,
    pool: str,
    device: str,
    *,
    share_id: str | None = None,
    consumed: Mapping[str, str] | None = None,
) -> Obj:
    out: Obj = {"request": request_name, "driver": DRIVER, "pool": pool, "device": device}
    if share_id:
        out["shareID"] = share_id
    if consumed:
        out["consumedCapacity"] = dict(consumed)
    return out


def claim(
    namespace: str,
    name: str,
    requests: Sequence[Obj],
    results: Sequence[Obj] = (),
    *,
    reserved_for: Sequence[tuple[str, str]] = (),
    owner_pod: tuple[str, str] | None = None,
    extended: bool = False,
    node: str | None = None,
    entry: str = "",
) -> Obj:
    """A claim; ``reserved_for`` and ``owner_pod`` are (name, uid) of pods."""
    meta: Obj = {"name": name, "namespace": namespace, "uid": _uid(f"rc/{namespace}/{name}")}
    if owner_pod:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner_pod[0], "uid": owner_pod[1],
             "controller": True, "blockOwnerDeletion": True}
        ]  # fmt: skip
        meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": entry or name}
    if extended:
        meta.setdefault("annotations", {})["resource.kubernetes.io/extended-resource-claim"] = (
            "true"
        )
    status: Obj = {}
    if results:
        allocation: Obj = {"devices": {"results": list(results)}}
        if node:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            }
        status["allocation"] = allocation
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": n, "uid": u} for n, u in reserved_for]
    obj: Obj = {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": list(requests)}},
    }
    if status:
        obj["status"] = status
    return obj


def pod(
    namespace: str,
    name: str,
    *,
    node: str | None,
    claims: Sequence[tuple[str, str | None, str | None]] = (),
    generated: Mapping[str, str] | None = None,
    requests: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    extended_claim: tuple[str, Sequence[Obj]] | None = None,
    uid: str | None = None,
    cpu: str = "1",
    labels: Mapping[str, str] | None = None,
    owner: tuple[str, str] | None = None,
) -> Obj:
    """A pod; ``claims`` are ``(entry name, resourceClaimName, resourceClaimTemplateName)``,
    ``generated`` the claim names made from templates (``status.resourceClaimStatuses``),
    ``extended_claim`` (claim name, request mappings) the DRA-backed extended resource
    claim (``status.extendedResourceClaimStatus``)."""
    res: Obj = {"requests": {"cpu": cpu, "memory": "4Gi", **(requests or {})}}
    gpu_limits = {k: v for k, v in (requests or {}).items() if k.startswith("nvidia.com/")}
    if gpu_limits:
        res["limits"] = gpu_limits
    if claims:
        res["claims"] = [{"name": entry} for entry, _, _ in claims]
    spec: Obj = {
        "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                        "resources": res}],
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
    }  # fmt: skip
    if claims:
        spec["resourceClaims"] = [
            {"name": entry, **({"resourceClaimName": c} if c else {}),
             **({"resourceClaimTemplateName": t} if t else {})}
            for entry, c, t in claims
        ]  # fmt: skip
    status: Obj = {"phase": "Running" if node else "Pending"}
    if node:
        spec["nodeName"] = node
        status["startTime"] = "2026-11-23T08:00:00Z"
    else:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
    if generated:
        status["resourceClaimStatuses"] = [
            {"name": entry, "resourceClaimName": claim_name}
            for entry, claim_name in generated.items()
        ]
    if extended_claim:
        status["extendedResourceClaimStatus"] = {
            "requestMappings": list(extended_claim[1]),
            "resourceClaimName": extended_claim[0],
        }
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "uid": uid or _uid(f"pod/{namespace}/{name}"),
        "creationTimestamp": "2026-11-23T08:00:00Z",
        "labels": dict(labels or {}),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": owner[0], "name": owner[1],
             "uid": _uid(f"owner/{namespace}/{owner[1]}"), "controller": True}
        ]  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def node(
    name: str,
    *,
    gpus: int = 0,
    mig: Mapping[str, int] | None = None,
    product: str | None = None,
    cpu: str = "64",
    labels: Mapping[str, str] | None = None,
) -> Obj:
    """A node; ``gpus``/``mig`` are device-plugin allocatable (0/None on a DRA-only node)."""
    alloc: Obj = {"cpu": cpu, "memory": "512Gi", "ephemeral-storage": "1Ti", "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    for profile, count in (mig or {}).items():
        alloc[f"nvidia.com/mig-{profile}"] = str(count)
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if product:
        all_labels["nvidia.com/gpu.product"] = "-".join(product.split())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": _uid(f"node/{name}"), "labels": all_labels},
        "spec": {},
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def kube_list(items: Sequence[Obj], kind: str = "List") -> Obj:
    return {"apiVersion": "v1", "kind": kind, "items": list(items), "metadata": {}}

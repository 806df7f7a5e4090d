"""The simulated cluster's DRA nodes as ``resource.k8s.io/v1`` objects.

A node with ``dra: true`` hands its GPUs out through Dynamic Resource Allocation only, as
NVIDIA's DRA driver (``gpu.nvidia.com``) does: no ``nvidia.com/gpu`` in its allocatable,
one ResourceSlice publishing each GPU (``gpu-<index>``, attributes ``type: gpu``, ``uuid``,
``productName``..., capacity ``memory``) or, on a MIG node, each MIG device (``type: mig``,
``uuid``, ``parentUUID``, ``profile``). Its pods hold claims generated from a
ResourceClaimTemplate per workload (owned by the pod, ``status.allocation.devices.results``
naming the devices the simulator assigned, ``reservedFor`` the pod); a fractional pod's
claim consumes its share of the GPU's ``memory`` (the GPU allows multiple allocations, the
driver's consumable shares). Pod objects reference the claims (``spec.resourceClaims``,
``status.resourceClaimStatuses``) and request no ``nvidia.com/gpu``.

:func:`dra_json` is what ``kubectl get resourceslices,resourceclaims,
resourceclaimtemplates,deviceclasses -A -o json`` would print at a time.
"""

from __future__ import annotations

import uuid
from typing import Any

from gpuscope.sim.behaviour import stable_id
from gpuscope.sim.cluster import SimPod, SimulatedCluster
from gpuscope.sim.scenario import GPU_MODELS, NodeSpec

API = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
CLAIM_ENTRY = "gpus"
_GIB = 2**30
#: MIG profile ids and memory slices (A100/H100 80GB), for device names and counters.
_PROFILES = {"1g.10gb": (19, 1), "2g.20gb": (14, 2), "3g.40gb": (9, 4), "4g.40gb": (5, 4),
             "7g.80gb": (0, 8)}  # fmt: skip


def _uid(text: str) -> str:
    h = stable_id(text)
    return str(uuid.UUID(int=h << 64 | h))


def is_dra_pod(cluster: SimulatedCluster, pod: SimPod) -> bool:
    """Whether the pod's GPUs come through DRA: placed on a DRA node, or pending for a
    workload planted on one."""
    if pod.node is not None:
        return cluster.node(pod.node).dra
    return any(cluster.node(n).dra for n in pod.workload.nodes)


def template_name(pod: SimPod) -> str:
    return f"{pod.workload.name}-gpus"


def claim_name(pod: SimPod) -> str:
    """As the resourceclaim controller names them: pod, entry and a random suffix."""
    return f"{pod.name}-{CLAIM_ENTRY}-{stable_id(pod.uid) % 0xFFFFF:05x}"


def pod_claims(cluster: SimulatedCluster, pod: SimPod) -> dict[str, Any]:
    """The pod's DRA fields: ``spec`` (``resourceClaims``) and ``status``
    (``resourceClaimStatuses``) parts, and the container's ``claims``."""
    spec = {
        "resourceClaims": [{"name": CLAIM_ENTRY, "resourceClaimTemplateName": template_name(pod)}]
    }
    status = (
        {"resourceClaimStatuses": [{"name": CLAIM_ENTRY, "resourceClaimName": claim_name(pod)}]}
        if pod.node is not None
        else {}
    )
    return {"spec": spec, "status": status, "container": [{"name": CLAIM_ENTRY}]}


def _shared(cluster: SimulatedCluster, node: str) -> bool:
    return any(p.workload.gpu_fraction < 1 for p in cluster.pods if p.node == node)


def _attrs(spec: NodeSpec) -> dict[str, Any]:
    hopper = spec.gpu_model == "H100"
    return {
        "productName": {"string": GPU_MODELS[spec.gpu_model].name},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper" if hopper else "Ampere"},
        "cudaComputeCapability": {"version": "9.0.0" if hopper else "8.0.0"},
        "driverVersion": {"version": "550.90.7"},
        "cudaDriverVersion": {"version": "12.4.0"},
    }


def _mig_memory(profile: str) -> str:
    """``3g.40gb`` -> ``40Gi``."""
    return f"{profile.split('.')[1].removesuffix('gb')}Gi"


def _mig_device_name(index: int, profile: str, position: int) -> str:
    profile_id, slices = _PROFILES.get(profile, (0, 1))
    return f"gpu-{index}-mig-{profile.replace('.', '')}-{profile_id}-{position * slices}"


def _devices(cluster: SimulatedCluster, spec: NodeSpec) -> list[dict[str, Any]]:
    model = GPU_MODELS[spec.gpu_model]
    out = []
    for i in range(spec.gpus):
        gpu_uuid = cluster.gpu_uuid(spec.name, i)
        if spec.mig_profile:
            for pos, instance in enumerate(cluster.mig_instances(spec)):
                out.append({
                    "name": _mig_device_name(i, spec.mig_profile, pos),
                    "attributes": {
                        "type": {"string": "mig"},
                        "uuid": {"string": cluster.gpu_uuid(spec.name, i, instance)},
                        "parentUUID": {"string": gpu_uuid},
                        "profile": {"string": spec.mig_profile},
                        **_attrs(spec),
                    },
                    "capacity": {"memory": {"value": _mig_memory(spec.mig_profile)}},
                })  # fmt: skip
            continue
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu_uuid}, **_attrs(spec)},
            "capacity": {"memory": {"value": str(model.memory_bytes)}},
        }
        if _shared(cluster, spec.name):
            device["allowMultipleAllocations"] = True
        out.append(device)
    return out


def _results(cluster: SimulatedCluster, pod: SimPod) -> list[dict[str, Any]]:
    assert pod.node is not None
    spec = cluster.node(pod.node)
    memory = GPU_MODELS[spec.gpu_model].memory_bytes
    out = []
    for a in pod.assignments:
        result: dict[str, Any] = {"request": CLAIM_ENTRY, "driver": DRIVER, "pool": pod.node}
        if a.mig_instance:
            pos = cluster.mig_instances(spec).index(a.mig_instance)
            result["device"] = _mig_device_name(a.gpu_index, spec.mig_profile, pos)
        else:
            result["device"] = f"gpu-{a.gpu_index}"
            if _shared(cluster, pod.node):
                result["shareID"] = _uid(f"{pod.uid}/share/{a.gpu_index}")
                result["consumedCapacity"] = {"memory": str(round(memory * a.share))}
        out.append(result)
    return out


def _request(cluster: SimulatedCluster, pod: SimPod) -> dict[str, Any]:
    w = pod.workload
    if w.mig:
        node = (
            next((cluster.node(n) for n in w.nodes), None)
            if pod.node is None
            else cluster.node(pod.node)
        )
        profile = node.mig_profile if node is not None else ""
        exactly: dict[str, Any] = {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": _attr_is("profile", profile)}}],
            "count": 1,
        }  # fmt: skip
    elif w.gpu_fraction < 1:
        memory = GPU_MODELS["H100"].memory_bytes
        share = str(round(memory * w.gpu_fraction))
        exactly = {
            "deviceClassName": "gpu.nvidia.com",
            "count": 1,
            "capacity": {"requests": {"memory": share}},
        }
    else:
        exactly = {"deviceClassName": "gpu.nvidia.com", "count": w.gpus}
    return {"name": CLAIM_ENTRY, "exactly": exactly}


def _attr_is(name: str, value: str) -> str:
    return f"device.attributes['{DRIVER}'].{name} == '{value}'"


def device_classes() -> list[dict[str, Any]]:
    """The driver's DeviceClasses: whole GPUs and MIG devices."""
    out = []
    for kind in ("gpu", "mig"):
        expression = f"device.driver == '{DRIVER}' && {_attr_is('type', kind)}"
        out.append({
            "apiVersion": API,
            "kind": "DeviceClass",
            "metadata": {"name": f"{kind}.nvidia.com", "uid": _uid(f"class/{kind}")},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        })  # fmt: skip
    return out


def dra_json(cluster: SimulatedCluster, t: float) -> dict[str, Any]:
    """The DRA objects of the cluster at ``t`` (seconds on the scenario's timeline), as one
    kubectl List; empty (classes aside) when no node is a DRA node."""
    items: list[dict[str, Any]] = []
    dra_nodes = [n for n in cluster.scenario.nodes if n.dra]
    if not dra_nodes:
        return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}}
    items += device_classes()
    for spec in dra_nodes:
        name = f"{spec.name}-{DRIVER}-slice"
        items.append({
            "apiVersion": API, "kind": "ResourceSlice",
            "metadata": {"name": name, "uid": _uid(f"{cluster.seed}/slice/{spec.name}")},
            "spec": {"driver": DRIVER, "nodeName": spec.name,
                     "pool": {"name": spec.name, "generation": 1, "resourceSliceCount": 1},
                     "devices": _devices(cluster, spec)},
        })  # fmt: skip
    seen_templates: set[tuple[str, str]] = set()
    for pod in cluster.pods:
        if not is_dra_pod(cluster, pod) or (not pod.workload.gpus and not pod.workload.mig):
            continue
        key = (pod.namespace, template_name(pod))
        request = _request(cluster, pod)
        if key not in seen_templates:
            seen_templates.add(key)
            items.append({
                "apiVersion": API, "kind": "ResourceClaimTemplate",
                "metadata": {"name": key[1], "namespace": key[0],
                             "uid": _uid(f"{cluster.seed}/rct/{key[0]}/{key[1]}")},
                "spec": {"spec": {"devices": {"requests": [request]}}},
            })  # fmt: skip
        if pod.node is None or not cluster.is_alive(pod, t):
            continue
        items.append({
            "apiVersion": API, "kind": "ResourceClaim",
            "metadata": {
                "name": claim_name(pod), "namespace": pod.namespace,
                "uid": _uid(f"{cluster.seed}/rc/{pod.uid}"),
                "annotations": {"resource.kubernetes.io/pod-claim-name": CLAIM_ENTRY},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                                     "uid": pod.uid, "controller": True,
                                     "blockOwnerDeletion": True}],
            },
            "spec": {"devices": {"requests": [request]}},
            "status": {
                "allocation": {"devices": {"results": _results(cluster, pod)}},
                "reservedFor": [{"resource": "pods", "name": pod.name, "uid": pod.uid}],
            },
        })  # fmt: skip
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}}

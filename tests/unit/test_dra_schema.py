"""The DRA objects the tests, the fake API server and the simulator use are shaped as the
real types: every field name and its nesting exist in kubernetes/api
``resource/v1/types.go`` (and ``core/v1/types.go`` for the pod fields DRA adds), and the
fields those types mark ``+required`` are there.

The schema below is transcribed by hand from those files (JSON names, not Go names):
a dict maps field names to their schema, ``[s]`` is a list of ``s``, ``{"*": s}`` a map
with free keys, ``None`` a scalar (string, number, bool or quantity).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import dra_objects as d

SCALAR = None
FREE_MAP: dict[str, Any] = {"*": SCALAR}
OWNER = {"apiVersion": SCALAR, "kind": SCALAR, "name": SCALAR, "uid": SCALAR,
         "controller": SCALAR, "blockOwnerDeletion": SCALAR}  # fmt: skip
META = {
    "name": SCALAR, "generateName": SCALAR, "namespace": SCALAR, "uid": SCALAR,
    "resourceVersion": SCALAR, "generation": SCALAR, "creationTimestamp": SCALAR,
    "deletionTimestamp": SCALAR, "deletionGracePeriodSeconds": SCALAR, "labels": FREE_MAP,
    "annotations": FREE_MAP, "ownerReferences": [OWNER], "finalizers": [SCALAR],
    "managedFields": [{"*": SCALAR}], "selfLink": SCALAR,
}  # fmt: skip
NODE_SELECTOR_REQ = {"key": SCALAR, "operator": SCALAR, "values": [SCALAR]}
NODE_SELECTOR = {"nodeSelectorTerms": [{"matchExpressions": [NODE_SELECTOR_REQ],
                                        "matchFields": [NODE_SELECTOR_REQ]}]}  # fmt: skip
COUNTER = {"value": SCALAR}
CEL_SELECTOR = {"cel": {"expression": SCALAR}}
QUANTITY_MAP = FREE_MAP
DEVICE_TAINT = {"key": SCALAR, "value": SCALAR, "effect": SCALAR, "timeAdded": SCALAR}
TOLERATION = {"key": SCALAR, "operator": SCALAR, "value": SCALAR, "effect": SCALAR,
              "tolerationSeconds": SCALAR}  # fmt: skip
CAPACITY_POLICY = {
    "default": SCALAR,
    "validValues": [SCALAR],
    "validRange": {"min": SCALAR, "max": SCALAR, "step": SCALAR},
}
DEVICE = {
    "name": SCALAR,
    "attributes": {"*": {"int": SCALAR, "bool": SCALAR, "string": SCALAR, "version": SCALAR}},
    "capacity": {"*": {"value": SCALAR, "requestPolicy": CAPACITY_POLICY}},
    "consumesCounters": [{"counterSet": SCALAR, "counters": {"*": COUNTER}}],
    "nodeName": SCALAR, "nodeSelector": NODE_SELECTOR, "allNodes": SCALAR,
    "taints": [DEVICE_TAINT], "bindsToNode": SCALAR, "bindingConditions": [SCALAR],
    "bindingFailureConditions": [SCALAR], "allowMultipleAllocations": SCALAR,
}  # fmt: skip
RESOURCE_SLICE = {
    "apiVersion": SCALAR, "kind": SCALAR, "metadata": META,
    "spec": {
        "driver": SCALAR,
        "pool": {"name": SCALAR, "generation": SCALAR, "resourceSliceCount": SCALAR},
        "nodeName": SCALAR, "nodeSelector": NODE_SELECTOR, "allNodes": SCALAR,
        "devices": [DEVICE], "perDeviceNodeSelection": SCALAR,
        "sharedCounters": [{"name": SCALAR, "counters": {"*": COUNTER}}],
    },
}  # fmt: skip
EXACT = {
    "deviceClassName": SCALAR, "selectors": [CEL_SELECTOR], "allocationMode": SCALAR,
    "count": SCALAR, "adminAccess": SCALAR, "tolerations": [TOLERATION],
    "capacity": {"requests": QUANTITY_MAP},
}  # fmt: skip
SUBREQUEST = {**{k: v for k, v in EXACT.items() if k != "adminAccess"}, "name": SCALAR}
OPAQUE = {"opaque": {"driver": SCALAR, "parameters": {"*": SCALAR}}}
CLAIM_SPEC = {
    "devices": {
        "requests": [{"name": SCALAR, "exactly": EXACT, "firstAvailable": [SUBREQUEST]}],
        "constraints": [{"requests": [SCALAR], "matchAttribute": SCALAR,
                         "distinctAttribute": SCALAR}],
        "config": [{"requests": [SCALAR], **OPAQUE}],
    }
}  # fmt: skip
RESULT = {
    "request": SCALAR, "driver": SCALAR, "pool": SCALAR, "device": SCALAR,
    "adminAccess": SCALAR, "tolerations": [TOLERATION], "bindingConditions": [SCALAR],
    "bindingFailureConditions": [SCALAR], "shareID": SCALAR, "consumedCapacity": QUANTITY_MAP,
}  # fmt: skip
RESOURCE_CLAIM = {
    "apiVersion": SCALAR, "kind": SCALAR, "metadata": META, "spec": CLAIM_SPEC,
    "status": {
        "allocation": {
            "devices": {"results": [RESULT],
                        "config": [{"source": SCALAR, "requests": [SCALAR], **OPAQUE}]},
            "nodeSelector": NODE_SELECTOR,
            "allocationTimestamp": SCALAR,
        },
        "reservedFor": [{"apiGroup": SCALAR, "resource": SCALAR, "name": SCALAR, "uid": SCALAR}],
        "devices": [{"driver": SCALAR, "pool": SCALAR, "device": SCALAR, "shareID": SCALAR,
                     "conditions": [{"*": SCALAR}], "data": {"*": SCALAR},
                     "networkData": {"interfaceName": SCALAR, "ips": [SCALAR],
                                     "hardwareAddress": SCALAR}}],
    },
}  # fmt: skip
RESOURCE_CLAIM_TEMPLATE = {
    "apiVersion": SCALAR, "kind": SCALAR, "metadata": META,
    "spec": {"metadata": META, "spec": CLAIM_SPEC},
}  # fmt: skip
DEVICE_CLASS = {
    "apiVersion": SCALAR, "kind": SCALAR, "metadata": META,
    "spec": {"selectors": [CEL_SELECTOR], "config": [OPAQUE], "extendedResourceName": SCALAR},
}  # fmt: skip
#: core/v1: PodSpec.resourceClaims, container resources.claims, PodStatus.resourceClaimStatuses
#: and extendedResourceClaimStatus (other pod fields are not DRA's; left free).
POD_DRA = {
    "spec": {
        "resourceClaims": [{"name": SCALAR, "resourceClaimName": SCALAR,
                            "resourceClaimTemplateName": SCALAR}],
        "containers": [{"resources": {"claims": [{"name": SCALAR, "request": SCALAR}]}}],
    },
    "status": {
        "resourceClaimStatuses": [{"name": SCALAR, "resourceClaimName": SCALAR}],
        "extendedResourceClaimStatus": {
            "requestMappings": [{"containerName": SCALAR, "resourceName": SCALAR,
                                 "requestName": SCALAR}],
            "resourceClaimName": SCALAR,
        },
    },
}  # fmt: skip
SCHEMAS = {
    "ResourceSlice": RESOURCE_SLICE,
    "ResourceClaim": RESOURCE_CLAIM,
    "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATE,
    "DeviceClass": DEVICE_CLASS,
}
#: Fields marked +required in types.go (paths; ``[]`` = every list item).
REQUIRED = {
    "ResourceSlice": ["spec.driver", "spec.pool.name", "spec.pool.generation",
                      "spec.pool.resourceSliceCount", "spec.devices[].name",
                      "spec.devices[].capacity.*.value", "spec.sharedCounters[].name",
                      "spec.sharedCounters[].counters.*.value",
                      "spec.devices[].consumesCounters[].counterSet"],
    "ResourceClaim": ["spec", "spec.devices.requests[].name",
                      "spec.devices.requests[].exactly.deviceClassName",
                      "spec.devices.requests[].exactly.selectors[].cel.expression",
                      "status.allocation.devices.results[].request",
                      "status.allocation.devices.results[].driver",
                      "status.allocation.devices.results[].pool",
                      "status.allocation.devices.results[].device",
                      "status.reservedFor[].resource", "status.reservedFor[].name",
                      "status.reservedFor[].uid"],
    "ResourceClaimTemplate": ["spec.spec", "spec.spec.devices.requests[].name"],
    "DeviceClass": ["spec", "spec.selectors[].cel.expression"],
}  # fmt: skip


def unknown_fields(obj: Any, schema: Any, path: str = "") -> list[str]:
    """Paths in ``obj`` the schema has no field for (wrong name or wrong nesting)."""
    if schema is None:
        return [] if not isinstance(obj, dict | list) else [f"{path} (not a scalar)"]
    if isinstance(schema, list):
        if not isinstance(obj, list):
            return [f"{path} (not a list)"]
        return [
            x for i, item in enumerate(obj) for x in unknown_fields(item, schema[0], f"{path}[{i}]")
        ]
    if not isinstance(obj, dict):
        return [f"{path} (not an object)"]
    out = []
    for key, value in obj.items():
        sub = schema["*"] if "*" in schema else schema.get(key, KeyError)
        if sub is KeyError:
            out.append(f"{path}.{key}".lstrip("."))
            continue
        out += unknown_fields(value, sub, f"{path}.{key}".lstrip("."))
    return out


def missing_required(obj: Any, path: str) -> list[str]:
    """Required paths whose parent is present but the field is not."""
    head, _, rest = path.partition(".")
    if head.endswith("[]"):
        items = obj.get(head[:-2]) if isinstance(obj, dict) else None
        return [m for item in items or () for m in missing_required(item, rest)] if rest else []
    if head == "*":
        return [m for v in (obj or {}).values() for m in missing_required(v, rest)]
    if not isinstance(obj, dict):
        return []
    if head not in obj:
        return [head] if not rest else []
    return missing_required(obj[head], rest) if rest else []


def pod_dra_fields(pod: dict[str, Any]) -> dict[str, Any]:
    """The DRA part of a pod (containers reduced to their resources.claims)."""
    spec, status = pod.get("spec", {}), pod.get("status", {})
    out: dict[str, Any] = {"spec": {}, "status": {}}
    if "resourceClaims" in spec:
        out["spec"]["resourceClaims"] = spec["resourceClaims"]
    claims = [c["resources"]["claims"] for c in spec.get("containers", [])
              if "claims" in c.get("resources", {})]  # fmt: skip
    if claims:
        out["spec"]["containers"] = [{"resources": {"claims": c}} for c in claims]
    for key in ("resourceClaimStatuses", "extendedResourceClaimStatus"):
        if key in status:
            out["status"][key] = status[key]
    return out


def fixture_objects() -> list[dict[str, Any]]:
    """One of each shape the tests build."""
    cs = "gpu-0-counters"
    gpu = d.gpu_device(0, "GPU-A", shared=True, shares=4)
    gpu["consumesCounters"] = [{"counterSet": cs, "counters": {"memory-slice-0": {"value": "1"}}}]
    p = d.pod("a", "p", node="n", claims=[("g", None, "t")], generated={"g": "p-g-x"},
              extended_claim=("p-ext", [{"containerName": "main",
                                         "resourceName": "nvidia.com/gpu",
                                         "requestName": "container-0-request-0"}]))  # fmt: skip
    return [
        *d.nvidia_classes(extended=True),
        d.resource_slice("n", [gpu, d.mig_device(0, "GPU-A", "1g.10gb", 19, 0, "MIG-1",
                                                 counter_set=cs)]),
        d.resource_slice("n", shared_counters=[d.counter_set(cs, 8)], count=2, index=1),
        d.template("a", "t", [d.request("g", "gpu.nvidia.com", 2, [d.profile_selector("x")],
                                        capacity={"memory": "10Gi"})]),
        d.claim("a", "p-g-x", [d.request("g", "mig.nvidia.com", mode="All")],
                [d.result("g", "n", "gpu-0", share_id="0b6bb4f2-1c5e-4c5e-9a0e-5f4f7d3c2a11",
                          consumed={"memory": "10Gi"})],
                reserved_for=[("p", p["metadata"]["uid"])], owner_pod=("p", "u"), extended=True,
                node="n", entry="g"),
        p,
    ]  # fmt: skip


def check(obj: dict[str, Any]) -> None:
    kind = obj.get("kind")
    if kind == "Pod":
        assert unknown_fields(pod_dra_fields(obj), POD_DRA) == []
        return
    assert kind in SCHEMAS, kind
    assert obj["apiVersion"] == "resource.k8s.io/v1"
    assert unknown_fields(obj, SCHEMAS[kind]) == []
    for path in REQUIRED[kind]:
        assert missing_required(obj, path) == [], (kind, path)


@pytest.mark.parametrize("obj", fixture_objects(), ids=lambda o: o["kind"])
def test_fixtures_match_the_types(obj: dict[str, Any]) -> None:
    """Every field name and nesting of the test fixtures exists in types.go."""
    check(obj)


def test_the_schema_check_can_fail() -> None:
    """A misnamed field (``deviceClass``), a wrong nesting (``value`` straight under
    capacity) and a missing required field (``pool.generation``) are each caught."""
    bad_request = d.request("g", "gpu.nvidia.com")
    bad_request["exactly"]["deviceClass"] = bad_request["exactly"].pop("deviceClassName")
    assert unknown_fields(d.template("a", "t", [bad_request]), RESOURCE_CLAIM_TEMPLATE) == [
        "spec.spec.devices.requests[0].exactly.deviceClass"
    ]
    flat = d.resource_slice("n", [d.gpu_device(0, "G")])
    flat["spec"]["devices"][0]["capacity"]["memory"] = "80Gi"
    assert unknown_fields(flat, RESOURCE_SLICE) == [
        "spec.devices[0].capacity.memory (not an object)"
    ]
    del flat["spec"]["pool"]["generation"]
    assert missing_required(flat, "spec.pool.generation") == ["generation"]


def test_rbac_grants_what_dra_reads() -> None:
    """The plain manifests (rendered from the chart) let the collector read the four DRA
    kinds and the agent its node's ResourceSlices, read-only: the requests the inventory
    (gpuscope/collector/cluster/inventory_dra.py) and the agent (gpuscope/agent/workloads/dra.py) send."""
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2] / "deploy"

    def rules(path: str, role: str) -> list[dict[str, Any]]:
        docs = [d for d in yaml.safe_load_all((root / path).read_text()) if d]
        (found,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == role]
        return [r for r in found["rules"] if "resource.k8s.io" in r.get("apiGroups", [])]

    (collector,) = rules("collector/collector.yaml", "gpuscope-collector-read")
    assert set(collector["resources"]) == {
        "resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses"}  # fmt: skip
    (agent,) = rules("agent/daemonset.yaml", "gpuscope-agent")
    assert agent["resources"] == ["resourceslices"]
    for rule in (collector, agent):
        assert set(rule["verbs"]) == {"get", "list", "watch"}

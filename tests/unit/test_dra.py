"""DRA (resource.k8s.io/v1) devices and claims in the one allocation model.

Objects come from tests/fakes/dra_objects.py (shaped as the real types; test_dra_schema.py
holds them to the types). Each test says what it checks; the DRA-only node test fails on
code that reads GPUs from ``status.allocatable`` alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuscope.analytics.consolidation.plan import analyze_consolidation
from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.analytics.placement.allocation_sources import (
    kubectl_records,
    records_from_kubectl,
    state_from_kubectl,
)
from gpuscope.analytics.placement.fragmentation import analyze_fragmentation
from gpuscope.collector.cluster.dra_apply import apply_dra
from gpuscope.collector.cluster.dra_cel import evaluate, not_understood
from gpuscope.collector.cluster.dra_records import DraDevice, devices_from_slices, dra_objects
from gpuscope.core.kube_objects import objects_from_documents
from gpuscope.core.settings import AnalyticsSettings
from tests.fakes import dra_objects as d

AT = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
H100 = "NVIDIA H100 80GB HBM3"


def objset(*objs: dict[str, Any]) -> Any:
    return objects_from_documents([("test", d.kube_list(list(objs)))])


def dra_only_cluster(
    spare: bool = False, shared: bool = False
) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """One DRA-only node with 8 H100s (none in allocatable): a training pod holds 4 GPUs
    through a template claim, an inference pod 1 through a standalone claim, a pending
    job asks for 4 through its template. ``spare``: a device-plugin node with one free
    GPU, where an evicted pod could go; ``shared``: a second inference pod reserves the
    same standalone claim."""
    node = d.node("dra-0")  # no nvidia.com/gpu in allocatable
    extra = [d.node("spare", gpus=1, product=H100)] if spare else []
    gpus = [d.gpu_device(i, f"GPU-{i:04d}", H100) for i in range(8)]
    train = d.pod("ml", "train-0", node="dra-0", claims=[("gpus", None, "four")],
                  generated={"gpus": "train-0-gpus-x1"}, owner=("Job", "train"))  # fmt: skip
    train_uid = train["metadata"]["uid"]
    infer = d.pod("serve", "infer-0", node="dra-0", claims=[("gpu", "infer-gpu", None)])
    sharer = d.pod("serve", "infer-1", node="dra-0", claims=[("gpu", "infer-gpu", None)])
    waiting = d.pod("ml", "wait-0", node=None, claims=[("gpus", None, "four")])
    users = [infer, sharer] if shared else [infer]
    objects = objset(
        *d.nvidia_classes(),
        d.resource_slice("dra-0", gpus),
        d.template("ml", "four", [d.request("gpus", "gpu.nvidia.com", count=4)]),
        d.claim(
            "ml", "train-0-gpus-x1", [d.request("gpus", "gpu.nvidia.com", count=4)],
            [d.result("gpus", "dra-0", f"gpu-{i}") for i in range(4)],
            reserved_for=[("train-0", train_uid)], owner_pod=("train-0", train_uid),
        ),
        d.claim(
            "serve", "infer-gpu", [d.request("gpu", "gpu.nvidia.com")],
            [d.result("gpu", "dra-0", "gpu-5")],
            reserved_for=[(u["metadata"]["name"], u["metadata"]["uid"]) for u in users],
        ),
    )  # fmt: skip
    return d.kube_list([node, *extra]), d.kube_list([train, *users, waiting]), objects


def _as_template_claim(infer: dict[str, Any], objects: Any) -> Any:
    """The inference pod's claim made from a template instead: owned by the pod."""
    uid = infer["metadata"]["uid"]
    infer["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one"}]
    infer["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "infer-gpu"}]
    claims = [o for o in objects.of("ResourceClaim") if o["metadata"]["name"] != "infer-gpu"]
    return objset(
        *objects.of("ResourceSlice", "ResourceClaimTemplate", "DeviceClass"), *claims,
        d.claim("serve", "infer-gpu", [d.request("gpu", "gpu.nvidia.com")],
                [d.result("gpu", "dra-0", "gpu-5")], reserved_for=[("infer-0", uid)],
                owner_pod=("infer-0", uid)),
    )  # fmt: skip


def test_dra_only_node_counts_its_slice_gpus_and_claims_in_every_figure() -> None:
    """Without DRA the node has no GPU at all (total 0); with it: 8 GPUs, 3 free (gpu-4,
    6, 7: the claims took 0-3 and 5, exactly), no 4-GPU job fits now, the pending
    4-GPU job is blocked by capacity."""
    nodes, pods, objects = dra_only_cluster()
    plain = analyze_fragmentation(
        state_from_kubectl(nodes, pods), at=AT, settings=AnalyticsSettings()
    ).summary
    assert plain["total_gpus"] == 0  # what gpuscope saw before DRA
    state = state_from_kubectl(nodes, pods, objects=objects)
    (node,) = state.nodes
    assert node.gpus == (0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0)
    assert node.gpu_model == "NVIDIA-H100-80GB-HBM3"
    s = analyze_fragmentation(state, at=AT, settings=AnalyticsSettings()).summary
    assert (s["total_gpus"], s["free_gpus"], s["whole_free_gpus"]) == (8, 3, 3)
    assert s["largest_placeable_job_gpus"] == 3
    assert s["pending_gpu_tasks"] == 1 and s["pending_fit_now"] == 0
    assert s["pending_blocked_by"] == {"capacity": 1}
    _, pod_infos = records_from_kubectl(nodes, pods, objects=objects)
    held = {p.name: p.gpus for p in pod_infos}
    assert held == {"train-0": 4, "infer-0": 1, "wait-0": 4}  # what quota usage adds up


def test_shared_standalone_claim_pins_its_pod_and_the_planner_says_why() -> None:
    """The pending 4-GPU job needs 1 more GPU on the only node; the inference pod holds
    gpu-5 through a standalone claim another running pod also reserves: the claim stays
    allocated when the pod goes, so evicting it frees nothing, the
    planner may not use it as a victim, and says why."""
    nodes, pods, objects = dra_only_cluster(spare=True, shared=True)
    # make the inference pod preemptible batch work, the one a planner would evict
    pods["items"][1]["metadata"]["labels"] = {
        "gpuscope.io/preemptible": "true", "gpuscope.io/workload-type": "batch"}  # fmt: skip
    node_infos, pod_infos, known = kubectl_records(nodes, pods, objects=objects)
    state = state_from_records(node_infos, pod_infos, known)
    plan = analyze_consolidation(
        state, pod_infos, at=AT, settings=AnalyticsSettings(), gpu_indices=known
    )
    assert plan.summary["evictions"] == []
    assert plan.summary["goals_met"] == 0
    (held,) = plan.summary["held_by_standalone_claims"]
    assert held["pod"] == "serve/infer-0" and "serve/infer-gpu" in held["reason"]
    assert "shared with other pods: evicting frees none" in held["reason"]
    infer = next(p for p in pod_infos if p.name == "infer-0")
    assert "serve/infer-gpu" in infer.annotations["gpuscope.io/dra-standalone-claims"]


@pytest.mark.parametrize("claim", ["template", "sole standalone"])
def test_pod_whose_eviction_frees_its_claim_is_a_useful_victim(claim: str) -> None:
    """The same cluster with the inference pod's GPU from a template claim (it dies with
    the pod), or from a standalone claim no other pod reserves (the resourceclaim
    controller clears its allocation once the pod is gone): evicting it frees gpu-5, so
    the plan moves it to the spare node and the job fits."""
    nodes, pods, objects = dra_only_cluster(spare=True)
    infer = pods["items"][1]
    infer["metadata"]["labels"] = {
        "gpuscope.io/preemptible": "true", "gpuscope.io/workload-type": "batch"}  # fmt: skip
    if claim == "template":
        _as_template_claim(infer, objects)
    node_infos, pod_infos, known = kubectl_records(nodes, pods, objects=objects)
    state = state_from_records(node_infos, pod_infos, known)
    plan = analyze_consolidation(
        state, pod_infos, at=AT, settings=AnalyticsSettings(), gpu_indices=known
    )
    assert plan.summary["evictions"] == ["serve/infer-0"]
    assert plan.summary["goals_met"] == 1
    assert plan.summary["held_by_standalone_claims"] == []


def test_only_complete_pools_at_their_newest_generation_count() -> None:
    """Generation 1 (2 GPUs) is superseded by generation 2 (2 slices of 2 GPUs); while
    only one slice of generation 2 is seen the pool is left out, then it counts 4."""
    old = d.resource_slice("n", [d.gpu_device(i, f"G{i}") for i in range(2)], generation=1)
    new_a = d.resource_slice("n", [d.gpu_device(i, f"G{i}") for i in range(2)],
                             generation=2, count=2, index=0)  # fmt: skip
    new_b = d.resource_slice("n", [d.gpu_device(i, f"G{i}") for i in range(2, 4)],
                             generation=2, count=2, index=1)  # fmt: skip
    devices, _, skipped = devices_from_slices([old, new_a])
    assert devices == [] and "1 of 2 slices at generation 2" in skipped[0]
    devices, _, skipped = devices_from_slices([old, new_a, new_b])
    assert sorted(x.name for x in devices) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert skipped == []
    assert devices_from_slices([old])[0][0].uuid == "G0"


def test_device_plugin_and_dra_gpus_add_up_on_one_node() -> None:
    """A node with 2 device-plugin GPUs and 2 ResourceSlice GPUs has 4; a DRA pod's GPU is
    index 2 + its device's position, so the right GPU is taken."""
    n = d.node("mixed", gpus=2, product=H100)
    p = d.pod("a", "p", node="mixed", claims=[("g", "c", None)])
    objects = objset(
        d.resource_slice("mixed", [d.gpu_device(i, f"G{i}") for i in range(2)]),
        d.claim("a", "c", [d.request("g", "gpu.nvidia.com")], [d.result("g", "mixed", "gpu-1")],
                reserved_for=[("p", p["metadata"]["uid"])]),
    )  # fmt: skip
    (node,) = state_from_kubectl(d.kube_list([n]), d.kube_list([p]), objects=objects).nodes
    assert node.gpus == (1.0, 1.0, 1.0, 0.0)


def test_shared_device_counts_consumed_memory_as_a_fraction_once_per_claim() -> None:
    """A GPU that allows multiple allocations: two claims consume 20Gi and 40Gi of 80Gi
    (0.25 + 0.5 taken). A third pod shares the first claim (reservedFor both): the claim's
    share is counted once."""
    n = d.node("s")
    pa = d.pod("t", "a", node="s", claims=[("g", "ca", None)])
    pb = d.pod("t", "b", node="s", claims=[("g", "cb", None)])
    pc = d.pod("t", "c", node="s", claims=[("g", "ca", None)])
    ua, ub, uc = (p["metadata"]["uid"] for p in (pa, pb, pc))
    objects = objset(
        d.resource_slice("s", [d.gpu_device(0, "G0", shared=True), d.gpu_device(1, "G1")]),
        d.claim("t", "ca", [d.request("g", "gpu.nvidia.com")],
                [d.result("g", "s", "gpu-0", share_id="3f1c0d7e-0000-4000-8000-000000000001",
                          consumed={"memory": "20Gi"})], reserved_for=[("a", ua), ("c", uc)]),
        d.claim("t", "cb", [d.request("g", "gpu.nvidia.com")],
                [d.result("g", "s", "gpu-0", share_id="3f1c0d7e-0000-4000-8000-000000000002",
                          consumed={"memory": "40Gi"})], reserved_for=[("b", ub)]),
    )  # fmt: skip
    pods = d.kube_list([pa, pb, pc])
    (node,) = state_from_kubectl(d.kube_list([n]), pods, objects=objects).nodes
    assert node.gpus == (0.25, 1.0)
    _, infos = records_from_kubectl(d.kube_list([n]), pods, objects=objects)
    assert {p.name: p.gpus for p in infos} == {"a": 0.25, "b": 0.5, "c": 0.0}


def test_extended_resource_claim_is_not_counted_twice() -> None:
    """A pod asking ``nvidia.com/gpu: 2`` served by DRA (KEP-5004): its container request
    counts the GPUs; the scheduler's claim only says which (gpu-2 and gpu-3)."""
    n = d.node("x")
    p = d.pod("a", "p", node="x", requests={"nvidia.com/gpu": "2"},
              extended_claim=("p-extended-resources-abc",
                              [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                                "requestName": "container-0-request-0"}]))  # fmt: skip
    objects = objset(
        *d.nvidia_classes(extended=True),
        d.resource_slice("x", [d.gpu_device(i, f"G{i}") for i in range(4)]),
        d.claim("a", "p-extended-resources-abc",
                [d.request("container-0-request-0", "gpu.nvidia.com", count=2)],
                [d.result("container-0-request-0", "x", f"gpu-{i}") for i in (2, 3)],
                reserved_for=[("p", p["metadata"]["uid"])],
                owner_pod=("p", p["metadata"]["uid"]), extended=True),
    )  # fmt: skip
    state = state_from_kubectl(d.kube_list([n]), d.kube_list([p]), objects=objects)
    assert state.nodes[0].gpus == (1.0, 1.0, 0.0, 0.0)
    _, infos = records_from_kubectl(d.kube_list([n]), d.kube_list([p]), objects=objects)
    assert infos[0].gpu_request == 2


def test_mig_devices_and_pending_mig_demand() -> None:
    """Static MIG devices are MIG instances by profile; a claim on one takes it; a pending
    template asking mig.nvidia.com with a profile selector is MIG demand of that profile."""
    n = d.node("m")
    migs = [d.mig_device(0, "GPU-P0", "1g.10gb", 19, s, f"MIG-{s}") for s in range(7)]
    run = d.pod("a", "r", node="m", claims=[("m", "rm", None)])
    wait = d.pod("a", "w", node=None, claims=[("m", None, "small")])
    objects = objset(
        *d.nvidia_classes(),
        d.resource_slice("m", migs),
        d.claim("a", "rm", [d.request("m", "mig.nvidia.com")],
                [d.result("m", "m", migs[2]["name"])], reserved_for=[("r", run["metadata"]["uid"])]),
        d.template("a", "small", [d.request("m", "mig.nvidia.com", count=2,
                                            selectors=[d.profile_selector("1g.10gb")])]),
    )  # fmt: skip
    nodes, pods = d.kube_list([n]), d.kube_list([run, wait])
    state = state_from_kubectl(nodes, pods, objects=objects)
    assert state.nodes[0].mig_total == (("1g.10gb", 7),)
    assert state.nodes[0].mig_free == (("1g.10gb", 6),)
    _, infos = records_from_kubectl(nodes, pods, objects=objects)
    assert {p.name: dict(p.mig) for p in infos} == {"r": {"1g.10gb": 1}, "w": {"1g.10gb": 2}}


def test_partitionable_mig_counts_placements_still_allocatable_on_free_counters() -> None:
    """Dynamic MIG: one A100 (8 memory slices) publishes the whole GPU and 1g (1 slice)
    and 4g (4 slices) placements, all consuming its counters. Free, it is one whole GPU;
    once a 4g placement at slice 0 is allocated it is MIG-split: the 4g in use, one more
    4g (slices 4-7) allocatable; the 1g placements overlap that one and are counted after
    it only where counters remain."""
    cs = "gpu-0-counters"
    gpu = d.gpu_device(0, "GPU-A", "NVIDIA A100-SXM4-80GB")
    gpu["consumesCounters"] = [{"counterSet": cs, "counters": {
        f"memory-slice-{i}": {"value": "1"} for i in range(8)}}]  # fmt: skip
    big = [d.mig_device(0, "GPU-A", "4g.40gb", 5, s, counter_set=cs, slices=4) for s in (0, 4)]
    small = [d.mig_device(0, "GPU-A", "1g.10gb", 19, s, counter_set=cs) for s in range(8)]
    slices = [
        d.resource_slice("p", shared_counters=[d.counter_set(cs, 8)], count=2, index=0),
        d.resource_slice("p", [gpu, *big, *small], count=2, index=1),
    ]
    n = d.node("p")
    free = state_from_kubectl(d.kube_list([n]), d.kube_list([]), objects=objset(*slices))
    assert free.nodes[0].gpus == (1.0,) and free.nodes[0].mig_total == ()
    run = d.pod("a", "r", node="p", claims=[("m", "c", None)])
    claim = d.claim("a", "c", [d.request("m", "mig.nvidia.com")],
                    [d.result("m", "p", big[0]["name"])],
                    reserved_for=[("r", run["metadata"]["uid"])])  # fmt: skip
    used = state_from_kubectl(d.kube_list([n]), d.kube_list([run]), objects=objset(*slices, claim))
    node = used.nodes[0]
    assert node.gpus == ()
    assert dict(node.mig_total) == {"4g.40gb": 2}
    assert dict(node.mig_free) == {"4g.40gb": 1}


@pytest.mark.parametrize(
    ("expression", "matches", "unknown"),
    [
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
         True, 0),
        ("device.attributes['gpu.nvidia.com'].type == 'mig'", False, 0),
        ('device.attributes["gpu.nvidia.com"].productName in ["NVIDIA H100 80GB HBM3", "x"]',
         True, 0),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", True, 0),
        ("device.capacity['gpu.nvidia.com'].memory >= quantity('100Gi')", False, 0),
        ("'profile' in device.attributes['gpu.nvidia.com']", False, 0),
        ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan("
         "semver('8.0.0'))", True, 1),
        ("device.attributes['gpu.nvidia.com'].type == 'gpu' || device.driver == 'x'", True, 1),
    ],
)  # fmt: skip
def test_cel_subset(expression: str, matches: bool, unknown: int) -> None:
    """The common selectors are evaluated; the rest is taken as true and named."""
    (dev,) = dra_objects(slices=[d.resource_slice("n", [d.gpu_device(0, "G", H100)])]).devices
    assert isinstance(dev, DraDevice)
    verdict = evaluate([expression], dev)
    assert verdict.matches is matches
    assert len(not_understood([expression])) == unknown


def test_selector_not_understood_is_said_plainly() -> None:
    """A pending request whose selector gpuscope cannot read is still counted (as any GPU
    of its class) and the note names the clause."""
    n = d.node("n")
    wait = d.pod("a", "w", node=None, claims=[("g", None, "t")])
    objects = objset(
        *d.nvidia_classes(), d.resource_slice("n", [d.gpu_device(0, "G", H100)]),
        d.template("a", "t", [d.request("g", "gpu.nvidia.com",
                                        selectors=["device.attributes['x'].y.matches('z')"])]),
    )  # fmt: skip
    from gpuscope.analytics.placement.allocation_sources import records_from_kubectl as rk
    from gpuscope.collector.cluster.dra_records import dra_from_object_set

    nodes, pods = rk(d.kube_list([n]), d.kube_list([wait]))
    applied = apply_dra(nodes, pods, [wait], dra_from_object_set(objects))
    assert applied.pods[0].gpu_request == 1
    assert any("not understood" in x and "matches('z')" in x for x in applied.notes)
    assert state_from_records(applied.nodes, applied.pods).pending[0].gpu_count == 1


def test_pending_demand_from_standalone_claims_and_model_selectors() -> None:
    """A pending pod naming an unallocated standalone claim asks for its devices; one
    naming an allocated claim (another pod holds it) asks for nothing new; a template
    whose selector pins productName to A100 on an H100-only cluster is blocked by model."""
    n = d.node("h", product=H100)
    holder = d.pod("a", "holder", node="h", claims=[("g", "shared", None)])
    fresh = d.pod("a", "fresh", node=None, claims=[("g", "new-claim", None)])
    joins = d.pod("a", "joins", node=None, claims=[("g", "shared", None)])
    a100 = d.pod("a", "a100", node=None, claims=[("g", None, "a100")])
    pin = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'"
    objects = objset(
        *d.nvidia_classes(),
        d.resource_slice("h", [d.gpu_device(i, f"G{i}", H100) for i in range(4)]),
        d.claim("a", "shared", [d.request("g", "gpu.nvidia.com")], [d.result("g", "h", "gpu-0")],
                reserved_for=[("holder", holder["metadata"]["uid"])]),
        d.claim("a", "new-claim", [d.request("g", "gpu.nvidia.com", count=2)]),
        d.template("a", "a100", [d.request("g", "gpu.nvidia.com", selectors=[pin])]),
    )  # fmt: skip
    pods = d.kube_list([holder, fresh, joins, a100])
    _, infos = records_from_kubectl(d.kube_list([n]), pods, objects=objects)
    asks = {p.name: (p.gpu_request, p.gpu_spec) for p in infos}
    assert asks == {"holder": (1, ""), "fresh": (2, ""), "joins": (0, ""),
                    "a100": (1, "NVIDIA-A100-SXM4-80GB")}  # fmt: skip
    s = analyze_fragmentation(
        state_from_kubectl(d.kube_list([n]), pods, objects=objects),
        at=AT, settings=AnalyticsSettings(),
    ).summary  # fmt: skip
    assert s["pending_gpu_tasks"] == 2 and s["pending_fit_now"] == 1
    assert s["pending_blocked_by"] == {"model": 1}

"""The simulator's DRA pool (the demo's default scenario with ``dra=True``): nodes that hand
GPUs out through ResourceSlices and claims only, shaped as the real types, counted as the
same nodes would be through the device plugin, and the demo's story unchanged."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.analytics.placement.allocation_sources import kubectl_records
from gpuscope.analytics.placement.fragmentation import analyze_fragmentation
from gpuscope.core.kube_objects import objects_from_documents
from gpuscope.core.settings import AnalyticsSettings
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.dra import dra_json
from gpuscope.sim.kube import nodes_json
from gpuscope.sim.kube_pods import pods_json
from tests.unit.test_dra_schema import check

ORIGIN = 1_717_200_000.0
AT = datetime(2024, 6, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def cluster() -> SimulatedCluster:
    return SimulatedCluster(default_scenario(nodes=8, dra=True))


def now(cluster: SimulatedCluster) -> float:
    """The demo's "now" (its live part): the steady-state background has ended there and
    the planted story stands alone, as the demo shows it."""
    return float(cluster.scenario.live_offset)


def summary(cluster: SimulatedCluster, objects: Any, indices: Any = None) -> dict[str, Any]:
    nodes, pods = (
        nodes_json(cluster, origin=ORIGIN),
        pods_json(cluster, now(cluster), origin=ORIGIN),
    )
    node_infos, pod_infos, known = kubectl_records(nodes, pods, objects=objects)
    state = state_from_records(node_infos, pod_infos, {**known, **(indices or {})})
    return analyze_fragmentation(state, at=AT, settings=AnalyticsSettings()).summary


def test_dra_nodes_publish_gpus_only_through_slices(cluster: SimulatedCluster) -> None:
    """The pool's nodes have no GPU in allocatable; their pods request none and hold
    claims; every DRA object matches the real types."""
    nodes = {n["metadata"]["name"]: n for n in nodes_json(cluster, origin=ORIGIN)["items"]}
    for name in ("dra-node-00", "dra-node-01", "dra-mig-00"):
        alloc = nodes[name]["status"]["allocatable"]
        assert not [k for k in alloc if k.startswith("nvidia.com/")], name
    pods = [p for p in pods_json(cluster, now(cluster), origin=ORIGIN)["items"]
            if p["spec"].get("nodeName", "").startswith("dra-")]  # fmt: skip
    assert len(pods) == 14
    for p in pods:
        requests = p["spec"]["containers"][0]["resources"]["requests"]
        assert not [k for k in requests if k.startswith("nvidia.com/")]
        assert p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        assert p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    objs = dra_json(cluster, now(cluster))["items"]
    assert {o["kind"] for o in objs} == {
        "DeviceClass", "ResourceSlice", "ResourceClaimTemplate", "ResourceClaim"}  # fmt: skip
    for obj in objs:
        check(obj)


def test_dra_pool_counts_as_the_same_nodes_through_the_device_plugin(
    cluster: SimulatedCluster,
) -> None:
    """Written through DRA or through the device plugin (the same scenario with ``dra``
    off on those nodes), every fragmentation figure is equal; without reading the DRA
    objects the pool's GPUs vanish. The agents' GPU indices are given for the pods the
    claims do not name (the device-plugin ones), as the store has them."""
    objects = objects_from_documents([("sim", dra_json(cluster, now(cluster)))])
    scenario = cluster.scenario
    plain = SimulatedCluster(scenario.model_copy(update={
        "nodes": tuple(n.model_copy(update={"dra": False}) for n in scenario.nodes)}))  # fmt: skip
    indices = {
        f"{p.namespace}/{p.name}": [a.gpu_index for a in p.assignments]
        for p in plain.pods
        if p.node and not p.workload.mig
    }
    on_dra = {
        f"{p.namespace}/{p.name}" for p in cluster.pods if p.node and cluster.node(p.node).dra
    }
    agents = {k: v for k, v in indices.items() if k not in on_dra}
    via_dra = summary(cluster, objects, agents)
    assert via_dra == summary(plain, None, indices)
    assert via_dra["total_gpus"] == 8 * 8 + 16
    assert via_dra["mig_instances_total"] == 16 and via_dra["mig_instances_free"] == 4
    assert via_dra["node_free_gpus"]["dra-node-00"] == 2
    blind = summary(cluster, None)
    assert blind["total_gpus"] == 8 * 8


def test_the_story_holds_with_the_dra_pool(cluster: SimulatedCluster) -> None:
    """The pending 4-GPU vision job is still blocked by fragmentation (no node, DRA ones
    included, has 4 free GPUs, though the cluster has more than 4)."""
    objects = objects_from_documents([("sim", dra_json(cluster, now(cluster)))])
    s = summary(cluster, objects)
    assert s["pending_blocked_by"] == {"fragmentation": 1}
    assert s["free_gpus"] >= 4 and s["largest_placeable_job_gpus"] < 4

"""Fragmentation from kubectl-shaped JSON of the simulated cluster, and from the store."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analytics.placement.allocation_sources import state_from_inventory, state_from_kubectl
from gpuscope.analytics.placement.fragmentation import analyze_fragmentation
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import AnalyticsSettings
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.kube import nodes_json
from gpuscope.sim.kube_pods import pods_json

AT = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def cluster() -> SimulatedCluster:
    return SimulatedCluster(default_scenario())


def _now(cluster: SimulatedCluster) -> float:
    """The demo's "now" (its live part): the steady-state background has ended there and
    the planted state is alone."""
    return cluster.scenario.live_offset


def _json(cluster: SimulatedCluster) -> tuple[dict[str, Any], dict[str, Any]]:
    return nodes_json(cluster, origin=0.0), pods_json(cluster, _now(cluster), origin=0.0)


def _agent_indices(cluster: SimulatedCluster) -> dict[str, list[int]]:
    """The GPU indices each placed pod holds, as the agents report them (pod-resources)."""
    return {
        f"{p.namespace}/{p.name}": [a.gpu_index for a in p.assignments]
        for p in cluster.pods
        if p.node is not None and cluster.is_alive(p, _now(cluster))
    }


def test_pending_four_gpu_job_blocked_by_scattered_gpus(cluster: SimulatedCluster) -> None:
    nodes, pods = _json(cluster)
    state = state_from_kubectl(nodes, pods, gpu_indices=_agent_indices(cluster))
    # besides the topology story's 2 x 8-GPU pod group (test_topology_story.py)
    assert [t.name for t in state.pending if not t.name.startswith("nlp/gpt-16-")] == [
        "vision/detector-train-worker-0"
    ]
    result = analyze_fragmentation(state, at=AT, settings=AnalyticsSettings())
    s = result.summary
    assert s["free_gpus"] >= 4
    assert s["largest_placeable_job_gpus"] < 4
    assert s["jobs_fit_now"]["4"] == 0 and s["jobs_fit_packed"]["4"] >= 1
    [found] = [f for f in result.findings if f.kind == "node_fragmentation"]
    assert found.subject == {"pool": "h100"}
    assert found.severity == "warning"
    # the 4-GPU job, and the topology story's 8-GPU pods (the largest is the target)
    assert {4, 8} <= set(found.evidence["pending_blocked_job_gpus"])
    assert found.recommendation == {
        "action": "consolidate",
        "target": {"pool": "h100", "job_gpus": 8},
    }
    # the serving nodes' GPUs are shared by fractional pods: capacity stranded on them
    assert s["partially_used_gpus"] > 0 and s["stranded_gpu_capacity"] > 0
    assert 0.0 <= s["fgd_fragmentation_ratio"] <= 1.0
    assert s["fgd_fragmented_gpus"] <= s["free_gpus"]


def test_kubectl_alone_never_claims_more_whole_gpus_than_there_are(
    cluster: SimulatedCluster,
) -> None:
    """Without the agents the fractional pods are spread (gpuscope.analytics.placement.allocation_gpus): the
    reconstruction may find fewer whole GPUs free on the serving nodes than there are (the
    simulator left two whole per node), never more, and the same free capacity."""
    state = state_from_kubectl(*_json(cluster))
    exact = state_from_kubectl(*_json(cluster), gpu_indices=_agent_indices(cluster))
    serving = [n for n in state.nodes if n.name in ("gpu-node-30", "gpu-node-31")]
    assert [n.whole_free_gpus for n in serving] == [0, 0]
    for guess, truth in zip(state.nodes, exact.nodes, strict=True):
        assert guess.whole_free_gpus <= truth.whole_free_gpus
        assert guess.free_gpus == pytest.approx(truth.free_gpus)
    assert sum(n.free_gpus for n in state.nodes) == pytest.approx(
        sum(n.free_gpus for n in exact.nodes)
    )


def test_inventory_gives_the_same_state(cluster: SimulatedCluster, tmp_path: Path) -> None:
    nodes, pods = _json(cluster)
    infos = {n.name: n for n in map(node_from_json, nodes["items"])}
    pod_infos = [
        pod_from_json(p, node=infos.get(p["spec"].get("nodeName", ""))) for p in pods["items"]
    ]
    with Store.open(tmp_path / "inv.duckdb") as store:
        store.record_inventory(AT, nodes=list(infos.values()), pods=pod_infos)
        from_store = state_from_inventory(store.cursor())
        indices = _agent_indices(cluster)
        exact = state_from_inventory(store.cursor(), gpu_indices=indices)
    assert from_store == state_from_kubectl(nodes, pods)
    assert exact == state_from_kubectl(nodes, pods, gpu_indices=indices)

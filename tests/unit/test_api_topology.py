"""GET /api/v1/topology serves the latest topology analysis: whole, or one level; 404 for
an unknown level, 503 before the first run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.domains.topology import analyze_topology
from gpuscope.analytics.domains.topology_groups import pod_groups
from gpuscope.analytics.domains.topology_levels import topology_of
from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.collector.http_api.api_topology import topology_router

LEAF = "network.topology.nvidia.com/leaf"


def analysis() -> Analysis:
    nodes = [NodeInfo(name=f"n{i}", allocatable_gpus=8, labels={LEAF: f"l{i // 2}"})
             for i in range(4)]  # fmt: skip
    pods = [PodInfo(namespace="t", name="x", uid="x", node="n1", phase="Running",
                    start_time=None, gpu_request=1),
            PodInfo(namespace="t", name="y", uid="y", node="n3", phase="Running",
                    start_time=None, gpu_request=1)]  # fmt: skip
    pods += [PodInfo(namespace="t", name=f"g{i}", uid=f"g{i}", node=None, phase="Pending",
                     start_time=None, gpu_request=8,
                     labels={"kueue.x-k8s.io/pod-group-name": "g"},
                     annotations={"kueue.x-k8s.io/pod-group-total-count": "2",
                                  "kueue.x-k8s.io/podset-required-topology": LEAF})
             for i in range(2)]  # fmt: skip
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return analyze_topology(
        state_from_records(nodes, pods), topology_of(nodes), pod_groups(pods), at=at
    )


def client(latest: Any) -> TestClient:
    app = FastAPI()
    app.include_router(topology_router(lambda: latest, []))
    return TestClient(app)


def test_serves_levels_domains_slots_and_findings() -> None:
    c = client(analysis())
    body = c.get("/api/v1/topology").json()
    leaf = body["summary"]["levels"][LEAF]
    assert leaf["domains"]["l0"]["free_gpus"] == 15
    assert leaf["slots"]["8"] == 2 and leaf["slots"]["16"] == 0
    (f,) = body["findings"]
    assert f["kind"] == "topology_fragmentation" and f["subject"]["pod_group"] == "g"
    one = c.get("/api/v1/topology", params={"level": LEAF}).json()
    assert list(one["summary"]["levels"]) == [LEAF]


def test_unknown_level_and_no_run_yet() -> None:
    assert client(analysis()).get("/api/v1/topology", params={"level": "rack"}).status_code == 404
    assert client(None).get("/api/v1/topology").status_code == 503

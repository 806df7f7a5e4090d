"""The collector service with Kubernetes: agents discovered by label, inventory recorded."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuscope.collector.http_api.api import create_app
from gpuscope.collector.service import CollectorService
from gpuscope.core.settings import load_settings
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.kube import namespaces_json, nodes_json, quotas_json
from gpuscope.sim.kube_pods import pods_json
from tests.conftest import free_port
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.helpers import agent_process

pytestmark = pytest.mark.integration
ORIGIN = 1_717_200_000.0


def agent_pod(name: str, node: str, ip: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "gpuscope",
            "labels": {"app.kubernetes.io/component": "agent"},
        },
        "spec": {"nodeName": node, "containers": [{"name": "agent", "image": "gpuscope-agent"}]},
        "status": {"phase": "Running", "podIP": ip},
    }


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    cluster = SimulatedCluster(default_scenario(nodes=8))
    server = FakeKubeApi().start()
    server.store.load(
        namespaces_json(cluster),
        nodes_json(cluster, origin=ORIGIN),
        pods_json(cluster, 0.0, origin=ORIGIN),
        quotas_json(cluster),
    )
    yield server
    server.stop()


def test_discovered_agents_are_scraped_and_inventory_is_recorded(
    api: FakeKubeApi, tmp_path: Path
) -> None:
    """Agent pods found by label (two loopback addresses, one port) are scraped; nodes, pods
    and quotas (the config's beside Kueue's) land in the store and the API."""
    port = free_port()
    for name, node, ip in (
        ("agent-a", "gpu-node-00", "127.0.0.2"),
        ("agent-b", "gpu-node-02", "127.0.0.3"),
    ):
        api.store.create(agent_pod(name, node, ip), "gpuscope")
    with (
        agent_process("gpu-node-00", host="127.0.0.2", port=port),
        agent_process("gpu-node-02", host="127.0.0.3", port=port),
    ):
        settings = load_settings(
            env={},
            overrides={
                "collector": {
                    "db": tmp_path / "k.duckdb",
                    "kubernetes": api.url,
                    "discovery": {
                        "enabled": True,
                        "namespace": "gpuscope",
                        "pod_label_selector": "app.kubernetes.io/component=agent",
                        "port": port,
                    },
                    "projects": [{"name": "vision", "guaranteed_gpus": 64}],
                }
            },
        )
        service = CollectorService(settings)
        try:
            service.inventory_cycle()
            urls = [t.url for t in service.targets.targets()]
            assert urls == [f"http://127.0.0.2:{port}/metrics", f"http://127.0.0.3:{port}/metrics"]
            assert service.scrape_cycle() > 400
            client = TestClient(create_app(service.api_state()))
            status = client.get("/api/v1/status").json()
            assert [t["up"] for t in status["targets"]] == [True, True]
            nodes = client.get("/api/v1/inventory/nodes").json()
            assert nodes["total"] == 8
            pods = client.get("/api/v1/inventory/pods", params={"limit": 1000}).json()
            assert any(p["phase"] == "Pending" and p["gpu_request"] == 4 for p in pods["items"])
            quotas = {
                q["project"]: q for q in client.get("/api/v1/inventory/quotas").json()["items"]
            }
            assert quotas["vision"]["guaranteed_gpus"] == 64  # the config wins
            assert quotas["vision"]["source"] == "config"
            assert quotas["nlp"]["source"] == "kueue"
            util = client.get("/api/v1/utilization", params={"by": "node", "step": 15}).json()
            assert {s["key"] for s in util["series"]} == {"gpu-node-00", "gpu-node-02"}
        finally:
            service.stop()

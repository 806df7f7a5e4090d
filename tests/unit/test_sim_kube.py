"""The simulated cluster as Kubernetes objects: valid against the 1.30 schemas, and read
back by the inventory's pure parsers into what the scenario planted."""

from __future__ import annotations

import kubernetes_validate
import pytest

from gpuscope.collector.cluster.inventory import (
    node_from_json,
    pod_from_json,
    quota_from_clusterqueue,
    quota_from_kai_queue,
)
from gpuscope.core.records import WorkloadKind
from gpuscope.sim import NodeSpec, Scenario, SimulatedCluster, WorkloadSpec, default_scenario
from gpuscope.sim.kube import namespaces_json, nodes_json, quotas_json
from gpuscope.sim.kube_pods import pods_json
from gpuscope.sim.kube_values import rfc3339

ORIGIN = 1_717_200_000.0


@pytest.fixture(scope="module")
def cluster() -> SimulatedCluster:
    return SimulatedCluster(default_scenario(nodes=8))


@pytest.fixture(scope="module")
def mig_cluster() -> SimulatedCluster:
    return SimulatedCluster(
        Scenario(
            nodes=(
                NodeSpec(name="a100-mig", gpu_model="A100", gpus=4, mig_profile="3g.40gb"),
                NodeSpec(name="h100", gpus=2, ib_ports=0),
            ),
            workloads=(
                WorkloadSpec(name="small", namespace="lab", kind="interactive", mig=True),
                WorkloadSpec(name="job", namespace="lab", kind="batch", gpus=2, start=-60),
                WorkloadSpec(name="later", namespace="lab", kind="batch", gpus=1, start=600),
            ),
        )
    )


def test_nodes_and_pods_validate_strictly_against_kubernetes_1_30(
    cluster: SimulatedCluster, mig_cluster: SimulatedCluster
) -> None:
    """Every Node, Pod and Namespace, MIG ones included, passes the strict 1.30 schema."""
    objects = []
    for c in (cluster, mig_cluster):
        objects += nodes_json(c, origin=ORIGIN)["items"]
        objects += pods_json(c, 0.0, origin=ORIGIN)["items"]
        objects += namespaces_json(c)["items"]
    kinds = {o["kind"] for o in objects}
    assert kinds == {"Node", "Pod", "Namespace"}
    for obj in objects:
        kubernetes_validate.validate(obj, "1.30", strict=True)


def test_nodes_round_trip(cluster: SimulatedCluster) -> None:
    """GPU model, GPU count, pool, rack, rails and CPU come back from the labels and status."""
    for item in nodes_json(cluster, origin=ORIGIN)["items"]:
        info = node_from_json(item)
        spec = cluster.node(info.name)
        assert info.allocatable_gpus == spec.gpus and info.mig == {}
        assert (info.pool, info.rack, info.cpu_milli) == (spec.pool, spec.rack, spec.cpu_milli)
        assert info.ib_rails == {str(i): f"mlx5_{i}" for i in range(spec.ib_ports)}
        assert info.gpu_model == "NVIDIA-H100-80GB-HBM3" and info.gpu_memory_mib == 81559
        assert info.ready and not info.unschedulable


def test_pods_round_trip(cluster: SimulatedCluster) -> None:
    """Node, phase, requests, fraction, kind, project, preemptibility and start time of
    every pod are what the simulator planted; a pod that waits for room (the steady-state
    background's) is listed Pending, unbound, from its arrival."""
    items = pods_json(cluster, 0.0, origin=ORIGIN)["items"]
    sims = {p.uid: p for p in cluster.pods}
    waiting = [p for p in cluster.pods if cluster.is_listed(p, 0.0) and not p.alive(0.0)]
    assert len(items) == sum(p.alive(0.0) for p in cluster.pods) + len(waiting)
    # some background pods wait for room, listed Pending from their arrival (their
    # creation time, checked below for those waiting at 0)
    assert any(
        cluster.is_listed(p, p.workload.arrival) and not p.alive(p.workload.arrival)
        for p in cluster.pods
        if p.workload.arrival is not None
    )
    for item in items:
        pod = pod_from_json(item)
        sim = sims[pod.uid]
        w = sim.workload
        running = sim.node is not None and sim.start <= 0.0
        assert (pod.namespace, pod.name) == (sim.namespace, sim.name)
        assert pod.node == (sim.node if running else None)
        assert pod.phase == ("Running" if running else "Pending")
        created = w.start if w.arrival is None else w.arrival
        assert item["metadata"]["creationTimestamp"] == rfc3339(ORIGIN + created)
        if not running:
            continue
        assert pod.gpus == pytest.approx(w.gpus * w.gpu_fraction)
        assert pod.gpu_fraction == (w.gpu_fraction if w.gpu_fraction < 1 else None)
        assert pod.kind is WorkloadKind(w.kind)
        assert (pod.project, pod.preemptible, pod.priority) == (
            w.project_name,
            w.preemptible,
            w.priority,
        )
        assert pod.start_time == ORIGIN + w.start


def test_mig_pods_and_nodes_round_trip(mig_cluster: SimulatedCluster) -> None:
    """A MIG node exposes nvidia.com/mig-3g.40gb (two per A100) and no whole GPUs; the MIG
    pod asks for one instance; pods not started yet are not listed."""
    nodes = {
        n["metadata"]["name"]: node_from_json(n)
        for n in nodes_json(mig_cluster, origin=ORIGIN)["items"]
    }
    assert nodes["a100-mig"].mig == {"3g.40gb": 8} and nodes["a100-mig"].allocatable_gpus == 0
    assert nodes["h100"].ib_rails == {}
    pods = {
        p.name: p for p in map(pod_from_json, pods_json(mig_cluster, 0.0, origin=ORIGIN)["items"])
    }
    assert set(pods) == {"small-0", "job-worker-0"}
    assert pods["small-0"].mig == {"3g.40gb": 1} and pods["small-0"].gpu_request == 0
    assert pods["small-0"].node == "a100-mig" and pods["small-0"].kind is WorkloadKind.INTERACTIVE
    assert pods["job-worker-0"].gpu_request == 2 and pods["job-worker-0"].node == "h100"


def test_removed_pods_leave_the_listing(cluster: SimulatedCluster) -> None:
    """A pod the actuator removed is gone from pods_json from then on, not before."""
    sim = SimulatedCluster(cluster.scenario)
    assert sim.remove_pod("research", "nb-user01-0", 100.0)
    before = {p["metadata"]["name"] for p in pods_json(sim, 50.0, origin=ORIGIN)["items"]}
    after = {p["metadata"]["name"] for p in pods_json(sim, 150.0, origin=ORIGIN)["items"]}
    assert before - after == {"nb-user01-0"}


def test_gpu_memory_and_shared_gpus_become_fractions() -> None:
    """``gpu-memory`` is read against the node's GPU memory; time-sliced
    ``nvidia.com/gpu.shared`` against the node's replicas."""
    node = node_from_json(
        {
            "metadata": {
                "name": "n",
                "labels": {"nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.replicas": "4"},
            },
            "status": {"allocatable": {"nvidia.com/gpu.shared": "32", "cpu": "95500m"}},
        }
    )
    assert (node.shared_gpus, node.gpu_replicas, node.cpu_milli) == (32, 4, 95500)
    by_memory = pod_from_json(
        {
            "metadata": {"name": "a", "annotations": {"gpu-memory": "20480"}},
            "spec": {"nodeName": "n"},
        },
        node=node,
    )
    assert by_memory.gpu_fraction == 0.25
    shared = pod_from_json(
        {
            "metadata": {"name": "b"},
            "spec": {
                "nodeName": "n",
                "containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu.shared": "2"}}}
                ],
            },
        },
        node=node,
    )
    assert shared.gpu_fraction == 0.5 and shared.gpu_request == 0


def test_cluster_queues_round_trip(cluster: SimulatedCluster) -> None:
    """quotas_json's ClusterQueues read back to each project's guarantee."""
    quotas = [quota_from_clusterqueue(q) for q in quotas_json(cluster)["items"]]
    assert {q.project: q.guaranteed_gpus for q in quotas} == {
        p.name: p.guaranteed_gpus for p in cluster.scenario.projects
    }
    assert all(q.borrowing_limit is not None and q.source == "kueue" for q in quotas)


def test_kai_queue_negative_values_mean_unset() -> None:
    """KAI writes -1 for "no limit"; a quota of 0 is a real zero."""
    q = quota_from_kai_queue(
        {
            "metadata": {"name": "p"},
            "spec": {"resources": {"gpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1}}},
        }
    )
    assert (q.guaranteed_gpus, q.limit, q.over_quota_weight) == (0.0, None, 1.0)


def test_quantities_parse_like_kubernetes() -> None:
    """Binary and decimal suffixes, millis and exponents; junk is zero, not an exception."""
    from gpuscope.collector.cluster.inventory_records import parse_quantity

    assert parse_quantity("1500m") == 1.5
    assert parse_quantity("2Ki") == 2048 and parse_quantity("3G") == 3e9
    assert parse_quantity("1e3") == 1000 and parse_quantity(4) == 4
    assert parse_quantity("12 GPUs") == 0

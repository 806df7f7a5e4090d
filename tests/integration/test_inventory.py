"""KubeInventory against the fake Kubernetes API server over HTTP, loaded with the default
scenario's nodes, pods and Kueue ClusterQueues as the simulator renders them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from gpuscope.collector.cluster.inventory import InventoryError, KubeInventory
from gpuscope.collector.cluster.kube_api import RetryPolicy
from gpuscope.core.records import WorkloadKind
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.kube import namespaces_json, nodes_json, quotas_json
from gpuscope.sim.kube_pods import pods_json
from tests.conftest import free_port
from tests.fakes.kube_api import FakeKubeApi
from tests.fakes.kube_store import DEFAULT_INSTALLED, ApiError

pytestmark = pytest.mark.integration

ORIGIN = 1_717_200_000.0
T = 0.0  # the scenario's origin: every planted workload is running or pending


@pytest.fixture(scope="module")
def cluster() -> SimulatedCluster:
    # the planted workloads alone: these tests read them back through the API; the
    # steady-state background's pods are checked in tests/unit/test_sim_kube.py
    return SimulatedCluster(default_scenario(nodes=8, steady=False))


def _serve(cluster: SimulatedCluster, installed: frozenset[str] = DEFAULT_INSTALLED) -> FakeKubeApi:
    api = FakeKubeApi(installed).start()
    api.store.load(
        namespaces_json(cluster),
        nodes_json(cluster, origin=ORIGIN),
        pods_json(cluster, T, origin=ORIGIN),
        quotas_json(cluster),
    )
    return api


@pytest.fixture
def api(cluster: SimulatedCluster) -> Iterator[FakeKubeApi]:
    server = _serve(cluster)
    yield server
    server.stop()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def inventory(api: FakeKubeApi, sleeps: list[float]) -> Iterator[KubeInventory]:
    inv = KubeInventory(api.url, sleep=sleeps.append, retry=RetryPolicy(attempts=3))
    yield inv
    inv.close()


def _pod(api: FakeKubeApi, namespace: str, name: str) -> dict[str, object]:
    return api.store.get(api.store.resource("pods"), namespace, name)


def test_nodes_and_pods_match_the_scenario(
    cluster: SimulatedCluster, inventory: KubeInventory
) -> None:
    """Every node with its 8 GPUs, pool, rack and rails; every pod on the simulator's node
    with the simulator's whole-GPU request."""
    snap = inventory.sync_once()
    assert [n.name for n in snap.nodes] == cluster.node_names
    for node in snap.nodes:
        spec = cluster.node(node.name)
        assert (node.allocatable_gpus, node.pool, node.rack) == (spec.gpus, spec.pool, spec.rack)
        assert len(node.ib_rails) == spec.ib_ports and node.cpu_milli == spec.cpu_milli
        assert node.gpu_model == "NVIDIA-H100-80GB-HBM3"
    alive = [p for p in cluster.pods if p.alive(T)]
    by_name = {(p.namespace, p.name): p for p in snap.pods}
    assert set(by_name) == {(p.namespace, p.name) for p in alive}
    for sim in alive:
        pod = by_name[(sim.namespace, sim.name)]
        assert pod.uid == sim.uid and pod.node == sim.node
        whole = sim.workload.gpus if sim.workload.gpu_fraction >= 1 else 0
        assert pod.gpu_request == whole
        assert pod.start_time == ORIGIN + sim.start
    on_node0 = sum(p.gpu_request for p in snap.pods if p.node == "gpu-node-00")
    assert on_node0 == 8


def test_fractional_inference_pods_get_their_fraction(
    cluster: SimulatedCluster, inventory: KubeInventory
) -> None:
    """The serving pods ask for no whole GPU; their gpu-fraction annotation is read."""
    snap = inventory.sync_once()
    serving = [p for p in snap.pods if p.namespace == "serving"]
    expected = {p.name: p.workload.gpu_fraction for p in cluster.pods if p.namespace == "serving"}
    assert len(serving) == 16
    assert {p.name: p.gpu_fraction for p in serving} == expected
    assert {p.gpu_request for p in serving} == {0}
    assert all(p.kind is WorkloadKind.INFERENCE and p.owner_kind == "ReplicaSet" for p in serving)
    assert sorted({p.gpu_fraction for p in serving}) == [0.25, 0.5]


def test_pending_job_is_pending_with_its_four_gpus(inventory: KubeInventory) -> None:
    """The scattered-GPU victim: Pending, unscheduled, Unschedulable, asking for 4 GPUs."""
    snap = inventory.sync_once()
    pending = [p for p in snap.pods if p.phase == "Pending"]
    assert [p.name for p in pending] == ["detector-train-worker-0"]
    job = pending[0]
    assert (job.node, job.gpu_request, job.pending_reason) == (None, 4, "Unschedulable")
    assert job.kind is WorkloadKind.TRAINING and job.project == "vision"


def test_notebooks_are_interactive_and_projects_resolve(
    cluster: SimulatedCluster, inventory: KubeInventory
) -> None:
    """Notebook pods (StatefulSet + notebook-name) are interactive; each pod's project is
    the scenario's; preemptible sweeps and namespaces come through."""
    snap = inventory.sync_once()
    research = [p for p in snap.pods if p.namespace == "research"]
    assert research and all(p.kind is WorkloadKind.INTERACTIVE for p in research)
    assert {p.owner_kind for p in research} == {"StatefulSet"}
    sims = {p.uid: p for p in cluster.pods}
    for pod in snap.pods:
        assert pod.project == sims[pod.uid].workload.project_name
        assert pod.kind is WorkloadKind(sims[pod.uid].workload.kind)
        assert pod.preemptible == sims[pod.uid].workload.preemptible
    assert any(p.preemptible for p in snap.pods)
    assert snap.namespaces == ("nlp", "research", "serving", "vision")


def test_watch_sees_added_modified_and_deleted_pods_without_relisting(
    api: FakeKubeApi, inventory: KubeInventory
) -> None:
    """After the first list, changes arrive by watch from the last resourceVersion: one
    list of pods in all, and each watch resumes where the last one ended."""
    pods = api.store.resource("pods")
    inventory.sync_once()
    new = copy.deepcopy(_pod(api, "research", "nb-user00-0"))
    new["metadata"] = {
        "name": "nb-late-0",
        "namespace": "research",
        "labels": {"notebook-name": "nb-late"},
    }
    api.store.create(new)
    api.store.delete(pods, "nlp", "llm-finetune-worker-0")
    snap = inventory.sync_once()
    names = {p.name for p in snap.pods}
    assert "nb-late-0" in names and "llm-finetune-worker-0" not in names
    assert api.count("GET", "/api/v1/pods", watch=False) == 1
    first_watch = [r for r in api.requests if r.path == "/api/v1/pods" and r.watch]
    assert len(first_watch) == 1

    api.store.patch(
        pods, "research", "nb-late-0", {"metadata": {"labels": {"gpuscope.io/protect": "true"}}}
    )
    snap = inventory.sync_once()
    assert next(p for p in snap.pods if p.name == "nb-late-0").protected
    watches = [r for r in api.requests if r.path == "/api/v1/pods" and r.watch]
    assert int(watches[1].query["resourceVersion"]) > int(watches[0].query["resourceVersion"])
    assert api.count("GET", "/api/v1/pods", watch=False) == 1
    assert snap.resource_versions["pods"] == str(api.store.rv)


def test_410_after_compaction_relists_and_state_is_right(
    api: FakeKubeApi, inventory: KubeInventory
) -> None:
    """Changes the inventory missed were compacted away: the watch gets 410 Gone, the
    inventory lists again, and the state matches the server's."""
    pods = api.store.resource("pods")
    inventory.sync_once()
    api.store.delete(pods, "research", "nb-user01-0")
    api.store.delete(pods, "research", "nb-user02-0")
    api.store.compact()
    snap = inventory.sync_once()
    assert api.count("GET", "/api/v1/pods", watch=False) == 2
    served, _ = api.store.list(pods, None)
    assert {p.uid for p in snap.pods} == {p["metadata"]["uid"] for p in served}
    assert not {"nb-user01-0", "nb-user02-0"} & {p.name for p in snap.pods}
    inventory.sync_once()  # back to watching from the new list's version
    assert api.count("GET", "/api/v1/pods", watch=False) == 2


def test_kueue_cluster_queues_are_read(cluster: SimulatedCluster, inventory: KubeInventory) -> None:
    """Each project's ClusterQueue gives its nominal quota and borrowing limit."""
    snap = inventory.sync_once()
    kueue = {q.project: q for q in snap.quotas if q.source == "kueue"}
    total = sum(n.gpus for n in cluster.scenario.nodes)
    assert set(kueue) == {p.name for p in cluster.scenario.projects}
    for project in cluster.scenario.projects:
        assert kueue[project.name].guaranteed_gpus == project.guaranteed_gpus
        assert kueue[project.name].borrowing_limit == total - project.guaranteed_gpus


def test_kai_queues_absent_are_skipped(api: FakeKubeApi, inventory: KubeInventory) -> None:
    """Without KAI's CRD the queues answer 404: skipped, no error, no KAI quotas."""
    snap = inventory.sync_once()
    assert api.count("GET", "/apis/scheduling.run.ai/v2/queues") == 1
    assert not [q for q in snap.quotas if q.source == "kai"]
    assert snap.pods and snap.nodes


def test_kai_queues_and_resource_quotas_are_read(cluster: SimulatedCluster) -> None:
    """Where KAI is installed its Queue's quota, overQuotaWeight and limit are read; a
    ResourceQuota on requests.nvidia.com/gpu is a namespace's cap."""
    api = _serve(cluster, DEFAULT_INSTALLED | {"scheduling.run.ai/v2"})
    try:
        api.store.create(
            {
                "apiVersion": "scheduling.run.ai/v2",
                "kind": "Queue",
                "metadata": {"name": "serving"},
                "spec": {"resources": {"gpu": {"quota": 12, "overQuotaWeight": 2, "limit": -1}}},
            }
        )
        api.store.create(
            {
                "kind": "ResourceQuota",
                "metadata": {"name": "gpus", "namespace": "research"},
                "spec": {"hard": {"requests.nvidia.com/gpu": "10", "pods": "50"}},
            }
        )
        inv = KubeInventory(api.url)
        snap = inv.sync_once()
        inv.close()
    finally:
        api.stop()
    kai = [q for q in snap.quotas if q.source == "kai"]
    assert [(q.project, q.guaranteed_gpus, q.over_quota_weight, q.limit) for q in kai] == [
        ("serving", 12.0, 2.0, None)
    ]
    rq = [q for q in snap.quotas if q.source == "resourcequota"]
    assert [(q.project, q.namespace, q.guaranteed_gpus, q.limit) for q in rq] == [
        ("research", "research", 10.0, 10.0)
    ]


def test_server_error_then_success_is_retried(
    api: FakeKubeApi, inventory: KubeInventory, sleeps: list[float]
) -> None:
    """A 500 on the node list is retried after a backoff sleep, and the sync succeeds."""
    api.fail_next(500, path="/api/v1/nodes")
    snap = inventory.sync_once()
    assert len(snap.nodes) == 8
    assert api.count("GET", "/api/v1/nodes") == 2
    assert len(sleeps) == 1 and sleeps[0] > 0


def test_client_error_is_not_retried(api: FakeKubeApi, inventory: KubeInventory) -> None:
    """A 403 is not something a retry fixes: one request, one InventoryError line."""
    api.fail_next(403, path="/api/v1/pods")
    with pytest.raises(InventoryError) as info:
        inventory.sync_once()
    assert info.value.status == 403
    assert api.count("GET", "/api/v1/pods") == 1
    assert "\n" not in str(info.value) and "403" in str(info.value)


def test_unreachable_server_gives_one_line_inventory_error() -> None:
    """Nothing listening: retried, then an InventoryError of one line naming the host."""
    sleeps: list[float] = []
    host = f"http://127.0.0.1:{free_port()}"
    inv = KubeInventory(host, sleep=sleeps.append, retry=RetryPolicy(attempts=3))
    with pytest.raises(InventoryError) as info:
        inv.sync_once()
    message = str(info.value)
    assert "\n" not in message and host in message and "refused" in message.lower()
    assert 0.25 in sleeps and 0.5 in sleeps  # backing off, not hammering
    inv.close()


def test_fake_keeps_the_semantics_actions_rely_on(api: FakeKubeApi) -> None:
    """Through the official client: field selector, 404, 409, PDB-blocked eviction 429,
    eviction 201 that deletes (gracefully), merge patch."""
    cfg = client.Configuration()
    cfg.host = api.url
    core = client.CoreV1Api(client.ApiClient(cfg))
    on_node = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-node-07")
    assert {p.spec.node_name for p in on_node.items} == {"gpu-node-07"}
    nbs = core.list_namespaced_pod(
        "research", label_selector="notebook-name in (nb-user00,nb-user02)"
    )
    assert sorted(p.metadata.name for p in nbs.items) == ["nb-user00-0", "nb-user02-0"]
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod("nope", "research")
    assert missing.value.status == 404
    with pytest.raises(client.ApiException) as taken:
        core.create_namespaced_pod(
            "research", client.V1Pod(metadata=client.V1ObjectMeta(name="nb-user00-0"))
        )
    assert taken.value.status == 409
    api.store.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "nb00", "namespace": "research"},
            "spec": {
                "minAvailable": 1,
                "selector": {"matchLabels": {"notebook-name": "nb-user00"}},
            },
        }
    )
    eviction = client.V1Eviction(
        metadata=client.V1ObjectMeta(name="nb-user00-0", namespace="research")
    )
    with pytest.raises(client.ApiException) as blocked:
        core.create_namespaced_pod_eviction("nb-user00-0", "research", eviction)
    assert blocked.value.status == 429
    eviction.metadata.name = "nb-user02-0"
    core.create_namespaced_pod_eviction("nb-user02-0", "research", eviction)
    # a bound pod is deleted gracefully: Terminating until its kubelet confirms
    assert _pod(api, "research", "nb-user02-0")["metadata"]["deletionTimestamp"]  # type: ignore[index]
    api.store.finish_terminating()
    with pytest.raises(ApiError):
        _pod(api, "research", "nb-user02-0")
    core.patch_namespaced_pod("nb-user01-0", "research", {"metadata": {"annotations": {"a": "b"}}})
    assert _pod(api, "research", "nb-user01-0")["metadata"]["annotations"] == {"a": "b"}  # type: ignore[index]


def test_from_environment_reads_a_kubeconfig(api: FakeKubeApi, tmp_path: Path) -> None:
    """A kubeconfig naming the server works; a missing one is one InventoryError line."""
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        f"""
apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "{api.url}"}}}}]
users: [{{name: me, user: {{token: t0ken}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: me}}}}]
current-context: fake
"""
    )
    inv = KubeInventory.from_environment(kubeconfig=str(kubeconfig))
    assert len(inv.sync_once().nodes) == 8
    inv.close()
    with pytest.raises(InventoryError) as info:
        KubeInventory.from_environment(kubeconfig=str(tmp_path / "missing"))
    assert "\n" not in str(info.value)

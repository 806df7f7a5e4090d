"""The default scenario's topology story, end to end through the fake Kubernetes API server:
the pending 2-node 16-GPU job is found (the cluster's free GPUs cover it, no leaf holds it),
the plan clears one leaf, and once its evictions are executed through the API the job fits
that leaf: bound there, no node's GPUs are over-committed."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from typing import Any

from gpuscope.actions.kube import ClusterClient
from gpuscope.analytics.domains.topology_inputs import topology_analysis
from gpuscope.analytics.placement.allocation_sources import records_from_kubectl
from gpuscope.core.kube_names import LEAF_LABEL
from gpuscope.core.kube_objects import ObjectSet
from gpuscope.core.settings import Settings
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.kube import nodes_json
from gpuscope.sim.kube_pods import pods_json
from gpuscope.sim.scenario import TOPOLOGY_STORY_GROUP
from tests.fakes.kube_api import FakeKubeApi

AT = datetime(2026, 1, 5, 12, tzinfo=UTC)
GROUP = f"kueue-pod-group:nlp/{TOPOLOGY_STORY_GROUP}"


def analyse(nodes: dict[str, Any], pods: dict[str, Any]) -> Any:
    settings = Settings()
    n, p = records_from_kubectl(nodes, pods, settings.workloads)
    return topology_analysis(n, p, ObjectSet(), at=AT, settings=settings)


def get(api: FakeKubeApi, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(api.url + path, timeout=10) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def test_planted_job_is_found_and_fits_after_the_plan_runs_in_the_fake_api() -> None:
    cluster = SimulatedCluster(default_scenario())
    origin = AT.timestamp()
    nodes, pods = (
        nodes_json(cluster, origin=origin),
        pods_json(cluster, cluster.scenario.live_offset, origin=origin),
    )
    before = analyse(nodes, pods)
    (finding,) = [f for f in before.findings if f.subject["pod_group"] == TOPOLOGY_STORY_GROUP]
    assert finding.kind == "topology_fragmentation"
    assert finding.evidence["level"] == LEAF_LABEL
    assert finding.evidence["cluster_free_gpus"] >= 16
    assert finding.evidence["best_domain_placeable_pods"] < 2
    (plan,) = before.summary["plans"]
    leaf = plan["domain"]
    leaf_nodes = {
        n["metadata"]["name"] for n in nodes["items"] if n["metadata"]["labels"][LEAF_LABEL] == leaf
    }
    assert plan["pod_group"] == GROUP and set(plan["nodes"]) <= leaf_nodes
    assert plan["evictions"], "the plan moves something out of the leaf"
    # what it moves: preemptible pods off the leaf's nodes, never onto them
    for m in plan["moves"]:
        assert m["from_node"] in leaf_nodes and m["to_node"] not in leaf_nodes

    uids = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["uid"]
            for p in pods["items"]}  # fmt: skip
    with FakeKubeApi() as api:
        api.store.load(nodes, pods)
        client = ClusterClient(api.url)
        try:
            for key in plan["evictions"]:
                ns, name = key.split("/", 1)
                client.evict_pod(ns, name, uids[(ns, name)], dry_run=False)
            api.store.finish_terminating()  # the kubelets confirm the stops
            # the planner's moves: the evicted pods re-created where it placed them
            for m in plan["moves"]:
                assert not m["to_node"], "no room elsewhere in the default scenario"
            after_nodes, after_pods = get(api, "/api/v1/nodes"), get(api, "/api/v1/pods")
        finally:
            client.close()
        after = analyse(after_nodes, after_pods)
        assert not [f for f in after.findings if f.subject["pod_group"] == TOPOLOGY_STORY_GROUP]
        domain = after.summary["levels"][LEAF_LABEL]["domains"][leaf]
        assert domain["largest_job_pods"]["8"] >= 2
        assert domain["whole_free_nodes"] >= 2

        # bind the job's pods to the plan's nodes, as the scheduler would: they fit
        pod_res = api.store.resource("pods")
        group_pods = sorted(
            p["metadata"]["name"]
            for p in after_pods["items"]
            if p["metadata"].get("labels", {}).get("kueue.x-k8s.io/pod-group-name")
            == TOPOLOGY_STORY_GROUP
        )
        for name, node in zip(group_pods, plan["nodes"], strict=True):
            api.store.patch(
                pod_res, "nlp", name, {"spec": {"nodeName": node}, "status": {"phase": "Running"}}
            )
        bound = get(api, "/api/v1/pods")
    used: dict[str, int] = {}
    for p in bound["items"]:
        node = p["spec"].get("nodeName")
        for c in p["spec"]["containers"]:
            gpus = int((c.get("resources", {}).get("requests") or {}).get("nvidia.com/gpu", 0))
            if node:
                used[node] = used.get(node, 0) + gpus
    for n in after_nodes["items"]:
        name = n["metadata"]["name"]
        assert used.get(name, 0) <= int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)), name
    assert all(used[n] == 8 for n in plan["nodes"])


def test_analyze_topology_on_a_database_reads_its_inventory(tmp_path: Any, capsys: Any) -> None:
    """`gpuscope analyze topology --db` reads the stored inventory's node labels and pods."""
    from gpuscope.cli.main import main
    from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
    from gpuscope.collector.storage.store import Store

    cluster = SimulatedCluster(default_scenario())
    origin = AT.timestamp()
    nodes, pods = (
        nodes_json(cluster, origin=origin),
        pods_json(cluster, cluster.scenario.live_offset, origin=origin),
    )
    infos = {n.name: n for n in map(node_from_json, nodes["items"])}
    pod_infos = [
        pod_from_json(p, node=infos.get(p["spec"].get("nodeName", ""))) for p in pods["items"]
    ]
    db = tmp_path / "inv.duckdb"
    with Store.open(db) as store:
        store.record_inventory(AT, nodes=list(infos.values()), pods=pod_infos)
    capsys.readouterr()
    argv = ["analyze", "topology", "--db", str(db), "--json", "--at", AT.isoformat()]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["summary"]["levels"]) == {LEAF_LABEL, "topology.gpuscope.io/rack"}
    assert len(out["summary"]["levels"][LEAF_LABEL]["domains"]) == 8
    assert [f["subject"]["pod_group"] for f in out["findings"]] == [TOPOLOGY_STORY_GROUP]

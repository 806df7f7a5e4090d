"""`gpuscope analyze consolidation` on the default scenario's kubectl files plans for the
pending 2-node 16-GPU pod group whole, inside one leaf; its evictions executed through the
fake Kubernetes API server, the group's pods bound to the planned nodes fit there (no node
over-committed) and the topology analysis no longer finds it blocked."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuscope.actions.kube import ClusterClient
from gpuscope.analytics.domains.topology_inputs import topology_analysis
from gpuscope.analytics.placement.allocation_sources import records_from_kubectl
from gpuscope.cli.main import main
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


def get(api: FakeKubeApi, path: str) -> dict[str, Any]:
    with urllib.request.urlopen(api.url + path, timeout=10) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def test_consolidation_plan_for_the_pod_group_runs_and_the_group_fits(
    tmp_path: Path, capsys: Any
) -> None:
    cluster = SimulatedCluster(default_scenario())
    origin = AT.timestamp()
    nodes = nodes_json(cluster, origin=origin)
    pods = pods_json(cluster, cluster.scenario.live_offset, origin=origin)
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    capsys.readouterr()
    argv = ["analyze", "consolidation", "--nodes", str(tmp_path / "nodes.json"),
            "--pods", str(tmp_path / "pods.json"), "--json", "--at", AT.isoformat()]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (group,) = [g for g in out["summary"]["pod_groups"] if g["pod_group"] == GROUP]
    assert group["planned"] and group["level"] == LEAF_LABEL
    leaf_of = {n["metadata"]["name"]: n["metadata"]["labels"][LEAF_LABEL] for n in nodes["items"]}
    assert {leaf_of[n] for n in group["nodes"]} == {group["domain"]}
    assert len(group["nodes"]) == 2
    # no pod of the group is a goal of its own any more
    assert not [f for f in out["findings"] if f["subject"]["goal"].startswith("nlp/gpt-16")]

    uids = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]["uid"]
            for p in pods["items"]}  # fmt: skip
    with FakeKubeApi() as api:
        api.store.load(nodes, pods)
        client = ClusterClient(api.url)
        try:
            for key in out["evictions"]:
                ns, name = key.split("/", 1)
                client.evict_pod(ns, name, uids[(ns, name)], dry_run=False)
            api.store.finish_terminating()
            assert not [m for m in out["moves"] if m["to_node"]], "nothing re-placed here"
            after_nodes, after_pods = get(api, "/api/v1/nodes"), get(api, "/api/v1/pods")
        finally:
            client.close()
        settings = Settings()
        n, p = records_from_kubectl(after_nodes, after_pods, settings.workloads)
        after = topology_analysis(n, p, ObjectSet(), at=AT, settings=settings)
        assert not [f for f in after.findings if f.subject["pod_group"] == TOPOLOGY_STORY_GROUP]

        pod_res = api.store.resource("pods")
        members = sorted(
            p["metadata"]["name"]
            for p in after_pods["items"]
            if p["metadata"].get("labels", {}).get("kueue.x-k8s.io/pod-group-name")
            == TOPOLOGY_STORY_GROUP
        )
        for name, node in zip(members, group["nodes"], strict=True):
            api.store.patch(
                pod_res, "nlp", name, {"spec": {"nodeName": node}, "status": {"phase": "Running"}}
            )
        bound = get(api, "/api/v1/pods")
    used: dict[str, int] = {}
    for pod in bound["items"]:
        node = pod["spec"].get("nodeName")
        for c in pod["spec"]["containers"]:
            gpus = int((c.get("resources", {}).get("requests") or {}).get("nvidia.com/gpu", 0))
            if node:
                used[node] = used.get(node, 0) + gpus
    for node_obj in after_nodes["items"]:
        name = node_obj["metadata"]["name"]
        cap = int(node_obj["status"]["allocatable"].get("nvidia.com/gpu", 0))
        assert used.get(name, 0) <= cap, name
    assert all(used[n] == 8 for n in group["nodes"])


def test_analyze_consolidation_on_a_database_plans_the_group(tmp_path: Path, capsys: Any) -> None:
    """`analyze consolidation --db` reads the stored inventory (node labels, pods) and plans
    the pending group inside one leaf, as from files."""
    from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
    from gpuscope.collector.storage.store import Store

    cluster = SimulatedCluster(default_scenario())
    origin = AT.timestamp()
    nodes = nodes_json(cluster, origin=origin)
    pods = pods_json(cluster, cluster.scenario.live_offset, origin=origin)
    infos = {n.name: n for n in map(node_from_json, nodes["items"])}
    pod_infos = [
        pod_from_json(p, node=infos.get(p["spec"].get("nodeName", ""))) for p in pods["items"]
    ]
    db = tmp_path / "inv.duckdb"
    with Store.open(db) as store:
        store.record_inventory(AT, nodes=list(infos.values()), pods=pod_infos)
    capsys.readouterr()
    argv = ["analyze", "consolidation", "--db", str(db), "--json", "--at", AT.isoformat()]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (group,) = [g for g in out["summary"]["pod_groups"] if g["pod_group"] == GROUP]
    leaf_of = {n.name: n.labels[LEAF_LABEL] for n in infos.values()}
    assert group["planned"] and {leaf_of[n] for n in group["nodes"]} == {group["domain"]}

"""Topology levels from the schedulers' objects and node labels, pod groups as the
schedulers define them, the measures on a hand-checked cluster, and the command's errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analytics.domains.topology import analyze_topology, job_shape, job_sizes
from gpuscope.analytics.domains.topology_groups import pod_groups
from gpuscope.analytics.domains.topology_levels import topology_of
from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.cli.main import main
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.kube_objects import objects_from_documents

AT = datetime(2026, 1, 1, tzinfo=UTC)


def node(name: str, gpus: int = 8, **labels: str) -> NodeInfo:
    return NodeInfo(name=name, allocatable_gpus=gpus, cpu_milli=64_000, labels=dict(labels))


def pod(name: str, node_name: str | None, gpus: int, **kw: Any) -> PodInfo:
    return PodInfo(namespace="team", name=name, uid=name, node=node_name,
                   phase="Running" if node_name else "Pending", start_time=None,
                   gpu_request=gpus, **kw)  # fmt: skip


def objects(*docs: dict[str, Any]) -> Any:
    return objects_from_documents([("test", d) for d in docs])


def test_kueue_topology_names_domains_by_path_and_scopes_to_its_flavor() -> None:
    """Kueue does not assume rack names unique across blocks: r1 in b1 and in b2 are two
    domains; only the nodes of the ResourceFlavor naming the Topology are in it."""
    nodes = [
        NodeInfo(
            name=f"n{i}",
            allocatable_gpus=8,
            labels={
                "cloud.provider.com/topology-block": b,
                "cloud.provider.com/topology-rack": r,
                "pool": pool,
            },
        )
        for i, (b, r, pool) in enumerate(
            [("b1", "r1", "tas"), ("b2", "r1", "tas"), ("b2", "r2", "tas"), ("b1", "r1", "other")]
        )
    ]
    objs = objects(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "dc"},
         "spec": {"levels": [{"nodeLabel": "cloud.provider.com/topology-block"},
                             {"nodeLabel": "cloud.provider.com/topology-rack"},
                             {"nodeLabel": "kubernetes.io/hostname"}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
         "metadata": {"name": "tas"}, "spec": {"nodeLabels": {"pool": "tas"}, "topologyName": "dc"}},
    )  # fmt: skip
    topo = topology_of(nodes, objs)
    assert [lv.key for lv in topo.levels] == [
        "cloud.provider.com/topology-block",
        "cloud.provider.com/topology-rack",
    ]
    assert topo.domains["cloud.provider.com/topology-rack"] == {
        "n0": "b1/r1", "n1": "b2/r1", "n2": "b2/r2"
    }  # fmt: skip
    assert topo.source == "kueue"


def test_volcano_hypernodes_make_tiers_with_every_selector() -> None:
    nodes = [node("node-0"), node("node-1"), node("node-2", rack="x"), node("gpu-9")]
    hn = [
        {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "s0"},
         "spec": {"tier": 1, "members": [
             {"type": "Node", "selector": {"exactMatch": {"name": "node-0"}}},
             {"type": "Node", "selector": {"regexMatch": {"pattern": "node-[1]"}}}]}},
        {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "s1"},
         "spec": {"tier": 1, "members": [
             {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "x"}}}}]}},
        {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "s2"},
         "spec": {"tier": 2, "members": [
             {"type": "HyperNode", "selector": {"exactMatch": {"name": "s0"}}},
             {"type": "HyperNode", "selector": {"exactMatch": {"name": "s1"}}}]}},
    ]  # fmt: skip
    topo = topology_of(nodes, objects(*hn))
    assert [lv.key for lv in topo.levels] == [
        "topology.volcano.sh/tier-2", "topology.volcano.sh/tier-1"
    ]  # fmt: skip
    assert topo.domains["topology.volcano.sh/tier-1"] == {
        "node-0": "s0", "node-1": "s0", "node-2": "s1"
    }  # fmt: skip
    assert set(topo.domains["topology.volcano.sh/tier-2"]) == {"node-0", "node-1", "node-2"}


def test_default_labels_cover_topograph_tiers_coarsest_first_and_skip_hostname() -> None:
    nodes = [
        NodeInfo(name="a", allocatable_gpus=8, labels={
            "fabric.topograph.run/tier-0": "leaf1", "fabric.topograph.run/tier-1": "spine1",
            "nvidia.com/gpu.clique": "uuid.1", "kubernetes.io/hostname": "a",
            "topology.k8s.aws/network-node-layer-1": "nn-1"}),
    ]  # fmt: skip
    keys = [lv.key for lv in topology_of(nodes).levels]
    assert keys == [
        "fabric.topograph.run/tier-1",
        "fabric.topograph.run/tier-0",
        "topology.k8s.aws/network-node-layer-1",
        "nvidia.com/gpu.clique",
    ]
    assert [lv.key for lv in topology_of(nodes, labels=["nvidia.com/gpu.clique"]).levels] == [
        "nvidia.com/gpu.clique"
    ]


def test_pod_groups_each_way_the_schedulers_define_them() -> None:
    pods = [
        pod("k0", None, 8, labels={"kueue.x-k8s.io/pod-group-name": "kg"},
            annotations={"kueue.x-k8s.io/pod-group-total-count": "4",
                         "kueue.x-k8s.io/podset-required-topology": "rack"}),
        pod("v0", "n1", 4, annotations={"scheduling.k8s.io/group-name": "vg"}),
        pod("a0", None, 8, annotations={"pod-group-name": "ag"}),
        pod("a1", None, 8, annotations={"pod-group-name": "ag"}),
        pod("j0", None, 2, labels={"jobset.sigs.k8s.io/jobset-name": "js"}),
        pod("j1", None, 2, labels={"jobset.sigs.k8s.io/jobset-name": "js"}),
        pod("b0", None, 1, owner_kind="Job", owner_name="bj"),
        pod("b1", "n2", 1, owner_kind="Job", owner_name="bj"),
        pod("solo", None, 8, owner_kind="Job", owner_name="one"),  # one pod: no group
        pod("cpu", None, 0, owner_kind="Job", owner_name="cpu"),
    ]  # fmt: skip
    objs = objects(
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
         "metadata": {"name": "vg", "namespace": "team"},
         "spec": {"minMember": 3, "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}},
        {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
         "metadata": {"name": "ag", "namespace": "team"},
         "spec": {"minMember": 2, "topologyConstraint": {"preferredTopologyLevel": "leaf"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
         "metadata": {"name": "wl", "namespace": "team"},
         "spec": {"podSets": [{"name": "workers", "count": 2, "topologyRequest": {"required": "rack"},
                               "template": {"spec": {"containers": [{"name": "c", "resources":
                                   {"requests": {"nvidia.com/gpu": "8"}}}]}}}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
         "metadata": {"name": "admitted", "namespace": "team"},
         "spec": {"podSets": [{"name": "w", "count": 2, "template": {"spec": {"containers": [
             {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
         "status": {"admission": {"clusterQueue": "cq"}}},
    )  # fmt: skip
    got = {g.key: g for g in pod_groups(pods, objs)}
    assert sorted(got) == [
        "job:team/bj", "jobset:team/js", "kai-podgroup:team/ag",
        "kueue-pod-group:team/kg", "kueue-workload:team/wl/workers", "volcano-podgroup:team/vg",
    ]  # fmt: skip
    assert (got["kueue-pod-group:team/kg"].pods, got["kueue-pod-group:team/kg"].required_level) == (
        4, "rack"
    )  # fmt: skip
    assert got["volcano-podgroup:team/vg"].required_level == "topology.volcano.sh/tier-1"
    assert got["volcano-podgroup:team/vg"].pods == 3
    assert not got["volcano-podgroup:team/vg"].pending
    assert got["kai-podgroup:team/ag"].preferred_level == "leaf"
    assert got["kueue-workload:team/wl/workers"].gpus == 16
    assert not got["job:team/bj"].pending


def test_measures_on_a_hand_checked_cluster() -> None:
    """Two leaves of two 8-GPU nodes; leaf a: 8 + 5 free, leaf b: 7 + 7 free. A 16-GPU job
    (2 x 8) fits leaf a only if both nodes are empty: it does not; neither does leaf b."""
    nodes = [node("a1", leaf="a"), node("a2", leaf="a"), node("b1", leaf="b"), node("b2", leaf="b")]
    pods = [pod("x", "a2", 3), pod("y", "b1", 1), pod("z", "b2", 1)]
    pods += [pod(f"t{i}", None, 8, labels={"kueue.x-k8s.io/pod-group-name": "t"},
                 annotations={"kueue.x-k8s.io/pod-group-total-count": "2",
                              "kueue.x-k8s.io/podset-required-topology": "leaf"})
             for i in range(2)]  # fmt: skip
    groups = pod_groups(pods)
    topo = topology_of(nodes, labels=["leaf"], extra_labels=["leaf"])
    a = analyze_topology(state_from_records(nodes, pods), topo, groups, at=AT)
    leaf = a.summary["levels"]["leaf"]
    assert leaf["domains"]["a"]["free_gpus"] == 13
    assert leaf["domains"]["a"]["whole_free_nodes"] == 1
    assert leaf["domains"]["a"]["largest_job_pods"] == {"1": 13, "2": 6, "4": 3, "8": 1}
    assert leaf["domains"]["b"]["largest_job_pods"]["8"] == 0
    assert leaf["slots"] == {"8": 1, "16": 0, "32": 0}
    # the mix is the one 2 x 8 job: no domain holds one, all 27 free GPUs are stranded
    assert leaf["fragmented_gpus"] == 27
    # 27 free GPUs cover 16, no leaf holds 2 x 8 (nor does the cluster: only a1 is empty)
    (f,) = a.findings
    assert f.evidence["cause"] == "fragmentation"
    assert f.evidence["cluster_free_gpus"] == 27


def test_finding_when_the_cluster_fits_but_no_domain_does() -> None:
    nodes = [node("a1", leaf="a"), node("a2", leaf="a"), node("b1", leaf="b"), node("b2", leaf="b")]
    pods = [pod("x", "a2", 1), pod("y", "b1", 1)]
    pods += [pod(f"t{i}", None, 8, labels={"kueue.x-k8s.io/pod-group-name": "t"},
                 annotations={"kueue.x-k8s.io/pod-group-total-count": "2",
                              "kueue.x-k8s.io/podset-required-topology": "leaf"})
             for i in range(2)]  # fmt: skip
    topo = topology_of(nodes, extra_labels=["leaf"])
    a = analyze_topology(state_from_records(nodes, pods), topo, pod_groups(pods), at=AT)
    (f,) = a.findings
    assert f.kind == "topology_fragmentation" and f.severity == "warning"
    assert f.evidence["cluster_placeable_pods"] == 2
    assert f.evidence["cause"] == "topology"
    assert f.evidence["best_domain_placeable_pods"] == 1
    assert f.recommendation is not None and f.recommendation["target"]["level"] == "leaf"


def test_job_sizes_and_shapes() -> None:
    assert job_sizes(100) == [8, 16, 32, 64]
    assert job_sizes(4) == [8]
    assert job_shape(16, 8) == (2, 8)
    assert job_shape(8, 4) == (2, 4)
    assert job_shape(8, 8) == (1, 8)


def test_command_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    good = tmp_path / "nodes.json"
    good.write_text(json.dumps({"kind": "List", "items": []}))
    cases = [
        ["analyze", "topology"],
        ["analyze", "topology", "--nodes", str(bad), "--pods", str(good)],
        ["analyze", "topology", "--nodes", str(good), "--pods", str(good), "--objects", str(bad)],
        ["analyze", "topology", "--nodes", str(tmp_path / "none"), "--pods", str(good)],
    ]
    for argv in cases:
        assert main(argv) != 0
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, (argv, err)


def test_a_group_without_a_level_is_judged_at_the_level_with_most_domains() -> None:
    """Racks of four nodes and leaves of two: a 2 x 8 job that names no level is judged
    under a leaf (the finest: most domains), whatever order the label families come in."""
    nodes = [node(f"n{i}", rack=f"r{i // 4}", leaf=f"l{i // 2}") for i in range(4)]
    pods = [pod("x", "n0", 1), pod("y", "n2", 1)]
    pods += [pod(f"t{i}", None, 8, owner_kind="Job", owner_name="t") for i in range(2)]
    for labels in (["rack", "leaf"], ["leaf", "rack"]):
        topo = topology_of(nodes, labels=labels)
        a = analyze_topology(state_from_records(nodes, pods), topo, pod_groups(pods), at=AT)
        (f,) = a.findings
        assert (f.evidence["level"], f.evidence["mode"], f.severity) == (
            "leaf", "unconstrained", "info"
        )  # fmt: skip
        assert f.evidence["holds_at_level"] == "rack"  # n1 and n3 are empty: rack r0 holds it


def test_a_plain_pod_groups_workload_is_not_counted_twice() -> None:
    """Kueue makes one Workload for a plain-pod group (owned by its pods, named after the
    group); with the gated pods present the group is one group, not two."""
    pods = [pod(f"k{i}", None, 8, labels={"kueue.x-k8s.io/pod-group-name": "kg"},
                annotations={"kueue.x-k8s.io/pod-group-total-count": "2"}) for i in range(2)]  # fmt: skip
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}  # fmt: skip
    objs = objects(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
         "metadata": {"name": "kg-by-owner", "namespace": "team",
                      "ownerReferences": [{"kind": "Pod", "name": "k0"}]},
         "spec": {"podSets": [{"name": "main", "count": 2, "template": template}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
         "metadata": {"name": "kg", "namespace": "team"},
         "spec": {"podSets": [{"name": "main", "count": 2, "template": template}]}},
    )  # fmt: skip
    assert [g.key for g in pod_groups(pods, objs)] == ["kueue-pod-group:team/kg"]

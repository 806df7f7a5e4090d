"""`gpuscope analyze consolidation` plans for pending pod groups whole: all the group's pods
at once, inside one domain of the level they require, on kubectl files (field for field as
kubectl prints them) and Kueue Workloads in --objects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuscope.cli.main import main
from tests.unit.kubectl_topology import LEAF, node, pod, write

AT = "2026-01-05T12:00:00Z"
NODES = [node("a1", "leaf-a"), node("a2", "leaf-a"), node("b1", "leaf-b"), node("b2", "leaf-b")]
#: a2 is held by an interactive pod (never moved); b1 by a preemptible 4-GPU batch pod. The
#: group of 2 x 8 GPUs fits a1 + b2 spread over the leaves with no eviction, but it requires
#: one leaf: only leaf b can be cleared, by moving the batch pod to a1.
PODS = [
    pod("notebook", 8, node_name="a2", kind="interactive", namespace="users"),
    pod("etl", 4, node_name="b1", job="etl", kind="batch"),
    *[pod(f"train-{i}", 8, group="train", group_count=2, required=LEAF) for i in range(2)],
]


def plan(argv: list[str], capsys: Any) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["analyze", "consolidation", *argv, "--json", "--at", AT]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_pending_group_is_planned_inside_one_leaf(tmp_path: Path, capsys: Any) -> None:
    out = plan(write(tmp_path, NODES, PODS), capsys)
    (group,) = out["summary"]["pod_groups"]
    assert group["pod_group"] == "kueue-pod-group:ml/train"
    assert (group["level"], group["mode"], group["domain"]) == (LEAF, "required", "leaf-b")
    assert group["planned"] and group["nodes"] == ["b1", "b2"]
    assert out["evictions"] == ["ml/etl"]
    (move,) = out["moves"]
    assert (move["from_node"], move["to_node"]) == ("b1", "a1")
    # the group's pods are one goal, not two goals of their own
    subjects = [f["subject"]["goal"] for f in out["findings"]]
    assert subjects == ["kueue-pod-group:ml/train"]
    target = out["findings"][0]["recommendation"]["target"]
    assert (target["count"], target["domain"], target["level"]) == (2, "leaf-b", LEAF)


def test_text_output_names_the_leaf_it_frees(tmp_path: Path, capsys: Any) -> None:
    capsys.readouterr()
    assert main(["analyze", "consolidation", *write(tmp_path, NODES, PODS), "--at", AT]) == 0
    text = capsys.readouterr().out
    assert (
        f"pod group kueue-pod-group:ml/train (2 x 8 GPUs, required) frees leaf-b ({LEAF})" in text
    )


def test_no_leaf_can_be_cleared_is_said_with_no_evictions(tmp_path: Path, capsys: Any) -> None:
    """The batch pod made interactive: no leaf can hold the group; the plan evicts nothing
    for it and says why."""
    pods = [p for p in PODS if p["metadata"]["name"] != "etl"]
    pods.append(pod("etl", 4, node_name="b1", kind="interactive", namespace="users"))
    out = plan(write(tmp_path, NODES, pods), capsys)
    (group,) = out["summary"]["pod_groups"]
    assert not group["planned"] and group["reason"]
    assert out["evictions"] == []
    assert {"goal": "kueue-pod-group:ml/train", "reason": group["reason"]} in out["unplaceable"]


def test_unconstrained_group_is_planned_over_the_cluster(tmp_path: Path, capsys: Any) -> None:
    """No level asked: a gang still, but its pods may spread (a1 + b2, nothing to move)."""
    pods = [p for p in PODS if not p["metadata"]["name"].startswith("train")]
    pods += [pod(f"train-{i}", 8, group="train", group_count=2) for i in range(2)]
    out = plan(write(tmp_path, NODES, pods), capsys)
    (group,) = out["summary"]["pod_groups"]
    assert (group["mode"], group["domain"], group["nodes"]) == ("unconstrained", "(cluster)",
                                                                 ["a1", "b2"])  # fmt: skip
    assert out["evictions"] == []


def test_kueue_workload_without_pods_is_a_goal(tmp_path: Path, capsys: Any) -> None:
    """A queued Job's Workload (no pods yet: Kueue keeps the Job suspended), required leaf."""
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "job-pretrain-3f1a2", "namespace": "ml",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "pretrain", "uid": "u1", "controller": True}]},
        "spec": {"queueName": "ml", "podSets": [{
            "name": "main", "count": 2,
            "topologyRequest": {"required": LEAF},
            "template": {"spec": {"containers": [{"name": "main", "image": "x",
                "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False",
                                   "reason": "Pending", "message": "waiting",
                                   "lastTransitionTime": AT}]},
    }  # fmt: skip
    (tmp_path / "wl.json").write_text(json.dumps(workload))
    pods = [p for p in PODS if not p["metadata"]["name"].startswith("train")]
    out = plan([*write(tmp_path, NODES, pods), "--objects", str(tmp_path / "wl.json")], capsys)
    (group,) = out["summary"]["pod_groups"]
    assert group["pod_group"] == "kueue-workload:ml/job-pretrain-3f1a2/main"
    assert (group["domain"], group["nodes"]) == ("leaf-b", ["b1", "b2"])


def test_two_groups_get_two_leaves(tmp_path: Path, capsys: Any) -> None:
    """Two pending 2 x 8 groups, four free-able nodes in two leaves: each its own leaf."""
    nodes = NODES
    pods = [pod("etl", 4, node_name="b1", job="etl", kind="batch"),
            pod("etl2", 2, node_name="a2", job="etl2", kind="batch")]  # fmt: skip
    for name in ("one", "two"):
        pods += [pod(f"{name}-{i}", 8, group=name, group_count=2, required=LEAF)
                 for i in range(2)]  # fmt: skip
    out = plan(write(tmp_path, nodes, pods), capsys)
    groups = {g["pod_group"]: g for g in out["summary"]["pod_groups"]}
    assert all(g["planned"] for g in groups.values()), groups
    leaves = {g["domain"] for g in groups.values()}
    assert leaves == {"leaf-a", "leaf-b"}
    for g in groups.values():
        assert len(g["nodes"]) == 2 and {n[0] for n in g["nodes"]} == {g["domain"][-1]}
    # both etl pods are evicted and nowhere to go: the four nodes hold the two groups
    assert sorted(out["evictions"]) == ["ml/etl", "ml/etl2"]


def test_preferred_leaf_none_can_hold_is_planned_over_the_cluster(
    tmp_path: Path, capsys: Any
) -> None:
    """Kueue's preferred mode climbs up to the cluster: no leaf can be cleared (both held
    by interactive pods), the group goes spread, a1 + b2, with no eviction."""
    pods = [pod("notebook", 8, node_name="a2", kind="interactive", namespace="users"),
            pod("nb2", 4, node_name="b1", kind="interactive", namespace="users")]  # fmt: skip
    pods += [pod(f"train-{i}", 8, group="train", group_count=2, preferred=LEAF) for i in range(2)]
    out = plan(write(tmp_path, NODES, pods), capsys)
    (group,) = out["summary"]["pod_groups"]
    assert (group["mode"], group["domain"], group["nodes"]) == ("preferred", "(cluster)",
                                                                 ["a1", "b2"])  # fmt: skip
    # required instead: it waits, and the plan says why
    pods = pods[:2] + [pod(f"train-{i}", 8, group="train", group_count=2, required=LEAF)
                       for i in range(2)]  # fmt: skip
    out = plan(write(tmp_path, NODES, pods), capsys)
    (group,) = out["summary"]["pod_groups"]
    assert not group["planned"]


def test_required_level_no_node_carries_is_unplaceable(tmp_path: Path, capsys: Any) -> None:
    pods = [p for p in PODS if not p["metadata"]["name"].startswith("train")]
    pods += [pod(f"train-{i}", 8, group="train", group_count=2, required="example.com/block")
             for i in range(2)]  # fmt: skip
    out = plan(write(tmp_path, NODES, pods), capsys)
    (group,) = out["summary"]["pod_groups"]
    assert not group["planned"]
    assert group["reason"] == "no node is in a domain of example.com/block"
    assert out["evictions"] == []


def test_text_output_of_several_analyses_with_topology_counts() -> None:
    """The topology summary's `pod_groups` is a count: the text rendering of several
    analyses (the demo prints consolidation and topology together) must not read it as
    consolidation's list (seen: TypeError 'int' object is not iterable)."""
    from gpuscope.analytics.base import Analysis
    from gpuscope.analytics.runner import render_text

    text = render_text(
        {
            "topology": Analysis(kinds=("topology_fragmentation",), findings=[],
                                 summary={"pod_groups": 2}),
            "consolidation": Analysis(kinds=("consolidation",), findings=[], summary={
                "pod_groups": [{"pod_group": "job:ml/x", "pods": 2, "gpus_per_pod": 8,
                                "mode": "required", "planned": False, "reason": "no room",
                                "domain": "", "level": LEAF, "nodes": []}]}),
        }
    )  # fmt: skip
    assert "topology: pod_groups=2" in text
    assert "pod group job:ml/x (2 x 8 GPUs, required) no plan: no room" in text

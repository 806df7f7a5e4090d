"""`gpuscope act`'s consolidation carries out a pending pod group's plan whole.

Seen in the demo (issue 32): the pack policy planned the two pending pods of the 16-GPU
group `nlp/gpt-16` (which must stay inside one leaf switch) as two single-pod goals, and
reserved nodes for them in different leaves. Then (issue 37) act left groups out. Now a
group is planned whole inside one domain (consolidation/gangs.py) and its steps reserve
that domain's nodes for every member, while single pods are planned as before elsewhere.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpuscope.actions.policy import parse_policies
from gpuscope.actions.runner import _consolidation_steps
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.core.settings import load_settings
from tests.unit.kubectl_topology import LEAF, node, pod

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def test_a_pending_pod_group_is_planned_whole_inside_one_leaf_single_pods_still_are() -> None:
    nodes = [node("a1", "leaf-a"), node("a2", "leaf-a"), node("b1", "leaf-b"), node("b2", "leaf-b")]
    running = [
        pod(f"small-{n}", 4, node_name=n, job=f"small-{n}", kind="batch")
        for n in ("a1", "a2", "b1", "b2")
    ]
    pending_group = [
        pod(f"train-{i}", 8, group="train", group_count=2, required=LEAF) for i in range(2)
    ]
    pending_single = [pod("solo-0", 8, job="solo")]
    node_records = [node_from_json(n) for n in nodes]
    by_name = {n.name: n for n in node_records}
    pods = [
        pod_from_json(p, node=by_name.get(p["spec"].get("nodeName", "")))
        for p in [*running, *pending_group, *pending_single]
    ]
    [pack] = parse_policies({"policies": [{"name": "pack", "type": "consolidation"}]})
    steps, notes = _consolidation_steps(pack, node_records, pods, {}, load_settings(env={}), NOW)
    group = [s for s in steps if s.members]
    leaf_of = {"a1": "a", "a2": "a", "b1": "b", "b2": "b"}
    reserved = sorted(s.node for s in group if s.action == "reserve")
    assert len(reserved) == 2 and len({leaf_of[n] for n in reserved}) == 1, group
    assert sorted(s.pod for s in group if s.action == "tolerate") == ["train-0", "train-1"]
    assert sorted(s.node for s in group if s.action == "evict") == reserved
    assert {s.goal for s in group} == {"kueue-pod-group:ml/train"}
    # the single 8-GPU pod is planned as before, on a node of the other leaf
    single = [s for s in steps if not s.members]
    assert {s.pod for s in single if s.action == "tolerate"} == {"solo-0"}
    assert {s.node for s in single}.isdisjoint(reserved)
    assert not [n for n in notes if "pod group" in n], notes

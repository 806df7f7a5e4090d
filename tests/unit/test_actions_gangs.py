"""`gpuscope act`'s consolidation leaves pending pod groups to `analyze consolidation`.

Seen in the demo: the pack policy planned the two pending pods of the 16-GPU group
`nlp/gpt-16` (which must stay inside one leaf switch) as two single-pod goals, and reserved
nodes for them in different leaves, evicting pods to free room the group could never use.
A group starts whole inside one domain or not at all; the executor does not carry out such
plans yet, so act plans no step for its pods and says why, while single pods are planned
as before.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpuscope.actions.policy import parse_policies
from gpuscope.actions.runner import _consolidation_steps
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.core.settings import load_settings
from tests.unit.kubectl_topology import LEAF, node, pod

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def test_a_pending_pod_group_gets_no_steps_and_a_note_single_pods_still_do() -> None:
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
    touched = {s.pod for s in steps if s.action == "tolerate"}
    assert touched == {"solo-0"}, steps  # the single 8-GPU pod is planned as before
    assert not any("train" in s.goal for s in steps)
    [note] = [n for n in notes if "pod group" in n]
    assert "train" in note and "2 pods" in note and "analyze consolidation" in note

"""Issue 37, "A PDB's budget is not spent across a plan": the Eviction API's
``checkAndDecrement`` grants as many evictions under a PodDisruptionBudget as its
``status.disruptionsAllowed`` and answers 429 to the next, so a plan never evicts more pods
under one budget than that, wherever they run. Each case is kubectl JSON fed to
``gpuscope analyze consolidation --nodes --pods --objects`` (run_on_snapshot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpuscope.analytics.runner import run_on_snapshot
from gpuscope.core.kube_objects import objects_from_documents
from gpuscope.core.settings import Settings
from tests.unit.test_planner_fidelity import AT, node, pod


def budget(name: str, app: str, allowed: int, *, healthy: int = 2) -> dict[str, Any]:
    """A PodDisruptionBudget as ``kubectl get pdb -A -o json`` shows it, its controller
    caught up."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "team", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": allowed},
        "status": {
            "observedGeneration": 1,
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": healthy - allowed,
            "expectedPods": healthy,
        },
    }


def plan(
    tmp_path: Path,
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    budgets: list[dict[str, Any]],
) -> dict[str, Any]:
    n, p = tmp_path / "nodes.json", tmp_path / "pods.json"
    n.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    p.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    objects = objects_from_documents([("pdb.json", {"kind": "List", "items": budgets})])
    return run_on_snapshot(n, p, AT, Settings(), "consolidation", objects=objects).summary


def test_the_issues_minimal_case_evicts_no_more_than_the_budget_allows(tmp_path: Path) -> None:
    """One 8-GPU node runs web-a and web-b (4 GPUs each, preemptible) under a budget that
    allows one disruption; an 8-GPU job is pending. Evicting both would be one grant and
    one 429: the plan meets nothing and evicts nothing, and says why."""
    nodes = [node("n1", gpus=8)]
    pods = [
        pod("web-a", "n1", gpus=4, labels={"app": "web"}),
        pod("web-b", "n1", gpus=4, labels={"app": "web"}),
        pod("job", None, gpus=8),
    ]
    out = plan(tmp_path, nodes, pods, [budget("web", "web", 1)])
    assert out["goals_met"] == 0
    assert out["evictions"] == []
    [why] = out["unplaceable"]
    assert why["goal"] == "team/job" and "PodDisruptionBudget" in why["reason"], why
    # with two disruptions allowed both may go
    out = plan(tmp_path, nodes, pods, [budget("web", "web", 2)])
    assert out["goals_met"] == 1
    assert out["evictions"] == ["team/web-a", "team/web-b"]
    assert out["pdb_spent"] == {
        "team/web": {"allowed": 2, "planned": 2, "pods": ["team/web-a", "team/web-b"]}
    }


def test_a_budget_is_spent_across_nodes_and_goals(tmp_path: Path) -> None:
    """Two 4-GPU nodes each run one 4-GPU pod of one budget allowing one disruption; two
    4-GPU jobs are pending. Each job alone needs one eviction, but the budget holds one in
    all: one job is met, one eviction, and the second job waits."""
    nodes = [node("n1", gpus=4), node("n2", gpus=4)]
    pods = [
        pod("web-a", "n1", gpus=4, labels={"app": "web"}),
        pod("web-b", "n2", gpus=4, labels={"app": "web"}),
        pod("job-1", None, gpus=4),
        pod("job-2", None, gpus=4),
    ]
    out = plan(tmp_path, nodes, pods, [budget("web", "web", 1)])
    assert out["goals_met"] == 1
    assert len(out["evictions"]) == 1
    assert out["pdb_spent"]["team/web"]["planned"] == 1


def test_the_planner_evicts_an_unbudgeted_pod_rather_than_over_spend(tmp_path: Path) -> None:
    """Where another node can be freed by evicting a pod nobody protects, that is the plan:
    n1 holds two pods of a one-disruption budget, n2 two unprotected ones (which cost more
    GPU-hours); the 8-GPU job goes to n2."""
    nodes = [node("n1", gpus=8), node("n2", gpus=8)]
    pods = [
        pod("web-a", "n1", gpus=4, labels={"app": "web"}),
        pod("web-b", "n1", gpus=4, labels={"app": "web"}),
        pod("x-a", "n2", gpus=4),
        pod("x-b", "n2", gpus=4),
        pod("job", None, gpus=8),
    ]
    out = plan(tmp_path, nodes, pods, [budget("web", "web", 1)])
    assert out["goals_met"] == 1
    assert out["evictions"] == ["team/x-a", "team/x-b"]
    assert out["pdb_spent"] == {}


def test_act_plans_within_the_budget_too() -> None:
    """``gpuscope act`` plans with the same spend: for the minimal case no step is planned
    (the second eviction would be a 429), and the note says why."""
    from gpuscope.actions.policy import parse_policies
    from gpuscope.actions.runner import _consolidation_steps
    from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
    from gpuscope.collector.cluster.pdb_records import budget_from_json
    from gpuscope.core.settings import load_settings

    nodes = [node_from_json(node("n1", gpus=8))]
    pods = [
        pod_from_json(p, node=nodes[0] if p["spec"].get("nodeName") else None)
        for p in (
            pod("web-a", "n1", gpus=4, labels={"app": "web"}),
            pod("web-b", "n1", gpus=4, labels={"app": "web"}),
            pod("job", None, gpus=8),
        )
    ]
    [pack] = parse_policies({"policies": [{"name": "pack", "type": "consolidation"}]})
    settings = load_settings(env={})
    for allowed, evicted in ((1, []), (2, ["web-a", "web-b"])):
        budgets = [budget_from_json(budget("web", "web", allowed))]
        steps, notes = _consolidation_steps(pack, nodes, pods, {}, settings, AT, budgets)
        assert sorted(s.pod for s in steps if s.action == "evict") == evicted, (steps, notes)
        if not evicted:
            assert any("PodDisruptionBudget" in n for n in notes), notes

"""The planner with PodDisruptionBudgets against a reference written from Kubernetes' own
source, on random kubectl states (test_consolidation_checked.py's instances: GPU-model pins,
selectors, taints, MIG, CPU-only pods) with random budgets over the running pods.

The reference shares no code with gpuscope:

- the budgets' status is what the disruption controller
  (``pkg/controller/disruption/disruption.go``, ``getExpectedPodCount``) writes:
  ``maxUnavailable`` and a percentage ``minAvailable`` count the expected pods from the
  controllers' scale (here each StatefulSet's ``replicas``), an integer ``minAvailable``
  from the pods selected; percentages rounded up; ``disruptionsAllowed`` is the healthy
  (Running, Ready) pods less the desired ones, at least 0;
- the Eviction API (``pkg/registry/core/pod/storage/eviction.go``) refuses a pod two
  budgets select, a pod whose budget's status lags its generation, and otherwise grants
  ``disruptionsAllowed`` evictions under a budget (``checkAndDecrement``) and 429 after;
- the ILP of test_consolidation_checked.py, with one row per budget (its pods' evictions
  at most ``disruptionsAllowed``) and the refused pods kept in place.

The product is run as ``analyze consolidation --nodes --pods --objects pdbs.json``
(run_on_snapshot). Each plan must be feasible, spend no budget beyond what the Eviction API
grants, meet as many goals as the reference's optimum and need no more evictions (10 % of
a small optimum is the optimum itself). 50 instances of the same generator also go
through the collector's store (nodes, pods and budgets as the inventory records them) and
``analyze consolidation --db`` (run_on_store), which must plan what the files plan.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.runner import run_on_snapshot, run_on_store
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.collector.cluster.pdb_records import budget_from_json, budget_record
from gpuscope.collector.storage.store import Store
from gpuscope.core.kube_objects import objects_from_documents
from gpuscope.core.settings import Settings
from tests.unit.test_consolidation_checked import (
    AT,
    GPU,
    MODEL_LABEL,
    _pod,
    check_plan,
    exact,
    expression_holds,
    instances,
    read_node,
    read_pod,
)

APPS = ("web", "db")


def _percent(value: int | str, of: int) -> int:
    """An IntOrString scaled as the controller scales it (percentages rounded up)."""
    if isinstance(value, str):
        return -(-int(value.rstrip("%")) * of // 100)
    return value


def selected(pdb: dict[str, Any], labels: dict[str, str]) -> bool:
    selector = pdb["spec"]["selector"]
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(expression_holds(e, labels) for e in selector.get("matchExpressions") or [])


def controller_status(
    pdb: dict[str, Any], pods: list[dict[str, Any]], replicas: dict[str, int]
) -> dict[str, Any]:
    """The status the disruption controller writes for ``pdb`` (module docstring)."""
    spec = pdb["spec"]
    mine = [p for p in pods if selected(pdb, p["metadata"].get("labels") or {})]
    healthy = sum(1 for p in mine if p["status"]["phase"] == "Running")
    owners = {p["metadata"]["ownerReferences"][0]["name"] for p in mine}
    scale = sum(replicas[o] for o in owners)
    if "maxUnavailable" in spec:
        expected = scale
        desired = max(0, expected - _percent(spec["maxUnavailable"], expected))
    elif isinstance(spec["minAvailable"], int):
        expected, desired = len(mine), spec["minAvailable"]
    else:
        expected = scale
        desired = _percent(spec["minAvailable"], expected)
    return {
        "observedGeneration": 1,
        "disruptionsAllowed": max(0, healthy - desired),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }


@st.composite
def crowded(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Full GPU nodes of preemptible pods and pending jobs that need evictions: where the
    budgets decide the plan."""
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    serial = iter(range(10_000))
    for i in range(draw(st.integers(2, 4))):
        name = f"c{i}"
        alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"}
        labels = {"kubernetes.io/hostname": name, MODEL_LABEL: "H100"}
        nodes.append(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
             "spec": {}, "status": {"allocatable": alloc, "capacity": alloc,
                                    "conditions": [{"type": "Ready", "status": "True"}]}}
        )  # fmt: skip
        left = 8
        while left:
            size = min(left, draw(st.sampled_from((2, 4, 4))))
            left -= size
            movable = draw(st.integers(0, 4)) > 0
            want = {"cpu": 4000, "mem": 16, GPU: size}
            pods.append(_pod(f"r{next(serial)}", name, want, movable=movable, tolerate=False))
    for _ in range(draw(st.integers(1, 3))):
        want = {"cpu": 4000, "mem": 16, GPU: draw(st.sampled_from((4, 8, 8)))}
        pods.append(_pod(f"job{next(serial)}", None, want, movable=True, tolerate=False))
    return nodes, pods


#: Built once: a strategy made inside a draw is a new object each time, which hypothesis
#: validates and works out the properties of again; so is ``sampled_from`` of a list (a
#: tuple is hashable, so hypothesis hands back the strategy it built before). Drawing the
#: 500 cases took 9.5 s of CPU so and 6.4 s now, the same cases (their JSON hashed alike);
#: this module 27.1 -> 23.3 s, test_consolidation_checked's 5.1 -> 4.2 s (issue 39).
CLUSTERS = st.one_of(instances(), crowded())
RULES = st.one_of(
    st.builds(lambda n: {"minAvailable": n}, st.integers(0, 3)),
    st.builds(lambda n: {"minAvailable": f"{n}%"}, st.sampled_from((25, 50, 75))),
    st.builds(lambda n: {"maxUnavailable": n}, st.integers(1, 2)),
    st.builds(lambda n: {"maxUnavailable": f"{n}%"}, st.sampled_from((25, 50))),
)


@st.composite
def with_budgets(
    draw: st.DrawFn,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    nodes, pods = draw(CLUSTERS)
    pods = copy.deepcopy(pods)
    replicas: dict[str, int] = {}
    for p in pods:
        if p["spec"].get("nodeName") is None:
            continue
        app = draw(st.sampled_from((*APPS, *APPS, None)))
        if app is None:
            continue
        p["metadata"]["labels"]["app"] = app
        p["metadata"]["ownerReferences"] = [
            {"kind": "StatefulSet", "name": app, "controller": True, "apiVersion": "apps/v1"}
        ]
        p["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        replicas[app] = replicas.get(app, 0) + 1
    for app in replicas:  # a replica the controller wants that is not running
        replicas[app] += draw(st.integers(0, 1))
    budgets = []
    for i in range(draw(st.integers(1, 2))):
        apps = draw(st.lists(st.sampled_from(APPS), min_size=1, max_size=2, unique=True))
        if len(apps) == 1 and draw(st.booleans()):
            selector: dict[str, Any] = {"matchLabels": {"app": apps[0]}}
        else:
            selector = {"matchExpressions": [{"key": "app", "operator": "In", "values": apps}]}
        rule = draw(RULES)
        stale = draw(st.integers(0, 9)) == 0
        pdb: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": f"pdb{i}", "namespace": "team", "generation": 2 if stale else 1},
            "spec": {"selector": selector, **rule},
        }
        pdb["status"] = controller_status(
            pdb, pods, {**replicas, **{a: 0 for a in APPS if a not in replicas}}
        )
        budgets.append(pdb)
    return nodes, pods, budgets


def eviction_rules(
    pods: list[dict[str, Any]], budgets: list[dict[str, Any]]
) -> tuple[set[str], list[tuple[list[str], int]]]:
    """The Eviction API's answer per running pod: the pods it refuses outright (two budgets,
    a status behind its generation) and, per budget, its pods and the evictions granted."""
    refused: set[str] = set()
    spend: dict[str, list[str]] = {}
    for p in pods:
        if p["status"]["phase"] != "Running":
            continue
        key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        mine = [b for b in budgets if selected(b, p["metadata"].get("labels") or {})]
        if len(mine) > 1:
            refused.add(key)
        elif mine:
            b = mine[0]
            if b["status"]["observedGeneration"] < b["metadata"]["generation"]:
                refused.add(key)
            else:
                spend.setdefault(b["metadata"]["name"], []).append(key)
    allowed = {b["metadata"]["name"]: b["status"]["disruptionsAllowed"] for b in budgets}
    return refused, [(members, allowed[name]) for name, members in spend.items()]


def plan_of(
    tmp: Path, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], budgets: list[Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    n, p = tmp / "nodes.json", tmp / "pods.json"
    n.write_text(json.dumps({"kind": "List", "items": nodes}))
    p.write_text(json.dumps({"kind": "List", "items": pods}))
    objects = objects_from_documents([("pdbs.json", {"kind": "List", "items": budgets})])
    result = run_on_snapshot(n, p, AT, Settings(), "consolidation", objects=objects)
    targets: dict[str, str] = {}
    for f in result.findings:
        assert f.recommendation is not None
        [where] = f.recommendation["target"]["nodes"]
        targets[f.subject["goal"]] = where
    return result.summary, targets


def plan_from_db(
    tmp: Path, nodes: list[dict[str, Any]], pods: list[dict[str, Any]], budgets: list[Any]
) -> dict[str, Any]:
    """The same snapshot written through the store as one inventory, planned from it."""
    with Store.open(tmp / "inventory.duckdb") as store:
        store.record_inventory(
            AT,
            nodes=[node_from_json(n) for n in nodes],
            pods=[pod_from_json(p) for p in pods],
            pdbs=[budget_record(budget_from_json(b)) for b in budgets],
        )
        (analysis,) = run_on_store(store, AT, Settings(), ["consolidation"], persist=False).values()
    return analysis.summary


#: Random states checked (issue 37: 500).
EXAMPLES = 500

SEEN: dict[str, int] = {"instances": 0, "budget_binds": 0, "budget_spent_whole": 0}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=with_budgets())
def test_plans_spend_each_budget_within_what_the_eviction_api_grants(
    case: Any, tmp_path_factory: Any
) -> None:
    nodes_json, pods_json, budgets = case
    tmp = tmp_path_factory.mktemp("pdb")
    nodes = {n["metadata"]["name"]: read_node(n) for n in nodes_json}
    pods = [read_pod(p) for p in pods_json]
    refused, spend = eviction_rules(pods_json, budgets)
    for p in pods:
        if p.key in refused:
            p.movable = False
    summary, targets = plan_of(tmp, nodes_json, pods_json, budgets)
    check_plan(nodes, pods, summary, targets)
    evicted = set(summary["evictions"])
    for members, allowed in spend:
        assert len(evicted & set(members)) <= allowed, (members, allowed, summary["evictions"])
    best_met, fewest, requeued = exact(nodes, pods, spend)
    assert summary["goals_met"] == len(targets)
    assert summary["goals_met"] == best_met, (summary, best_met, fewest)
    assert summary["evictions_count"] <= 1.1 * fewest, (summary["evictions"], fewest)
    if summary["evictions_count"] == fewest:
        sent_back = sum(1 for m in summary["moves"] if not m["to_node"])
        assert sent_back <= requeued, (summary["moves"], requeued)
    SEEN["instances"] += 1
    # the budgets changed the optimum: without them more goals, or fewer evictions
    unbounded = exact(nodes, [p for p in pods])[:2] if spend else (best_met, fewest)
    SEEN["budget_binds"] += unbounded != (best_met, fewest)
    SEEN["budget_spent_whole"] += any(
        allowed and len(evicted & set(m)) == allowed for m, allowed in spend
    )


def test_zz_the_budgets_mattered() -> None:
    """Guards against vacuity: in many instances (10 %) the budgets changed the optimum, and
    in some (5 %) the plan spent a budget whole (seen: 60 and 43 of 500)."""
    if SEEN["instances"]:
        print(SEEN)
        assert SEEN["budget_binds"] >= SEEN["instances"] // 10
        assert SEEN["budget_spent_whole"] >= SEEN["instances"] // 20


@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=with_budgets())
def test_the_stored_inventory_plans_what_the_files_plan(case: Any, tmp_path_factory: Any) -> None:
    """``--db``: the goals met and the evictions (so the budgets spent) are the files'."""
    nodes_json, pods_json, budgets = case
    tmp = tmp_path_factory.mktemp("pdbdb")
    summary, _ = plan_of(tmp, nodes_json, pods_json, budgets)
    stored = plan_from_db(tmp, nodes_json, pods_json, budgets)
    assert (stored["goals_met"], sorted(stored["evictions"])) == (
        summary["goals_met"],
        sorted(summary["evictions"]),
    )
    assert stored["pdb_blocked"] == summary["pdb_blocked"]

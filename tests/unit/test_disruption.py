"""gpuscope/collector/cluster/pdb_records.py (re-exported by gpuscope/actions/disruption.py) against the fake API server's eviction rules
(tests/fakes/kube_rules.py, written from kube-apiserver's eviction handler and sharing no
code with the product): on random pods and budgets, a pod is held by the planner exactly
when the fake Eviction API would refuse it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.actions.disruption import blocked_by_budgets, budget_from_json
from gpuscope.collector.cluster.inventory_records import pod_from_json
from tests.fakes import kube_rules
from tests.fakes.kube_store import KubeStore

APPS = ["a", "b", "c"]


def pod(
    name: str, app: str, phase: str, terminating: bool, ready: bool | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"u-{name}"}
    meta["labels"] = {"app": app}
    if terminating:
        meta["deletionTimestamp"] = "2026-03-02T10:00:00Z"
    return {
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": phase}
        | ({} if ready is None else {"conditions": [{"type": "Ready", "status": str(ready)}]}),
    }


pods_st = st.lists(
    st.tuples(
        st.sampled_from(APPS),
        st.sampled_from(["Running", "Running", "Pending", "Succeeded"]),
        st.booleans(),
        st.sampled_from([None, True, False]),
    ),
    min_size=1,
    max_size=6,
)
selector_st = st.one_of(
    st.just(None),  # absent: selects no pod
    st.just({}),  # policy/v1: every pod of the namespace
    st.builds(lambda a: {"matchLabels": {"app": a}}, st.sampled_from(APPS)),
    st.builds(
        lambda vs: {"matchExpressions": [{"key": "app", "operator": "In", "values": vs}]},
        st.lists(st.sampled_from(APPS), min_size=1, max_size=2, unique=True),
    ),
)
budget_st = st.tuples(
    selector_st,
    st.one_of(
        st.builds(lambda n: {"minAvailable": n}, st.integers(0, 3)),
        st.builds(lambda n: {"maxUnavailable": n}, st.integers(0, 2)),
        st.builds(lambda n: {"minAvailable": f"{n}%"}, st.sampled_from([0, 50, 100])),
    ),
    st.sampled_from([None, "IfHealthyBudget", "AlwaysAllow"]),
)


@settings(max_examples=150, deadline=None)
@given(pods_st, st.lists(budget_st, max_size=3))
def test_held_exactly_when_the_eviction_api_refuses(
    pod_specs: list[tuple[str, str, bool, bool | None]],
    budget_specs: list[tuple[dict[str, Any] | None, Any, str | None]],
) -> None:
    store = KubeStore()
    objs = [pod(f"p{i}", *spec) for i, spec in enumerate(pod_specs)]
    pdbs = [
        {
            "kind": "PodDisruptionBudget",
            "apiVersion": "policy/v1",
            "metadata": {"name": f"b{i}", "namespace": "ml"},
            "spec": ({} if sel is None else {"selector": sel})
            | count
            | ({} if policy is None else {"unhealthyPodEvictionPolicy": policy}),
        }
        for i, (sel, count, policy) in enumerate(budget_specs)
    ]
    store.load(*objs, *pdbs)
    pdb_res = store.resource("poddisruptionbudgets")
    served = [kube_rules.with_pdb_status(store, p) for p in store.list(pdb_res, "ml")[0]]
    held = blocked_by_budgets(
        [budget_from_json(p) for p in served], [pod_from_json(o) for o in objs]
    )
    pod_res = store.resource("pods")
    for o in objs:
        live = store.get(pod_res, "ml", o["metadata"]["name"])
        phase = o["status"]["phase"]
        asks = phase == "Running" and not o["metadata"].get("deletionTimestamp")
        refused = asks and kube_rules.disruption_blocker(store, live) is not None
        assert (f"ml/{o['metadata']['name']}" in held) == refused, (o, served, held)


def test_a_budget_behind_its_generation_holds_its_pods() -> None:
    """The API server refuses evictions while the controller has not seen the spec."""
    obj = {
        "metadata": {"name": "b", "namespace": "ml", "generation": 3},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, "maxUnavailable": 5},
        "status": {"observedGeneration": 2, "disruptionsAllowed": 4},
    }
    held = blocked_by_budgets(
        [budget_from_json(obj)], [pod_from_json(pod("p", "a", "Running", False))]
    )
    assert "still being processed" in held["ml/p"] and "ml/b" in held["ml/p"]

"""PodDisruptionBudgets against cases written from Kubernetes' own tests (issue 38).

Two tables, each case restated from a test of kubernetes/kubernetes (names kept so a case can
be found there):

- eviction cases, from pkg/registry/core/pod/storage/eviction_test.go (``TestEviction``,
  ``TestEvictionIgnorePDB``, run there under each ``unhealthyPodEvictionPolicy``): a pod
  labelled ``a=true`` on a node, one budget with the status the test writes, and whether the
  Eviction API deletes the pod or refuses (429, 500);
- controller cases, from pkg/controller/disruption/disruption_test.go (``TestNoSelector``,
  ``TestUnavailable``, ``TestIntegerMaxUnavailable...``, ``TestNakedPod``,
  ``TestReplicaSet``, ``TestReplicationController``, ``TestStatefulSetController``): pods,
  their controllers and a budget, and the status the disruption controller writes
  (``VerifyPdbStatus``: disruptionsAllowed, currentHealthy, desiredHealthy, expectedPods).

Both the product (gpuscope/collector/cluster/pdb_records.py: which pods the planner keeps in
place, and its reading of minAvailable/maxUnavailable) and the fake API server
(tests/fakes/kube_rules.py: the eviction handler and the controller's status) are checked
against the same rows, so neither can drift from Kubernetes without a failing case.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuscope.collector.cluster.inventory_records import pod_from_json
from gpuscope.collector.cluster.pdb_records import (
    ALWAYS_ALLOW,
    IF_HEALTHY_BUDGET,
    blocked_by_budgets,
    budget_from_json,
    desired_healthy,
    disruptions_allowed,
    scaled_value,
)
from tests.fakes import kube_rules
from tests.fakes.kube_store import ApiError, KubeStore

NS = "default"
A_TRUE = {"matchLabels": {"a": "true"}}
POLICIES = (None, IF_HEALTHY_BUDGET, ALWAYS_ALLOW)


def _pod(
    name: str,
    *,
    phase: str = "Running",
    ready: bool | None = None,
    terminating: bool = False,
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    meta["labels"] = {"a": "true"} if labels is None else labels
    if terminating:
        meta["deletionTimestamp"] = "2026-03-02T10:00:00Z"
    if owner is not None:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    status: dict[str, Any] = {"phase": phase}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"kind": "Pod", "metadata": meta, "spec": {"nodeName": "foo"}, "status": status}


def _budget(
    spec: dict[str, Any], status: dict[str, Any] | None = None, *, name: str = "foo"
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "PodDisruptionBudget",
        "apiVersion": "policy/v1",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = {"observedGeneration": 0, **status}
    return obj


# -- eviction handler -------------------------------------------------------------------------
#: (name, selector, status, pod, the policies the row runs under, expected answer):
#: "deleted" or the HTTP code of the refusal.
EVICTION_CASES: list[tuple[str, Any, dict[str, int], dict[str, Any], tuple[Any, ...], Any]] = [
    # TestEviction (validNewPod has no Ready condition: the pod is not Ready)
    ("no disruptions allowed, pod running", A_TRUE, {"disruptionsAllowed": 0},
     _pod("t1"), (None, IF_HEALTHY_BUDGET), 429),
    ("no disruptions allowed, pod running, AlwaysAllow", A_TRUE, {"disruptionsAllowed": 0},
     _pod("t1"), (ALWAYS_ALLOW,), "deleted"),
    ("no disruptions allowed, pod pending", A_TRUE, {"disruptionsAllowed": 0},
     _pod("t2", phase="Pending"), POLICIES, "deleted"),
    ("no disruptions allowed, pod succeeded", A_TRUE, {"disruptionsAllowed": 0},
     _pod("t3", phase="Succeeded"), POLICIES, "deleted"),
    ("no disruptions allowed, pod failed", A_TRUE, {"disruptionsAllowed": 0},
     _pod("t4", phase="Failed"), POLICIES, "deleted"),
    ("disruptions allowed", A_TRUE, {"disruptionsAllowed": 1},
     _pod("t5"), POLICIES, "deleted"),
    ("non-matching pdbs", {"matchLabels": {"b": "true"}}, {"disruptionsAllowed": 0},
     _pod("t6"), POLICIES, "deleted"),
    ("no disruptions allowed, pod running, empty selector", {}, {"disruptionsAllowed": 0},
     _pod("t8"), (None, IF_HEALTHY_BUDGET), 429),
    ("no disruptions allowed, pod running, empty selector, AlwaysAllow", {},
     {"disruptionsAllowed": 0}, _pod("t8"), (ALWAYS_ALLOW,), "deleted"),
    # TestEvictionIgnorePDB
    ("no disruptions allowed, pod terminating", A_TRUE, {"disruptionsAllowed": 0},
     _pod("t6", terminating=True), POLICIES, "deleted"),
    ("pod healthy, unhealthy pod not ours", A_TRUE,
     {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2},
     _pod("t7", ready=True), POLICIES, 429),
    ("disruptions allowed, pod healthy, deletes pod by honoring the PDB", A_TRUE,
     {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 3},
     _pod("t8", ready=True), POLICIES, "deleted"),
    ("no disruptions allowed, pod unhealthy, unhealthy pod ours", A_TRUE,
     {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2},
     _pod("t8", ready=False), POLICIES, "deleted"),
    ("no disruptions allowed, pod unhealthy, skips the PDB check and deletes", A_TRUE,
     {"disruptionsAllowed": 0}, _pod("t8", ready=False), (ALWAYS_ALLOW,), "deleted"),
    ("pod healthy, empty selector, pod not deleted by honoring the PDB", {},
     {"disruptionsAllowed": 0, "currentHealthy": 3, "desiredHealthy": 3},
     _pod("t11", ready=True), POLICIES, 429),
    # policy/v1's documentation of spec.selector: a null selector matches no pods
    ("null selector", None, {"disruptionsAllowed": 0}, _pod("t12", ready=True),
     POLICIES, "deleted"),
]  # fmt: skip


def _eviction_rows() -> list[Any]:
    return [
        pytest.param(selector, status, pod, policy, want, id=f"{name} [{policy}]")
        for name, selector, status, pod, policies, want in EVICTION_CASES
        for policy in policies
    ]


@pytest.mark.parametrize(("selector", "status", "pod", "policy", "want"), _eviction_rows())
def test_eviction_cases(
    selector: Any, status: dict[str, int], pod: dict[str, Any], policy: str | None, want: Any
) -> None:
    spec: dict[str, Any] = {"minAvailable": 1}
    if selector is not None:
        spec["selector"] = selector
    if policy is not None:
        spec["unhealthyPodEvictionPolicy"] = policy
    pdb = _budget(spec, status)
    store = KubeStore()
    store.load(pod, pdb)
    pods = store.resource("pods")
    name = pod["metadata"]["name"]
    fake: str | int = "deleted"
    try:
        kube_rules.evict(store, pods, NS, name, {"kind": "Eviction"}, dry_run=True)
    except ApiError as e:
        fake = e.code
    assert fake == want, "the fake API server"
    held = blocked_by_budgets([budget_from_json(pdb)], [pod_from_json(pod)])
    assert (f"{NS}/{name}" in held) == (want != "deleted"), "the planner's reading"


def test_a_budget_behind_its_generation_is_still_being_processed() -> None:
    """checkAndDecrement: observedGeneration behind the generation refuses (429)."""
    pdb = _budget({"minAvailable": 1, "selector": A_TRUE}, {"disruptionsAllowed": 3})
    pdb["metadata"]["generation"] = 2
    pdb["status"]["observedGeneration"] = 1
    pod = _pod("p", ready=True)
    store = KubeStore()
    store.load(pod, pdb)
    with pytest.raises(ApiError) as e:
        kube_rules.evict(store, store.resource("pods"), NS, "p", {}, dry_run=True)
    assert e.value.code == 429 and "still being processed" in str(e.value.details)
    held = blocked_by_budgets([budget_from_json(pdb)], [pod_from_json(pod)])
    assert "still being processed" in held[f"{NS}/p"]


def test_two_budgets_selecting_a_pod_answer_500() -> None:
    pod = _pod("p", ready=True)
    pdbs = [
        _budget({"minAvailable": 0, "selector": {}}, {"disruptionsAllowed": 5}, name="x"),
        _budget({"minAvailable": 0, "selector": A_TRUE}, {"disruptionsAllowed": 5}, name="y"),
    ]
    store = KubeStore()
    store.load(pod, *pdbs)
    with pytest.raises(ApiError) as e:
        kube_rules.evict(store, store.resource("pods"), NS, "p", {}, dry_run=True)
    assert e.value.code == 500
    held = blocked_by_budgets([budget_from_json(p) for p in pdbs], [pod_from_json(pod)])
    assert "default/x, default/y" in held[f"{NS}/p"]


# -- disruption controller --------------------------------------------------------------------
FOO_BAR = {"matchLabels": {"foo": "bar"}}


def _controller(kind: str, name: str, replicas: int) -> dict[str, Any]:
    api = "v1" if kind == "ReplicationController" else "apps/v1"
    return {
        "kind": kind,
        "apiVersion": api,
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
        "spec": {"replicas": replicas},
    }


def _ref(kind: str, name: str) -> dict[str, Any]:
    return {"kind": kind, "name": name, "uid": f"uid-{name}", "apiVersion": "apps/v1"}


def _ready_pods(n: int, *, owner: dict[str, Any] | None = None, unready: int = 0) -> list[Any]:
    return [_pod(f"p{i}", ready=i >= unready, labels={"foo": "bar"}, owner=owner) for i in range(n)]


#: (name, budget spec, controllers, pods, (disruptionsAllowed, currentHealthy,
#: desiredHealthy, expectedPods)).
CONTROLLER_CASES: list[tuple[str, dict[str, Any], list[Any], list[Any], tuple[int, ...]]] = [
    ("TestNoSelector, no pod", {"minAvailable": 3, "selector": {}}, [], [], (0, 0, 3, 0)),
    ("TestNoSelector, one pod", {"minAvailable": 3, "selector": {}}, [],
     _ready_pods(1), (0, 1, 3, 1)),
    ("TestUnavailable, four ready", {"minAvailable": 3, "selector": FOO_BAR}, [],
     _ready_pods(4), (1, 4, 3, 4)),
    ("TestUnavailable, one not ready", {"minAvailable": 3, "selector": FOO_BAR}, [],
     _ready_pods(4, unready=1), (0, 3, 3, 4)),
    ("TestIntegerMaxUnavailable, naked pod", {"maxUnavailable": 1, "selector": FOO_BAR}, [],
     _ready_pods(1), (0, 1, 0, 0)),
    ("TestIntegerMaxUnavailableWithScaling, 7",
     {"maxUnavailable": 2, "selector": FOO_BAR}, [_controller("ReplicaSet", "rs", 7)],
     _ready_pods(1, owner=_ref("ReplicaSet", "rs")), (0, 1, 5, 7)),
    ("TestIntegerMaxUnavailableWithScaling, 5",
     {"maxUnavailable": 2, "selector": FOO_BAR}, [_controller("ReplicaSet", "rs", 5)],
     _ready_pods(1, owner=_ref("ReplicaSet", "rs")), (0, 1, 3, 5)),
    ("TestPercentageMaxUnavailableWithScaling, 7",
     {"maxUnavailable": "30%", "selector": FOO_BAR}, [_controller("ReplicaSet", "rs", 7)],
     _ready_pods(1, owner=_ref("ReplicaSet", "rs")), (0, 1, 4, 7)),
    ("TestPercentageMaxUnavailableWithScaling, 3",
     {"maxUnavailable": "30%", "selector": FOO_BAR}, [_controller("ReplicaSet", "rs", 3)],
     _ready_pods(1, owner=_ref("ReplicaSet", "rs")), (0, 1, 2, 3)),
    ("TestNakedPod", {"minAvailable": "28%", "selector": FOO_BAR}, [],
     _ready_pods(1), (0, 1, 0, 0)),
    ("TestReplicaSet", {"minAvailable": "20%", "selector": FOO_BAR},
     [_controller("ReplicaSet", "rs", 10)],
     _ready_pods(1, owner=_ref("ReplicaSet", "rs")), (0, 1, 2, 10)),
    ("TestReplicationController, two of three", {"minAvailable": "34%", "selector": FOO_BAR},
     [_controller("ReplicationController", "rc", 3)],
     _ready_pods(2, owner=_ref("ReplicationController", "rc")), (0, 2, 2, 3)),
    ("TestReplicationController, three of three", {"minAvailable": "34%", "selector": FOO_BAR},
     [_controller("ReplicationController", "rc", 3)],
     _ready_pods(3, owner=_ref("ReplicationController", "rc")), (1, 3, 2, 3)),
    ("TestReplicationController, and a rogue pod", {"minAvailable": "34%", "selector": FOO_BAR},
     [_controller("ReplicationController", "rc", 3)],
     [*_ready_pods(3, owner=_ref("ReplicationController", "rc")),
      _pod("rogue", ready=True, labels={"foo": "bar"})], (2, 4, 2, 3)),
    ("TestStatefulSetController", {"minAvailable": "34%", "selector": FOO_BAR},
     [_controller("StatefulSet", "ss", 3)],
     _ready_pods(3, owner=_ref("StatefulSet", "ss")), (1, 3, 2, 3)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "controllers", "pods", "want"),
    [pytest.param(*row[1:], id=row[0]) for row in CONTROLLER_CASES],
)
def test_controller_cases(
    spec: dict[str, Any], controllers: list[Any], pods: list[Any], want: tuple[int, ...]
) -> None:
    pdb = _budget(spec)
    store = KubeStore()
    store.load(*controllers, *pods, pdb)
    status = kube_rules.pdb_status(
        store, store.get(store.resource("poddisruptionbudgets"), NS, "foo")
    )
    got = tuple(
        status[k]
        for k in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
    )
    assert got == want, "the fake disruption controller"
    allowed, healthy, desired, expected = want
    assert (
        desired_healthy(spec.get("minAvailable"), spec.get("maxUnavailable"), expected) == desired
    )
    assert disruptions_allowed(healthy, desired, expected) == allowed


def test_a_controller_without_a_finder_fails_the_sync_safe() -> None:
    """A percentage over pods of a Job (no scale finder): ``found no controllers``, and the
    controller's failSafe allows no disruption."""
    pod = _pod("j", ready=True, owner={"kind": "Job", "name": "j", "uid": "uid-j"})
    store = KubeStore()
    store.load(pod, _budget({"minAvailable": "50%", "selector": A_TRUE}))
    status = kube_rules.pdb_status(
        store, store.get(store.resource("poddisruptionbudgets"), NS, "foo")
    )
    assert status["disruptionsAllowed"] == 0
    assert status["conditions"][0]["reason"] == "SyncFailed"


@pytest.mark.parametrize(
    ("value", "total", "want"),
    [
        (3, 10, 3),
        ("34%", 3, 2),
        ("30%", 7, 3),
        ("20%", 10, 2),
        ("28%", 0, 0),
        ("100%", 4, 4),
        ("1%", 1, 1),
        ("0%", 5, 0),
    ],
)
def test_scaled_values_round_up(value: int | str, total: int, want: int) -> None:
    assert scaled_value(value, total) == want


@pytest.mark.parametrize("bad", ["1", "x%", "%"])
def test_a_string_that_is_not_a_percentage_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="IntOrString"):
        scaled_value(bad, 10)


def test_a_deployments_replicas_count_through_its_replicaset() -> None:
    """TestDeploymentFinderFunction's happy path: a pod of a ReplicaSet (5) that a
    Deployment (10) controls counts the Deployment's scale."""
    dep = _controller("Deployment", "dep", 10)
    rs = _controller("ReplicaSet", "rs", 5)
    rs["metadata"]["ownerReferences"] = [{**_ref("Deployment", "dep"), "controller": True}]
    pods = _ready_pods(1, owner=_ref("ReplicaSet", "rs"))
    store = KubeStore()
    store.load(dep, rs, *pods, _budget({"minAvailable": "50%", "selector": FOO_BAR}))
    pdb = store.get(store.resource("poddisruptionbudgets"), NS, "foo")
    status = kube_rules.pdb_status(store, pdb)
    assert (status["expectedPods"], status["desiredHealthy"]) == (10, 5)
    store.delete(store.resource("deployments"), NS, "dep")
    assert kube_rules.pdb_status(store, pdb)["conditions"][0]["reason"] == "SyncFailed"

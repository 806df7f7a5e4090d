"""PodDisruptionBudget-aware consolidation (issue 25), against the fake API server, which
serves budgets with the status the disruption controller keeps and answers evictions from
it as kube-apiserver's eviction handler does.

Seen: with a budget (minAvailable 1) on the planned victim's job, two runs in a row chose
the same protected victim (429, reservation lifted, exit 3), though another node could be
freed by one unprotected eviction.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.fakes.kube_rules import disruption_blocker
from tests.integration.test_actions import (  # noqa: F401  (fixtures)
    AT,
    Cluster,
    cluster,
    consolidation_policy,
    node_obj,
    packed,
    pod_obj,
    results,
    taints,
)

KEEP_SMALL: dict[str, Any] = {
    "kind": "PodDisruptionBudget",
    "apiVersion": "policy/v1",
    "metadata": {"name": "keep-small", "namespace": "ml"},
    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "small"}}},
}


@pytest.fixture
def two_ways(packed: Cluster) -> Cluster:  # noqa: F811
    """packed's node-c (its victim small-0 now under a budget) and node-d, freed as well by
    evicting one preemptible pod nobody protects."""
    packed.record(
        node_obj("node-d"),
        pod_obj("ml", "big-d-0", "node-d", 4, kind="batch"),
        pod_obj("ml", "spare-0", "node-d", 2, kind="batch", preemptible=True),
    )
    packed.api.store.load(KEEP_SMALL)
    packed.api.requests.clear()
    return packed


def evictions(c: Cluster) -> list[str]:
    return [r.path for r in c.api.requests if r.method == "POST" and r.path.endswith("/eviction")]


def test_the_planner_walks_around_a_budget_and_says_which_blocked_which_plan(
    two_ways: Cluster,
) -> None:
    c = two_ways
    policy = consolidation_policy(cooldown_minutes=0)
    run = c.run([policy], execute=True)
    assert results(run) == [
        ("reserve", "node-d", "done"),
        ("tolerate", "wants4-0", "done"),
        ("evict", "spare-0", "done"),
    ]
    assert not run.refused
    assert evictions(c) == ["/api/v1/namespaces/ml/pods/spare-0/eviction"]
    assert not c.going("ml", "small-0") and c.going("ml", "spare-0")
    assert taints(c, "node-c") == []
    [note] = [n for n in run.notes if "keep-small" in n]
    assert "ml/wants4-0 on node-c" in note and "ml/small-0" in note
    assert "needs 1 healthy pods, has 1" in note


def test_two_runs_never_choose_the_protected_victim(two_ways: Cluster) -> None:
    """The second run (after the first's reservation is lifted for lack of a bind) still
    does not try the protected pod."""
    c = two_ways
    policy = consolidation_policy(cooldown_minutes=0, cordon_minutes=1)
    c.run([policy], execute=True)
    c.run([policy], execute=True, at=AT + timedelta(minutes=2))
    assert "/api/v1/namespaces/ml/pods/small-0/eviction" not in evictions(c)


def test_a_budget_that_allows_a_disruption_does_not_hold_its_pod(two_ways: Cluster) -> None:
    c = two_ways
    c.api.store.patch(
        c.api.store.resource("poddisruptionbudgets"),
        "ml",
        "keep-small",
        {"spec": {"minAvailable": 0}},
    )
    run = c.run([consolidation_policy()], execute=True)
    assert not any("keep-small" in n for n in run.notes)
    assert not run.refused


def test_unreadable_budgets_are_a_note_and_the_api_server_still_guards(
    packed: Cluster,  # noqa: F811
) -> None:
    """RBAC without the PDB rule: the plan goes on; the Eviction API's 429 abandons it."""
    packed.api.store.load(KEEP_SMALL)
    packed.api.deny("list", "poddisruptionbudgets")
    run = packed.run([consolidation_policy()], execute=True)
    assert any("PodDisruptionBudgets not read" in n and "403" in n for n in run.notes)
    assert [r[2] for r in results(run)] == ["done", "done", "blocked", "done"]


# -- issue 38: a budget read as kube-apiserver reads it -------------------------------------
#: policy/v1: ``selector: {}`` selects every pod of the namespace. minAvailable 7 = the seven
#: Running, Ready pods of ``ml`` (the cluster's three, big-0, small-0 and the two fills): no
#: disruption allowed.
KEEP_ALL_OF_ML: dict[str, Any] = {
    "kind": "PodDisruptionBudget",
    "apiVersion": "policy/v1",
    "metadata": {"name": "keep-all", "namespace": "ml"},
    "spec": {"minAvailable": 7, "selector": {}},
}


@pytest.fixture
def other_namespace_way(packed: Cluster) -> Cluster:  # noqa: F811
    """packed, plus node-d whose pods live in ``batch``, outside the budget's namespace:
    evicting spare-0 there frees room for the pending job as well."""
    packed.record(
        node_obj("node-d"),
        pod_obj("batch", "big-d-0", "node-d", 4, kind="batch"),
        pod_obj("batch", "spare-0", "node-d", 2, kind="batch", preemptible=True),
    )
    packed.api.requests.clear()
    return packed


def test_an_empty_selector_protects_every_pod_of_its_namespace(
    other_namespace_way: Cluster,
) -> None:
    """Seen: the budget with ``selector: {}`` was read as selecting nothing; ``act
    --execute`` evicted small-0, got 429, lifted the taint, exited 3, and the next run
    repeated the plan. Now the fake refuses as kube-apiserver does and the planner walks
    around the protected pod to the unprotected victim in ``batch``."""
    c = other_namespace_way
    c.api.store.load(KEEP_ALL_OF_ML)
    pdb_res = c.api.store.resource("poddisruptionbudgets")
    pod_res = c.api.store.resource("pods")
    small = c.api.store.get(pod_res, "ml", "small-0")
    blocked = disruption_blocker(c.api.store, small)
    assert blocked is not None and blocked.code == 429  # the fake, corrected
    assert c.api.store.get(pdb_res, "ml", "keep-all")
    policy = consolidation_policy(cooldown_minutes=0, cordon_minutes=1)
    run = c.run([policy], execute=True)
    assert not run.refused
    assert evictions(c) == ["/api/v1/namespaces/batch/pods/spare-0/eviction"]
    assert not c.going("ml", "small-0") and c.going("batch", "spare-0")
    [note] = [n for n in run.notes if "keep-all" in n]
    assert "ml/small-0" in note and "needs 7 healthy pods, has 7" in note
    # the next run (the first one's reservation lifted for lack of a bind) does not try it
    c.run([policy], execute=True, at=AT + timedelta(minutes=2))
    assert "/api/v1/namespaces/ml/pods/small-0/eviction" not in evictions(c)


def test_a_budget_without_a_selector_protects_nothing(packed: Cluster) -> None:  # noqa: F811
    """An absent (null) selector selects no pod: small-0, the only way, goes."""
    c = packed
    c.api.store.load(
        {**KEEP_ALL_OF_ML, "spec": {"minAvailable": 7}},
    )
    run = c.run([consolidation_policy(cooldown_minutes=0)], execute=True)
    assert not any("keep-all" in n for n in run.notes)
    assert not run.refused
    assert evictions(c) == ["/api/v1/namespaces/ml/pods/small-0/eviction"]

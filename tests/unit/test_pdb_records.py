"""PodDisruptionBudgets as the inventory stores them (gpuscope/collector/cluster/pdb_records.py).

The fixture is a policy/v1 PodDisruptionBudget with every field of the type (kubernetes/api
policy/v1: spec minAvailable, selector, maxUnavailable, unhealthyPodEvictionPolicy; status
observedGeneration, disruptedPods, disruptionsAllowed, currentHealthy, desiredHealthy,
expectedPods, conditions), and the fake API server's budgets are checked to carry the same
fields. The stored record must give back the budget it was made from, field for field, on
random budgets.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpuscope.collector.cluster.pdb_records import (
    Budget,
    budget_from_json,
    budget_from_record,
    budget_record,
)
from tests.fakes.kube_rules import with_pdb_status
from tests.fakes.kube_store import KubeStore

#: policy/v1 field names, written from the type's documentation (not from the product).
SPEC_FIELDS = {"minAvailable", "selector", "maxUnavailable", "unhealthyPodEvictionPolicy"}
STATUS_FIELDS = {
    "observedGeneration",
    "disruptedPods",
    "disruptionsAllowed",
    "currentHealthy",
    "desiredHealthy",
    "expectedPods",
    "conditions",
}
#: meta/v1 Condition's fields.
CONDITION_FIELDS = {"type", "status", "observedGeneration", "lastTransitionTime", "reason",
                    "message"}  # fmt: skip

FULL: dict[str, Any] = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "metadata": {
        "name": "keep-train",
        "namespace": "ml",
        "generation": 3,
        "uid": "3c0d",
        "resourceVersion": "812",
        "creationTimestamp": "2026-11-20T08:00:00Z",
    },
    "spec": {
        "maxUnavailable": "25%",
        "selector": {
            "matchLabels": {"app": "train"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "ib"]}],
        },
        "unhealthyPodEvictionPolicy": "IfHealthyBudget",
    },
    "status": {
        "observedGeneration": 3,
        "disruptedPods": {"train-3": "2026-11-25T10:00:00Z"},
        "disruptionsAllowed": 0,
        "currentHealthy": 3,
        "desiredHealthy": 3,
        "expectedPods": 4,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "False",
                "observedGeneration": 3,
                "lastTransitionTime": "2026-11-25T10:00:00Z",
                "reason": "InsufficientPods",
                "message": "",
            },
        ],
    },
}


def test_the_fixture_has_every_policy_v1_field() -> None:
    # minAvailable and maxUnavailable exclude each other (the API server refuses both):
    # the fixture has the second, the next test the first
    assert set(FULL["spec"]) == SPEC_FIELDS - {"minAvailable"}
    assert set(FULL["status"]) == STATUS_FIELDS


def test_every_field_the_plan_reads_is_kept() -> None:
    b = budget_from_json(FULL)
    assert (b.namespace, b.name, b.key) == ("ml", "keep-train", "ml/keep-train")
    assert b.match_labels == {"app": "train"}
    assert b.expressions == (("tier", "In", frozenset({"gpu", "ib"})),)
    assert (b.min_available, b.max_unavailable) == (None, "25%")
    assert (b.disruptions_allowed, b.current_healthy, b.desired_healthy) == (0, 3, 3)
    assert b.expected_pods == 4 and not b.stale
    assert b.why_blocked() == "allows no disruption (needs 3 healthy pods, has 3)"
    assert budget_from_record(json.loads(json.dumps(budget_record(b)))) == b


def test_min_available_as_a_number_is_kept_as_text() -> None:
    b = budget_from_json({**FULL, "spec": {"minAvailable": 1, "selector": {}}})
    assert (b.min_available, b.max_unavailable) == ("1", None)


def test_the_fake_api_servers_budgets_have_the_real_fields() -> None:
    """The fake serves a budget with the status the disruption controller writes: every
    status field of policy/v1 (disruptedPods only while an eviction is unobserved:
    omitted when empty, as the API server does)."""
    store = KubeStore()
    pdb = {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1",
           "metadata": {"name": "keep", "namespace": "ml"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}}}}  # fmt: skip
    store.load(pdb)
    served = with_pdb_status(store, store.get(store.resource("poddisruptionbudgets"), "ml", "keep"))
    assert set(served["status"]) == STATUS_FIELDS - {"disruptedPods"}
    (condition,) = served["status"]["conditions"]
    assert set(condition) == CONDITION_FIELDS
    assert condition["type"] == "DisruptionAllowed" and condition["status"] == "False"


labels = st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=3)
int_or_percent = st.one_of(
    st.none(), st.integers(0, 50).map(str), st.integers(0, 100).map(lambda n: f"{n}%")
)
budgets = st.builds(
    Budget,
    namespace=st.text(min_size=1, max_size=8),
    name=st.text(min_size=1, max_size=8),
    match_labels=labels,
    expressions=st.lists(
        st.tuples(
            st.text(min_size=1, max_size=5),
            st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]),
            st.frozensets(st.text(max_size=4), max_size=3),
        ),
        max_size=2,
    ).map(tuple),
    disruptions_allowed=st.integers(0, 10),
    stale=st.booleans(),
    desired_healthy=st.integers(0, 10),
    current_healthy=st.integers(0, 10),
    min_available=int_or_percent,
    max_unavailable=int_or_percent,
    expected_pods=st.integers(0, 10),
    has_selector=st.booleans(),
    unhealthy_policy=st.sampled_from(["IfHealthyBudget", "AlwaysAllow"]),
)


@given(budgets)
def test_a_stored_budget_is_the_budget_it_was(b: Budget) -> None:
    assert budget_from_record(json.loads(json.dumps(budget_record(b)))) == b

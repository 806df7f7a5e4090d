"""Who owns a pod (gpuscope/core/owners.py): the report's owner column and the idle alerts'
owner label. Issue 24: the report showed `StatefulSet/nb-user05` although the pod carried
an owner label."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from gpuscope.analytics.report.inputs import with_owner
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.owners import pod_owner

KEYS = WorkloadSettings().owner_label_keys


def test_the_owner_label_wins_over_the_controller() -> None:
    labels = {"app.kubernetes.io/owner": "user05", "app": "nb"}
    assert pod_owner(labels, KEYS, "StatefulSet", "nb-user05") == "user05"
    assert pod_owner(json.dumps(labels), KEYS, "StatefulSet", "nb-user05") == "user05"
    assert pod_owner({"app": "nb"}, KEYS, "StatefulSet", "nb-user05") == "StatefulSet/nb-user05"
    assert pod_owner(None, KEYS, None, None) == ""
    assert pod_owner("not json", KEYS, "Job", "j") == "Job/j"


def test_the_keys_are_the_sites_and_tried_in_order() -> None:
    labels = {"team": "vision", "owner": "bob"}
    assert pod_owner(labels, ["team", "owner"]) == "vision"
    assert pod_owner(labels, ["owner", "team"]) == "bob"
    assert pod_owner(labels, ["cost-center"], "Deployment", "x") == "Deployment/x"


@given(
    st.dictionaries(st.sampled_from(["a", "b", "c", "owner"]), st.text(max_size=4)),
    st.lists(st.sampled_from(["a", "b", "c", "owner"]), unique=True),
)
def test_against_a_reference(labels: dict[str, str], keys: list[str]) -> None:
    """The first key of the list whose label is non-empty, else the controller."""
    expected = next((labels[k] for k in keys if labels.get(k)), "Job/j")
    assert pod_owner(labels, keys, "Job", "j") == expected


def test_the_reports_pods_table_takes_the_owner_label() -> None:
    pods = pl.DataFrame({
        "namespace": ["jhub", "ml"], "pod": ["nb-user05-0", "train-0"],
        "pod_labels": [json.dumps({"app.kubernetes.io/owner": "user05"}), None],
        "owner_kind": ["StatefulSet", "Job"], "owner_name": ["nb-user05", "train"],
    })  # fmt: skip
    out = with_owner(pods, KEYS)
    assert out["owner"].to_list() == ["user05", "Job/train"]
    assert out.columns == ["namespace", "pod", "owner"]

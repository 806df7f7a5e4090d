"""Workload classification follows docs/design.md's order of evidence."""

import pytest

from gpuscope.core.collector_settings import WorkloadRule
from gpuscope.core.records import WorkloadKind
from gpuscope.core.workload import PodFacts, classify, project_of, workload_kind


def pod(
    labels: dict[str, str] | None = None, owner: str = "", ns: str = "team-a", **kw: object
) -> PodFacts:
    return PodFacts(namespace=ns, labels=labels or {}, annotations={}, owner_kind=owner, **kw)  # type: ignore[arg-type]


def test_explicit_label_beats_owner() -> None:
    """gpuscope.io/workload-type wins over what the owner would say."""
    assert (
        workload_kind(pod({"gpuscope.io/workload-type": "interactive"}, "Job"))
        is WorkloadKind.INTERACTIVE
    )


@pytest.mark.parametrize(
    ("owner", "kind"),
    [
        ("Notebook", WorkloadKind.INTERACTIVE),
        ("PyTorchJob", WorkloadKind.TRAINING),
        ("MPIJob", WorkloadKind.TRAINING),
        ("RayJob", WorkloadKind.TRAINING),
        ("Job", WorkloadKind.BATCH),
        ("ReplicaSet", WorkloadKind.INFERENCE),
        ("", WorkloadKind.UNKNOWN),
    ],
)
def test_owner_kind(owner: str, kind: WorkloadKind) -> None:
    """The owner kind decides when no label does."""
    assert workload_kind(pod(owner=owner)) is kind


def test_jupyterhub_single_user_server_is_interactive() -> None:
    """Z2JH pods carry component=singleuser-server and no controller owner."""
    assert workload_kind(pod({"component": "singleuser-server"})) is WorkloadKind.INTERACTIVE


def test_site_rules_before_generic_owners() -> None:
    """A configured label rule classifies pods whose owner says nothing specific."""
    rules = [WorkloadRule(match={"app": "vscode"}, kind="interactive")]
    assert workload_kind(pod({"app": "vscode"}, "ReplicaSet"), rules) is WorkloadKind.INTERACTIVE
    assert workload_kind(pod({"app": "other"}, "ReplicaSet"), rules) is WorkloadKind.INFERENCE


def test_project_order() -> None:
    """Project label, then scheduler queue labels, then the namespace."""
    assert project_of(pod({"gpuscope.io/project": "p1", "kueue.x-k8s.io/queue-name": "q"})) == "p1"
    assert project_of(pod({"kueue.x-k8s.io/queue-name": "q"})) == "q"
    assert project_of(pod({})) == "team-a"


def test_preemptible_and_protected() -> None:
    """Preemptible by label or by low priority; protected by label or namespace."""
    c = classify(pod({"gpuscope.io/preemptible": "true"}))
    assert c.preemptible and not c.protected
    assert classify(pod(priority=-5), preemptible_priority_below=0).preemptible
    assert not classify(pod(priority=5), preemptible_priority_below=0).preemptible
    assert classify(pod({"gpuscope.io/protect": "true"})).protected
    assert classify(pod(ns="kube-system"), protected_namespaces=["kube-system"]).protected


def test_kubeflow_notebook_pod_is_interactive() -> None:
    """A Kubeflow Notebook's pod is owned by a StatefulSet; its notebook-name label says what it is."""
    assert workload_kind(pod({"notebook-name": "nb"}, "StatefulSet")) is WorkloadKind.INTERACTIVE

"""The fake API server answers the actuator's writes as kube-apiserver does (the bodies the
executor's error handling reads), through the official client over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.fakes.kube_api import FakeKubeApi
from tests.fakes.kube_faults import Answer


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        fake.store.load(
            {"kind": "Node", "metadata": {"name": "n1"}},
            {
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ml", "labels": {"app": "a"}},
                "spec": {
                    "nodeName": "n1",
                    "containers": [{"name": "main", "image": "x"}],
                    "tolerations": [{"key": "k", "operator": "Exists"}],
                },
                "status": {"phase": "Running"},
            },
        )
        yield fake


def core(api: FakeKubeApi) -> client.CoreV1Api:
    cfg = client.Configuration()
    cfg.host = api.url
    cfg.retries = 0
    return client.CoreV1Api(client.ApiClient(cfg))


def refused(call: object) -> tuple[int, dict[str, object], dict[str, str]]:
    with pytest.raises(client.ApiException) as info:
        call()  # type: ignore[operator]
    return info.value.status, json.loads(info.value.body), dict(info.value.headers or {})


def test_guarded_patches_immutable_tolerations_and_graceful_deletes(api: FakeKubeApi) -> None:
    v1 = core(api)
    pod = v1.read_namespaced_pod("p", "ml")
    rv, uid = pod.metadata.resource_version, pod.metadata.uid
    stale = {"metadata": {"resourceVersion": "1", "annotations": {"a": "b"}}}
    code, body, _ = refused(lambda: v1.patch_namespaced_pod("p", "ml", stale))
    assert (code, body["reason"]) == (409, "Conflict")
    assert "the object has been modified" in str(body["message"])
    other = {"metadata": {"uid": "someone-else", "resourceVersion": rv}}
    code, body, _ = refused(lambda: v1.patch_namespaced_pod("p", "ml", other))
    assert code == 422 and "metadata.uid: Invalid value" in str(body["message"])
    dropped = {"spec": {"tolerations": []}, "metadata": {"uid": uid, "resourceVersion": rv}}
    code, body, _ = refused(lambda: v1.patch_namespaced_pod("p", "ml", dropped))
    assert code == 422 and "existing toleration can not be modified" in str(body["message"])
    added = {"spec": {"tolerations": [{"key": "k", "operator": "Exists"}, {"key": "x",
             "operator": "Exists"}]}, "metadata": {"uid": uid, "resourceVersion": rv}}  # fmt: skip
    assert len(v1.patch_namespaced_pod("p", "ml", added).spec.tolerations) == 2
    wrong = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="nope"))
    code, body, _ = refused(lambda: v1.delete_namespaced_pod("p", "ml", body=wrong))
    assert code == 409 and "Precondition failed: UID in precondition: nope" in str(body["message"])
    v1.delete_namespaced_pod("p", "ml")
    assert v1.read_namespaced_pod("p", "ml").metadata.deletion_timestamp is not None
    assert api.store.finish_terminating() == 1


def test_planted_answers_carry_the_real_bodies_and_headers(api: FakeKubeApi) -> None:
    v1 = core(api)
    api.script(Answer(429, retry_after=7), method="GET", path="/api/v1/nodes/n1")
    code, body, headers = refused(lambda: v1.read_node("n1"))
    assert (code, headers.get("Retry-After")) == (429, "7")
    assert body["details"] == {"retryAfterSeconds": 7}
    api.script(Answer(429, disruption_budget="keep"), method="POST", path="/api/v1/namespaces/ml")
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="p", namespace="ml"))
    code, body, headers = refused(lambda: v1.create_namespaced_pod_eviction("p", "ml", eviction))
    assert code == 429 and "Retry-After" not in headers
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"  # type: ignore[index]
    api.script(Answer(401), Answer(500), method="GET", path="/api/v1/nodes")
    assert refused(lambda: v1.read_node("n1"))[1]["reason"] == "Unauthorized"
    assert refused(lambda: v1.read_node("n1"))[1]["reason"] == "InternalError"
    assert api.unanswered_scripts() == 0

"""The agent lists its node's pods and ResourceSlices with its own in-cluster client
(gpuscope/agent/workloads/kubeapi.py) instead of the Kubernetes client: against the fake API server
behind TLS with a service-account token, it gives the pod metadata the Kubernetes client
gives (issue 24, a lean agent: the client is 128 MB of the install, ~37 MiB once loaded)."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme

from gpuscope.agent.workloads.dra import DeviceIdentity, SliceSource
from gpuscope.agent.workloads.kubeapi import ApiError, InClusterApi
from gpuscope.agent.workloads.podmeta import ApiServerPodMetadata, pod_meta_from_api
from tests.fakes.kube_api import FakeKubeApi

pytestmark = pytest.mark.integration
TOKEN = "service-account-token-of-the-agent"
NODE = "gpu-node-1"

POD = {
    "kind": "Pod",
    "metadata": {
        "name": "trainer-0", "namespace": "ml", "uid": "0b0e5c1e-1111-4a5e-9d5e-000000000001",
        "labels": {"app": "trainer", "gpuscope.io/owner": "ana"},
        "annotations": {"note": "x"},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u1"},
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "t", "uid": "u2",
             "controller": True},
        ],
    },
    "spec": {"nodeName": NODE, "priority": 100, "containers": [{"name": "main", "image": "i"}]},
    "status": {
        "phase": "Running",
        "containerStatuses": [{"name": "main", "containerID": "containerd://abc123", "ready": True,
                               "restartCount": 0, "image": "i", "imageID": ""}],
        "initContainerStatuses": [{"name": "init", "containerID": "cri-o://def456", "ready": True,
                                   "restartCount": 0, "image": "i", "imageID": ""}],
    },
}  # fmt: skip
ELSEWHERE = {
    "kind": "Pod",
    "metadata": {"name": "other-0", "namespace": "ml", "uid": "0b0e5c1e-2222-4a5e-9d5e-000000000002"},
    "spec": {"nodeName": "gpu-node-2", "containers": [{"name": "main", "image": "i"}]},
}  # fmt: skip
SLICE = {
    "kind": "ResourceSlice",
    "apiVersion": "resource.k8s.io/v1",
    "metadata": {"name": f"{NODE}-gpu"},
    "spec": {
        "nodeName": NODE, "driver": "gpu.nvidia.com",
        "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"},
                                                     "uuid": {"string": "GPU-aaaa"}}}],
    },
}  # fmt: skip


@dataclass
class Cluster:
    api: FakeKubeApi
    host: str
    port: int
    ca_file: Path
    token_file: Path

    def client(self, token_file: Path | None = None) -> InClusterApi:
        return InClusterApi(self.host, self.port, token_file=token_file or self.token_file,
                            ca_file=self.ca_file)  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    ca_file = tmp_path / "ca.crt"
    ca.cert_pem.write_to_path(str(ca_file))
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    with FakeKubeApi(tls=server, token=TOKEN) as api:
        api.store.load(POD, ELSEWHERE, SLICE)
        url = urlsplit(api.url)
        assert url.hostname is not None and url.port is not None
        yield Cluster(api, url.hostname, url.port, ca_file, token)


def test_the_node_pods_are_what_the_kubernetes_client_gives(cluster: Cluster) -> None:
    """The same PodMeta as from the Kubernetes client's V1Pod, for this node's pods only."""
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = cluster.api.url
    cfg.ssl_ca_cert = str(cluster.ca_file)
    cfg.api_key = {"authorization": f"Bearer {TOKEN}"}
    with client.ApiClient(cfg) as api_client:
        reference = client.CoreV1Api(api_client).list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={NODE}"
        )
    expected = [pod_meta_from_api(p) for p in reference.items]
    metadata = ApiServerPodMetadata(NODE, 30.0, lambda: 0.0, api_factory=cluster.client)
    got = metadata.pods()
    assert metadata.last_error == ""
    assert list(got.values()) == expected
    meta = got[POD["metadata"]["uid"]]  # type: ignore[index]
    assert meta.owner_kind == "PyTorchJob" and meta.priority == 100
    assert dict(meta.containers) == {"abc123": "main", "def456": "init"}
    assert dict(meta.labels) == {"app": "trainer", "gpuscope.io/owner": "ana"}


def test_the_node_resource_slices(cluster: Cluster) -> None:
    source = SliceSource(NODE, 30.0, lambda: 0.0, api=cluster.client())
    assert dict(source.identities()) == {
        ("gpu.nvidia.com", NODE, "gpu-0"): DeviceIdentity(type="gpu", uuid="GPU-aaaa")
    }
    assert source.last_error == ""


def test_a_rotated_token_is_read_again(cluster: Cluster, tmp_path: Path) -> None:
    """A wrong token is the API server's 401; once the file holds the right one (a projected
    token is rotated in place), the next list succeeds."""
    token = tmp_path / "rotating"
    token.write_text("an-expired-token")
    api = cluster.client(token)
    with pytest.raises(ApiError) as err:
        api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}")
    assert err.value.status == 401
    token.write_text(TOKEN)
    import os

    os.utime(token, ns=(1, 2))  # a new mtime even within the file system's resolution
    assert len(api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}").items) == 1


def test_failures_are_one_reason_and_the_cache_is_kept(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = trustme.CA()
    wrong_ca = tmp_path / "other-ca.crt"
    other.cert_pem.write_to_path(str(wrong_ca))
    api = InClusterApi(cluster.host, cluster.port, token_file=cluster.token_file, ca_file=wrong_ca)
    metadata = ApiServerPodMetadata(NODE, 30.0, lambda: 0.0, api=api)
    assert metadata.pods() == {}
    assert "CERTIFICATE_VERIFY_FAILED" in metadata.last_error
    assert "\n" not in metadata.last_error
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ApiError, match="KUBERNETES_SERVICE_HOST"):
        InClusterApi(None, None)  # not in a pod


def test_the_agent_imports_no_kubernetes_client() -> None:
    code = (
        "import sys, gpuscope.agent.workloads.kubeapi, gpuscope.agent.workloads.podmeta, gpuscope.agent.workloads.dra, "
        "gpuscope.agent.workloads.attribution, gpuscope.agent.build\n"
        "sys.exit(1 if 'kubernetes' in sys.modules else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr

"""PodResourcesClient against a real gRPC server on a unix socket, as the kubelet serves it."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from gpuscope.agent.proto import podresources_v1_pb2 as pb2
from gpuscope.agent.proto import podresources_v1_pb2_grpc as pb2_grpc
from gpuscope.agent.workloads.podresources import DeviceAllocation, PodResourcesClient
from gpuscope.core.errors import SourceError

pytestmark = pytest.mark.integration

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
GPU1 = "GPU-66666666-7777-8888-9999-000000000000"
MIG = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def _fixture_response() -> Any:
    devices = pb2.ContainerDevices
    return pb2.ListPodResourcesResponse(
        pod_resources=[
            pb2.PodResources(
                name="nb-alice-0",
                namespace="team-a",
                containers=[
                    pb2.ContainerResources(
                        name="notebook",
                        devices=[
                            devices(
                                resource_name="nvidia.com/gpu",
                                device_ids=[GPU0],
                                topology=pb2.TopologyInfo(nodes=[pb2.NUMANode(ID=0)]),
                            )
                        ],
                        cpu_ids=[2, 3],
                    )
                ],
            ),
            pb2.PodResources(
                name="infer-7d9",
                namespace="serving",
                containers=[
                    pb2.ContainerResources(
                        name="server",
                        devices=[
                            devices(resource_name="nvidia.com/mig-1g.10gb", device_ids=[MIG]),
                            devices(resource_name="rdma/hca_shared_devices_a", device_ids=["0"]),
                        ],
                    ),
                    pb2.ContainerResources(name="sidecar"),
                ],
            ),
            pb2.PodResources(
                name="ts-a",
                namespace="team-b",
                containers=[
                    pb2.ContainerResources(
                        name="main",
                        devices=[
                            devices(
                                resource_name="nvidia.com/gpu.shared",
                                device_ids=[f"{GPU1}::0", f"{GPU1}::3"],
                            )
                        ],
                    )
                ],
            ),
            pb2.PodResources(
                name="cpu-only",
                namespace="default",
                containers=[pb2.ContainerResources(name="app", cpu_ids=[1])],
            ),
            pb2.PodResources(name="no-containers", namespace="default"),
        ]
    )


class _Lister(pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls = 0

    def List(self, request: Any, context: Any) -> Any:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        return _fixture_response()


def _short_socket(tmp_path: Path) -> Path:
    """A socket path within the 107-byte limit of ``sun_path``."""
    path = tmp_path / "kubelet.sock"
    if len(str(path)) < 100:
        return path
    return Path(tempfile.mkdtemp(prefix="pr-", dir="/tmp")) / "kubelet.sock"


def _serve(socket_path: Path, servicer: _Lister) -> Any:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    return server


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[Path, _Lister]]:
    socket_path = _short_socket(tmp_path)
    servicer = _Lister()
    server = _serve(socket_path, servicer)
    try:
        yield socket_path, servicer
    finally:
        server.stop(grace=None)


def test_lists_gpu_mig_and_shared_devices_only(kubelet: tuple[Path, _Lister]) -> None:
    """Whole GPUs, MIG devices and time-sliced replicas are listed; other devices are not.

    Replica ids ``<uuid>::<n>`` collapse to the GPU UUID, once per container; pods with no
    devices or no containers add nothing.
    """
    socket_path, servicer = kubelet
    client = PodResourcesClient(socket_path, timeout=2.0)
    try:
        got = client.list_gpu_allocations()
    finally:
        client.close()
    assert servicer.calls == 1
    assert got == [
        DeviceAllocation("team-a", "nb-alice-0", "notebook", "nvidia.com/gpu", GPU0),
        DeviceAllocation("serving", "infer-7d9", "server", "nvidia.com/mig-1g.10gb", MIG),
        DeviceAllocation("team-b", "ts-a", "main", "nvidia.com/gpu.shared", GPU1),
    ]


def test_gpu_resources_are_configurable(kubelet: tuple[Path, _Lister]) -> None:
    """Only the configured resource patterns count as GPUs."""
    socket_path, _ = kubelet
    client = PodResourcesClient(socket_path, gpu_resources=["nvidia.com/gpu"])
    try:
        got = client.list_gpu_allocations()
    finally:
        client.close()
    assert [a.device_id for a in got] == [GPU0]


def test_client_reused_across_calls(kubelet: tuple[Path, _Lister]) -> None:
    """One client serves many scrapes on its channel, and again after close()."""
    socket_path, servicer = kubelet
    client = PodResourcesClient(socket_path)
    assert len(client.list_gpu_allocations()) == 3
    assert len(client.list_gpu_allocations()) == 3
    client.close()
    assert len(client.list_gpu_allocations()) == 3
    client.close()
    assert servicer.calls == 3


def test_missing_socket_is_source_error(tmp_path: Path) -> None:
    """No kubelet socket: a one-line SourceError naming the path."""
    client = PodResourcesClient(tmp_path / "absent.sock")
    with pytest.raises(SourceError, match="does not exist") as info:
        client.list_gpu_allocations()
    assert "\n" not in str(info.value)
    client.close()


def test_slow_kubelet_times_out_quickly(tmp_path: Path) -> None:
    """A kubelet slower than the timeout gives a SourceError at the timeout, not when the
    kubelet answers: the kubelet here answers after 60 s, the bound is 10 s (room for a
    loaded machine; without a deadline the call would take the full 60 s)."""
    socket_path = _short_socket(tmp_path)
    release = threading.Event()

    class _Stuck(_Lister):
        def List(self, request: Any, context: Any) -> Any:
            release.wait(60.0)
            return _fixture_response()

    server = _serve(socket_path, _Stuck())
    client = PodResourcesClient(socket_path, timeout=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(SourceError, match="DEADLINE_EXCEEDED") as info:
            client.list_gpu_allocations()
        elapsed = time.monotonic() - started
    finally:
        release.set()
        client.close()
        server.stop(grace=None)
    assert elapsed < 10.0
    assert "\n" not in str(info.value)


def test_socket_without_server_is_source_error(tmp_path: Path) -> None:
    """A stale socket file nobody listens on (kubelet restarting) is a SourceError too."""
    socket_path = _short_socket(tmp_path)
    server = _serve(socket_path, _Lister())
    server.stop(grace=None)
    if not socket_path.exists():
        socket_path.touch()
    client = PodResourcesClient(socket_path, timeout=1.0)
    try:
        with pytest.raises(SourceError, match="failed"):
            client.list_gpu_allocations()
    finally:
        client.close()

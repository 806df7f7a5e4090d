"""GPU -> pod attribution from pod-resources, process cgroups and the source's own pod list.

Also the API-server pod metadata cache it classifies with. The procfs tree, the kubelet and
the API server are doubles; classification is the real :func:`gpuscope.core.workload.classify`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import (
    V1ContainerStatus,
    V1ObjectMeta,
    V1OwnerReference,
    V1Pod,
    V1PodList,
    V1PodSpec,
    V1PodStatus,
)
from kubernetes.client.exceptions import ApiException

from gpuscope.agent.workloads.attribution import KubeletAttributor
from gpuscope.agent.workloads.podmeta import (
    ApiServerPodMetadata,
    NoPodMetadata,
    PodMeta,
    pod_meta_from_api,
)
from gpuscope.agent.workloads.podresources import DeviceAllocation
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.errors import SourceError
from gpuscope.core.records import GpuProcess, GpuReading, GpuWorkload, PodRef, WorkloadKind

GPU0 = "GPU-00000000-0000-0000-0000-000000000000"
GPU1 = "GPU-11111111-1111-1111-1111-111111111111"

NB_UID = "0a0a0a0a-1111-2222-3333-444444444444"
A_UID = "aaaaaaaa-1111-2222-3333-444444444444"
B_UID = "bbbbbbbb-1111-2222-3333-444444444444"
NB_CID = "1" * 64
A_CID = "a" * 64
B_CID = "b" * 64


def _write_proc(root: Path, pid: int, uid: str, cid: str) -> None:
    """A ``/proc/<pid>/cgroup`` of a container under the systemd driver, cgroup v2."""
    slice_uid = uid.replace("-", "_")
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{slice_uid}.slice/cri-containerd-{cid}.scope\n"
    )


NOTEBOOK = PodMeta(
    uid=NB_UID,
    namespace="team-a",
    name="nb-alice-0",
    labels={"gpuscope.io/project": "vision"},
    owner_kind="Notebook",
    containers={NB_CID: "notebook"},
)
POD_A = PodMeta(
    uid=A_UID,
    namespace="team-b",
    name="train-a",
    labels={"kueue.x-k8s.io/queue-name": "research"},
    owner_kind="Job",
    containers={A_CID: "main"},
)
POD_B = PodMeta(
    uid=B_UID,
    namespace="team-c",
    name="infer-b",
    owner_kind="ReplicaSet",
    containers={B_CID: "server"},
)


class FakeMetadata:
    """A PodMetadataSource over a fixed list of pods."""

    def __init__(self, *pods: PodMeta) -> None:
        self._pods = {p.uid: p for p in pods}

    def pods(self) -> Mapping[str, PodMeta]:
        return self._pods

    def by_name(self, namespace: str, name: str) -> PodMeta | None:
        return next(
            (p for p in self._pods.values() if (p.namespace, p.name) == (namespace, name)), None
        )


class FakePodResources:
    """A pod-resources client that returns fixed allocations or raises."""

    def __init__(self, *allocations: DeviceAllocation, error: Exception | None = None) -> None:
        self.allocations = list(allocations)
        self.error = error
        self.calls = 0

    def list_gpu_allocations(self) -> Sequence[DeviceAllocation]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.allocations


def _attributor(
    procfs: Path, pod_resources: FakePodResources | None, metadata: Any
) -> KubeletAttributor:
    return KubeletAttributor(procfs, pod_resources, metadata, WorkloadSettings())


def _by_pod(workloads: Sequence[GpuWorkload]) -> dict[tuple[str, str, str], GpuWorkload]:
    return {(w.gpu_uuid, w.namespace, w.pod): w for w in workloads}


def test_idle_notebook_holding_gpu_without_process(tmp_path: Path) -> None:
    """A notebook that holds a GPU and runs nothing is a workload: interactive, its project."""
    alloc = DeviceAllocation("team-a", "nb-alice-0", "notebook", "nvidia.com/gpu", GPU0)
    attributor = _attributor(tmp_path, FakePodResources(alloc), FakeMetadata(NOTEBOOK))
    workloads = attributor.attribute([GpuReading(index=0, uuid=GPU0, processes=())])
    assert workloads == [
        GpuWorkload(
            gpu_uuid=GPU0,
            namespace="team-a",
            pod="nb-alice-0",
            container="notebook",
            workload_kind=WorkloadKind.INTERACTIVE,
            project="vision",
            memory_used_bytes=None,
            utilization_ratio=None,
        )
    ]
    assert workloads[0].interactive
    assert attributor.last_errors == []


def test_two_pods_sharing_one_gpu_each_get_their_own_use(tmp_path: Path) -> None:
    """Time-sliced pods on one GPU: per-pod memory and utilization sums from their processes.

    pod-resources shows only pod A; pod B is found through its process's cgroup.
    """
    _write_proc(tmp_path, 100, A_UID, A_CID)
    _write_proc(tmp_path, 101, A_UID, A_CID)
    _write_proc(tmp_path, 200, B_UID, B_CID)
    alloc = DeviceAllocation("team-b", "train-a", "main", "nvidia.com/gpu.shared", GPU0)
    gpu = GpuReading(
        index=0,
        uuid=GPU0,
        processes=(
            GpuProcess(pid=100, used_memory_bytes=1_000, sm_utilization_ratio=0.25),
            GpuProcess(pid=101, used_memory_bytes=500, sm_utilization_ratio=0.15),
            GpuProcess(pid=200, used_memory_bytes=4_000, sm_utilization_ratio=0.5),
            GpuProcess(pid=300, used_memory_bytes=9_999, sm_utilization_ratio=0.9),  # exited
        ),
    )
    attributor = _attributor(tmp_path, FakePodResources(alloc), FakeMetadata(POD_A, POD_B))
    got = _by_pod(attributor.attribute([gpu]))
    assert set(got) == {(GPU0, "team-b", "train-a"), (GPU0, "team-c", "infer-b")}
    a = got[(GPU0, "team-b", "train-a")]
    assert (a.container, a.memory_used_bytes) == ("main", 1_500)
    assert a.utilization_ratio == pytest.approx(0.40)
    assert (a.workload_kind, a.project) == (WorkloadKind.BATCH, "research")
    b = got[(GPU0, "team-c", "infer-b")]
    assert (b.container, b.memory_used_bytes) == ("server", 4_000)
    assert b.utilization_ratio == pytest.approx(0.5)
    assert (b.workload_kind, b.project) == (WorkloadKind.INFERENCE, "team-c")


def test_utilization_capped_and_none_without_samples(tmp_path: Path) -> None:
    """Summed samples cap at 1.0; a container with no sample has no utilization, not 0."""
    _write_proc(tmp_path, 100, A_UID, A_CID)
    _write_proc(tmp_path, 101, A_UID, A_CID)
    _write_proc(tmp_path, 200, B_UID, B_CID)
    gpus = [
        GpuReading(
            index=0,
            uuid=GPU0,
            processes=(
                GpuProcess(pid=100, used_memory_bytes=1, sm_utilization_ratio=0.7),
                GpuProcess(pid=101, used_memory_bytes=1, sm_utilization_ratio=0.6),
            ),
        ),
        GpuReading(index=1, uuid=GPU1, processes=(GpuProcess(pid=200),)),
    ]
    attributor = _attributor(tmp_path, None, FakeMetadata(POD_A, POD_B))
    got = _by_pod(attributor.attribute(gpus))
    assert got[(GPU0, "team-b", "train-a")].utilization_ratio == 1.0
    b = got[(GPU1, "team-c", "infer-b")]
    assert (b.utilization_ratio, b.memory_used_bytes) == (None, None)


def test_pod_resources_failing_keeps_process_workloads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A kubelet error degrades to process-based attribution, warned once per streak."""
    _write_proc(tmp_path, 100, A_UID, A_CID)
    pod_resources = FakePodResources(error=SourceError("pod-resources socket x does not exist"))
    attributor = _attributor(tmp_path, pod_resources, FakeMetadata(POD_A))
    gpu = GpuReading(
        index=0,
        uuid=GPU0,
        processes=(GpuProcess(pid=100, used_memory_bytes=7, sm_utilization_ratio=0.1),),
    )
    with caplog.at_level(logging.WARNING, logger="gpuscope.agent.workloads.attribution"):
        first = attributor.attribute([gpu])
        second = attributor.attribute([gpu])
    assert first == second
    assert [(w.namespace, w.pod, w.container, w.memory_used_bytes) for w in first] == [
        ("team-b", "train-a", "main", 7)
    ]
    assert attributor.last_errors == ["pod_resources: pod-resources socket x does not exist"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "part=pod_resources" in warnings[0].getMessage()
    pod_resources.error = None
    attributor.attribute([gpu])
    assert attributor.last_errors == []


def test_metadata_missing_gives_unknown_kind_and_namespace_project(tmp_path: Path) -> None:
    """Without metadata a holder is of unknown kind with its namespace as project.

    The only unknown pod on a GPU held by one container is taken to be that container, so
    its process use lands on the holder rather than on a nameless pod.
    """
    _write_proc(tmp_path, 100, NB_UID, NB_CID)
    alloc = DeviceAllocation("team-a", "nb-alice-0", "notebook", "nvidia.com/gpu", GPU0)
    gpu = GpuReading(
        index=0,
        uuid=GPU0,
        processes=(GpuProcess(pid=100, used_memory_bytes=64, sm_utilization_ratio=0.0),),
    )
    attributor = _attributor(tmp_path, FakePodResources(alloc), NoPodMetadata())
    assert attributor.attribute([gpu]) == [
        GpuWorkload(
            gpu_uuid=GPU0,
            namespace="team-a",
            pod="nb-alice-0",
            container="notebook",
            workload_kind=WorkloadKind.UNKNOWN,
            project="team-a",
            memory_used_bytes=64,
            utilization_ratio=0.0,
        )
    ]


def test_unknown_pods_sharing_a_gpu_are_not_guessed(tmp_path: Path) -> None:
    """Two unknown pods on one GPU stay apart under their UIDs, not merged into the holder."""
    _write_proc(tmp_path, 100, A_UID, A_CID)
    _write_proc(tmp_path, 200, B_UID, B_CID)
    alloc = DeviceAllocation("team-b", "train-a", "main", "nvidia.com/gpu", GPU0)
    gpu = GpuReading(
        index=0,
        uuid=GPU0,
        processes=(
            GpuProcess(pid=100, used_memory_bytes=1),
            GpuProcess(pid=200, used_memory_bytes=2),
        ),
    )
    got = _by_pod(_attributor(tmp_path, FakePodResources(alloc), NoPodMetadata()).attribute([gpu]))
    assert got[(GPU0, "team-b", "train-a")].memory_used_bytes is None
    assert got[(GPU0, "", A_UID)].memory_used_bytes == 1
    assert got[(GPU0, "", B_UID)].memory_used_bytes == 2
    assert got[(GPU0, "", B_UID)].container == B_CID[:12]


def test_pods_named_by_gpu_source_become_workloads(tmp_path: Path) -> None:
    """dcgm-exporter's own pod mapping adds workloads, merged with the kubelet's."""
    alloc = DeviceAllocation("team-a", "nb-alice-0", "notebook", "nvidia.com/gpu", GPU0)
    gpus = [
        GpuReading(index=0, uuid=GPU0, pods=(PodRef("team-a", "nb-alice-0", "notebook"),)),
        GpuReading(index=1, uuid=GPU1, pods=(PodRef("team-c", "infer-b", "server", uid=B_UID),)),
    ]
    attributor = _attributor(tmp_path, FakePodResources(alloc), FakeMetadata(NOTEBOOK, POD_B))
    got = _by_pod(attributor.attribute(gpus))
    assert set(got) == {(GPU0, "team-a", "nb-alice-0"), (GPU1, "team-c", "infer-b")}
    assert got[(GPU0, "team-a", "nb-alice-0")].workload_kind is WorkloadKind.INTERACTIVE
    assert got[(GPU1, "team-c", "infer-b")].workload_kind is WorkloadKind.INFERENCE


def test_broken_metadata_source_never_fails_attribution(tmp_path: Path) -> None:
    """A metadata source that raises degrades to unknown kinds and is reported."""

    class Broken:
        def pods(self) -> Mapping[str, PodMeta]:
            raise RuntimeError("boom")

        def by_name(self, namespace: str, name: str) -> PodMeta | None:
            raise RuntimeError("boom")

    alloc = DeviceAllocation("team-a", "nb-alice-0", "notebook", "nvidia.com/gpu", GPU0)
    attributor = _attributor(tmp_path, FakePodResources(alloc), Broken())
    [workload] = attributor.attribute([GpuReading(index=0, uuid=GPU0)])
    assert (workload.workload_kind, workload.project) == (WorkloadKind.UNKNOWN, "team-a")
    assert attributor.last_errors == ["pod_metadata: boom"]


# -- ApiServerPodMetadata -------------------------------------------------------------------


def _v1pod(uid: str, namespace: str, name: str, owner: str) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(
            uid=uid,
            namespace=namespace,
            name=name,
            labels={"gpuscope.io/project": "vision"},
            annotations={"gpu-fraction": "0.5"},
            owner_references=[
                V1OwnerReference(api_version="v1", kind="Other", name="x", uid="u1"),
                V1OwnerReference(
                    api_version="apps/v1", kind=owner, name="o", uid="u2", controller=True
                ),
            ],
        ),
        spec=V1PodSpec(containers=[], priority=-10),
        status=V1PodStatus(
            container_statuses=[
                V1ContainerStatus(
                    name="main",
                    container_id=f"containerd://{A_CID}",
                    image="img",
                    image_id="",
                    ready=True,
                    restart_count=0,
                )
            ]
        ),
    )


class FakeCoreV1:
    """Counts list calls; raises ApiException while ``fail`` is set."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = False
        self.items = [_v1pod(A_UID, "team-b", "train-a", "ReplicaSet")]

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> V1PodList:
        self.calls.append(kwargs)
        if self.fail:
            raise ApiException(status=503, reason="Service Unavailable")
        return V1PodList(items=list(self.items))


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_pod_meta_from_api_reads_owner_priority_and_container_ids() -> None:
    """Controller owner (ReplicaSet kept), priority, labels and prefix-less container ids."""
    meta = pod_meta_from_api(_v1pod(A_UID, "team-b", "train-a", "ReplicaSet"))
    assert meta is not None
    assert (meta.uid, meta.namespace, meta.name) == (A_UID, "team-b", "train-a")
    assert meta.owner_kind == "ReplicaSet"
    assert meta.priority == -10
    assert dict(meta.containers) == {A_CID: "main"}
    assert meta.labels["gpuscope.io/project"] == "vision"
    assert meta.annotations["gpu-fraction"] == "0.5"


def test_apiserver_metadata_caches_for_ttl() -> None:
    """One list per TTL, of this node's pods only; lookups by UID and by name."""
    api, clock = FakeCoreV1(), FakeClock()
    source = ApiServerPodMetadata("node-1", ttl_seconds=30.0, clock=clock, api=api)
    assert set(source.pods()) == {A_UID}
    clock.now += 29.0
    source.pods()
    assert source.by_name("team-b", "train-a") is not None
    assert source.by_name("team-b", "absent") is None
    assert len(api.calls) == 1
    assert api.calls[0]["field_selector"] == "spec.nodeName=node-1"
    clock.now += 1.5
    api.items = []
    assert source.pods() == {}
    assert len(api.calls) == 2


def test_apiserver_metadata_serves_stale_cache_on_api_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An API error keeps the last good pods, warns once per streak and retries after a TTL."""
    api, clock = FakeCoreV1(), FakeClock()
    source = ApiServerPodMetadata("node-1", ttl_seconds=10.0, clock=clock, api=api)
    good = dict(source.pods())
    api.fail = True
    with caplog.at_level(logging.WARNING, logger="gpuscope.agent.workloads.podmeta"):
        for _ in range(3):
            clock.now += 11.0
            assert dict(source.pods()) == good
            source.pods()  # within the TTL of the failure: no new call
    assert len(api.calls) == 4
    assert "Service Unavailable" in source.last_error
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    api.fail = False
    api.items = []
    clock.now += 11.0
    assert source.pods() == {}
    assert source.last_error == ""


def test_apiserver_metadata_without_config_degrades() -> None:
    """Outside a cluster the lazy in-cluster config fails: empty metadata, no exception."""

    def no_config() -> Any:
        raise RuntimeError("Service host/port is not set.")

    source = ApiServerPodMetadata("n", ttl_seconds=5.0, clock=FakeClock(), api_factory=no_config)
    assert source.pods() == {}
    assert "not set" in source.last_error

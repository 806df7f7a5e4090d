"""The agent labels workloads holding DRA devices with the right GPU: a PodResources
answer with ``dynamic_resources`` (the real generated protobuf messages) joined to the
node's ResourceSlices (tests/fakes/dra_objects.py, shaped as the driver publishes them).

Whole GPUs by their ``uuid``; static MIG devices by their own ``uuid``; dynamic MIG
placements (no uuid until prepared) by ``parentUUID`` + ``profile`` against the MIG
readings. Pods sharing one device through one claim each get their own processes' use,
never the device's value copied to each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuscope.agent.proto import podresources_v1_pb2 as pb2
from gpuscope.agent.workloads.attribution import KubeletAttributor
from gpuscope.agent.workloads.dra import SliceSource, identities_from_slices
from gpuscope.agent.workloads.podmeta import PodMeta
from gpuscope.agent.workloads.podresources import DeviceAllocation, dynamic_allocations
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.records import GpuProcess, GpuReading, WorkloadKind
from gpuscope.core.series import workload_series
from tests.fakes import dra_objects as d

NODE = "dra-0"
GPU0, GPU1, GPU2 = (f"GPU-{i}{i}{i}{i}0000-0000-0000-0000-000000000000" for i in range(3))
MIG_STATIC = "MIG-aaaaaaaa-0000-0000-0000-000000000001"
MIG_DYN_A, MIG_DYN_B = (
    "MIG-bbbbbbbb-0000-0000-0000-00000000000a",
    "MIG-bbbbbbbb-0000-0000-0000-00000000000b",
)
A_UID, B_UID, C_UID = (f"{c * 8}-1111-2222-3333-444444444444" for c in "abc")
A_CID, B_CID, C_CID = ("a" * 64, "b" * 64, "c" * 64)


def slices() -> list[dict[str, Any]]:
    """gpu-0 and gpu-1 whole (gpu-1 shared), a static 1g MIG device of GPU2 and two dynamic
    3g placements of GPU2 (no uuid); an older generation of the pool says gpu-0 is another
    GPU and must be ignored."""
    cs = "gpu-2-counters"
    dyn = [d.mig_device(2, GPU2, "3g.40gb", 9, s, counter_set=cs, slices=4) for s in (0, 4)]
    return [
        d.resource_slice(NODE, [d.gpu_device(0, "GPU-stale")], generation=1),
        d.resource_slice(NODE, [d.gpu_device(0, GPU0), d.gpu_device(1, GPU1, shared=True),
                                d.mig_device(2, GPU2, "1g.10gb", 19, 6, MIG_STATIC), *dyn],
                         generation=2, count=2, index=0),
        d.resource_slice(NODE, shared_counters=[d.counter_set(cs, 8)], generation=2, count=2,
                         index=1),
    ]  # fmt: skip


def response() -> Any:
    """What the kubelet answers: pod a holds gpu-0 and the static MIG device (claim
    ``a-gpus``); b and c share gpu-1 through one claim; c also holds a dynamic 3g
    placement; a device-plugin GPU and a non-GPU DRA device for contrast."""

    def claim(ns: str, name: str, *devices: str, driver: str = "gpu.nvidia.com") -> Any:
        return pb2.DynamicResource(
            claim_name=name,
            claim_namespace=ns,
            claim_resources=[
                pb2.ClaimResource(
                    cdi_devices=[pb2.CDIDevice(name=f"k8s.{driver}/claim={name}-{dev}")],
                    driver_name=driver, pool_name=NODE, device_name=dev,
                )
                for dev in devices
            ],
        )  # fmt: skip

    dyn = "gpu-2-mig-3g40gb-9-4"
    return pb2.ListPodResourcesResponse(pod_resources=[
        pb2.PodResources(name="a", namespace="ml", containers=[pb2.ContainerResources(
            name="main", dynamic_resources=[claim("ml", "a-gpus", "gpu-0", "gpu-2-mig-1g10gb-19-6"),
                                            claim("ml", "a-nic", "eth1", driver="sriov.example.com")])]),
        pb2.PodResources(name="b", namespace="serve", containers=[pb2.ContainerResources(
            name="srv", dynamic_resources=[claim("serve", "shared-gpu", "gpu-1")])]),
        pb2.PodResources(name="c", namespace="serve", containers=[pb2.ContainerResources(
            name="srv", dynamic_resources=[claim("serve", "shared-gpu", "gpu-1"),
                                           claim("serve", "c-mig", dyn)])]),
        pb2.PodResources(name="dp", namespace="old", containers=[pb2.ContainerResources(
            name="main", devices=[pb2.ContainerDevices(resource_name="nvidia.com/gpu",
                                                       device_ids=["GPU-plugin"])])]),
    ])  # fmt: skip


def readings() -> list[GpuReading]:
    """The node's readings: three GPUs, and GPU2's MIG instances (the static 1g and the
    3g the driver created for c's placement), with per-process samples on gpu-1."""
    return [
        GpuReading(index=0, uuid=GPU0),
        GpuReading(index=1, uuid=GPU1, processes=(
            GpuProcess(pid=11, used_memory_bytes=2 << 30, sm_utilization_ratio=0.6),
            GpuProcess(pid=12, used_memory_bytes=1 << 30, sm_utilization_ratio=0.1))),
        GpuReading(index=2, uuid=GPU2, mig_mode="enabled"),
        GpuReading(index=2, uuid=MIG_STATIC, mig_instance="13", mig_profile="1g.10gb",
                   parent_uuid=GPU2),
        GpuReading(index=2, uuid=MIG_DYN_B, mig_instance="2", mig_profile="3g.40gb",
                   parent_uuid=GPU2),
    ]  # fmt: skip


class Pods:
    """Pod metadata of the node."""

    def __init__(self) -> None:
        self._pods = {
            A_UID: PodMeta(A_UID, "ml", "a", owner_kind="Job", containers={A_CID: "main"}),
            B_UID: PodMeta(B_UID, "serve", "b", owner_kind="ReplicaSet", containers={B_CID: "srv"}),
            C_UID: PodMeta(C_UID, "serve", "c", owner_kind="ReplicaSet", containers={C_CID: "srv"}),
        }  # fmt: skip

    def pods(self) -> Mapping[str, PodMeta]:
        return self._pods

    def by_name(self, namespace: str, name: str) -> PodMeta | None:
        return next(
            (p for p in self._pods.values() if (p.namespace, p.name) == (namespace, name)), None
        )


class Kubelet:
    def __init__(self, allocations: Sequence[DeviceAllocation]) -> None:
        self.allocations = allocations

    def list_gpu_allocations(self) -> Sequence[DeviceAllocation]:
        return self.allocations


def _proc(root: Path, pid: int, uid: str, cid: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n"
    )


def test_dynamic_resources_are_labelled_with_the_right_gpu(tmp_path: Path) -> None:
    """a: GPU0 and the static MIG device; b and c: GPU1 (shared), each with its own
    process's use (0.6 and 0.1, not the device's 0.7 twice); c: the dynamic 3g placement
    at slice 4 is the 3g MIG reading of GPU2. The sriov NIC is no GPU; the stale generation's
    UUID appears nowhere."""
    identities = identities_from_slices(slices())
    allocations = dynamic_allocations(response(), identities)
    assert {(a.pod, a.device_id, a.parent_uuid, a.profile) for a in allocations} == {
        ("a", GPU0, "", ""), ("a", MIG_STATIC, "", ""), ("b", GPU1, "", ""), ("c", GPU1, "", ""),
        ("c", "", GPU2, "3g.40gb"),
    }  # fmt: skip
    _proc(tmp_path, 11, B_UID, B_CID)
    _proc(tmp_path, 12, C_UID, C_CID)
    attributor = KubeletAttributor(tmp_path, Kubelet(allocations), Pods(), WorkloadSettings())
    gpus = readings()
    workloads = {(w.gpu_uuid, w.pod): w for w in attributor.attribute(gpus)}
    assert set(workloads) == {(GPU0, "a"), (MIG_STATIC, "a"), (GPU1, "b"), (GPU1, "c"),
                              (MIG_DYN_B, "c")}  # fmt: skip
    assert workloads[(GPU1, "b")].utilization_ratio == 0.6
    assert workloads[(GPU1, "c")].utilization_ratio == 0.1
    assert workloads[(GPU1, "b")].memory_used_bytes == 2 << 30
    assert workloads[(GPU0, "a")].utilization_ratio is None  # holds it, runs nothing
    assert workloads[(GPU0, "a")].workload_kind is WorkloadKind.BATCH
    by_uuid = {g.uuid: g for g in gpus}
    (info, *_) = workload_series(NODE, workloads[(MIG_DYN_B, "c")], by_uuid)
    name, labels, _ = info
    assert name == "gpuscope_gpu_workload_info"
    assert labels[:7] == [NODE, "2", MIG_DYN_B, "2", "serve", "c", "srv"]
    assert attributor.last_errors == []


def test_slice_source_lists_its_node_only_and_keeps_the_last_answer() -> None:
    """The agent asks for its node's slices (field selector), once per TTL; a failure
    serves the last good answer."""

    class Api:
        def __init__(self) -> None:
            self.calls: list[str] = []
            self.fail = False

        def list_resource_slice(self, field_selector: str, **_: Any) -> Any:
            self.calls.append(field_selector)
            if self.fail:
                raise OSError("connection refused")
            import json

            class Resp:
                data = json.dumps(d.kube_list(slices())).encode()

            return Resp()

    now = [0.0]
    api = Api()
    source = SliceSource(NODE, 30.0, clock=lambda: now[0], api=api)
    first = dict(source.identities())
    assert first[("gpu.nvidia.com", NODE, "gpu-0")].uuid == GPU0
    source.identities()
    assert api.calls == [f"spec.nodeName={NODE}"]
    now[0] = 31.0
    api.fail = True
    assert dict(source.identities()) == first
    assert "connection refused" in source.last_error

"""Which containers the kubelet gave which GPUs, from its pod-resources gRPC API.

The per-process view (:mod:`gpuscope.agent.workloads.cgroup`) sees only pods that run something on a
GPU right now. A notebook that holds a GPU and does nothing, the waste gpuscope exists to find,
has no process at all; only the kubelet's device assignments show it. This is the
``v1.PodResourcesLister/List`` call that dcgm-exporter also makes, on the kubelet's unix
socket.

The generated protobuf modules are untyped; this module is their only importer and reads
them through small protocols so the rest of the agent stays type-checked.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import grpc

from gpuscope.agent.proto import podresources_v1_pb2 as pb2
from gpuscope.agent.proto import podresources_v1_pb2_grpc as pb2_grpc
from gpuscope.agent.workloads.dra import DeviceIdentity, DeviceKey
from gpuscope.core import kube_names as names
from gpuscope.core.errors import SourceError

log = logging.getLogger(__name__)

#: Extended resources that are GPUs: whole GPUs, MIG slices and time-sliced/MPS replicas.
DEFAULT_GPU_RESOURCES: tuple[str, ...] = (
    names.GPU_RESOURCE,
    names.SHARED_GPU_RESOURCE,
    names.MIG_RESOURCE_PREFIX + "*",
)
#: The kubelet's own client allows responses this large; a busy node's list is big.
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class DeviceAllocation:
    """One GPU (or MIG device) the kubelet assigned to one container."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    #: A GPU UUID (``GPU-...``) or MIG UUID (``MIG-...``); "" for a DRA MIG placement the
    #: slices name only by parent and profile (attribution matches it to a reading).
    device_id: str
    #: DRA: the parent GPU and MIG profile of a placement without its own UUID.
    parent_uuid: str = ""
    profile: str = ""


class _Devices(Protocol):
    resource_name: str
    device_ids: Sequence[str]


class _ClaimResource(Protocol):
    driver_name: str
    pool_name: str
    device_name: str


class _Dynamic(Protocol):
    claim_name: str
    claim_namespace: str
    claim_resources: Sequence[_ClaimResource]


class _Container(Protocol):
    name: str
    devices: Sequence[_Devices]


class _Pod(Protocol):
    name: str
    namespace: str
    containers: Sequence[_Container]


class _ListResponse(Protocol):
    pod_resources: Sequence[_Pod]


def is_gpu_resource(resource_name: str, patterns: Sequence[str] = DEFAULT_GPU_RESOURCES) -> bool:
    """Whether ``resource_name`` matches one of the shell-style ``patterns``."""
    return any(fnmatch.fnmatchcase(resource_name, p) for p in patterns)


def gpu_uuid_of_device(device_id: str) -> str:
    """The GPU UUID in a device id.

    NVIDIA's device plugin names time-sliced and MPS replicas ``<uuid>::<replica>``; every
    replica is the same GPU, so the suffix goes.
    """
    uuid, _, _ = device_id.partition("::")
    return uuid.strip()


def allocations_from_response(
    response: _ListResponse, patterns: Sequence[str] = DEFAULT_GPU_RESOURCES
) -> list[DeviceAllocation]:
    """The GPU assignments in a ``ListPodResourcesResponse``, each device once per container."""
    out: list[DeviceAllocation] = []
    seen: set[DeviceAllocation] = set()
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, patterns):
                    continue
                for device_id in devices.device_ids:
                    uuid = gpu_uuid_of_device(device_id)
                    if not uuid:
                        continue
                    alloc = DeviceAllocation(
                        namespace=pod.namespace,
                        pod=pod.name,
                        container=container.name,
                        resource_name=devices.resource_name,
                        device_id=uuid,
                    )
                    if alloc not in seen:
                        seen.add(alloc)
                        out.append(alloc)
    return out


def dynamic_allocations(
    response: _ListResponse, identities: Mapping[DeviceKey, DeviceIdentity]
) -> list[DeviceAllocation]:
    """The DRA devices in a ``ListPodResourcesResponse`` that the node's ResourceSlices
    say are GPUs or MIG devices (:mod:`gpuscope.agent.workloads.dra`), each once per container; the
    resource name is ``<driver>/<claim namespace>/<claim name>``."""
    out: list[DeviceAllocation] = []
    seen: set[DeviceAllocation] = set()
    for pod in response.pod_resources:
        for container in pod.containers:
            dynamic: Sequence[_Dynamic] = getattr(container, "dynamic_resources", ()) or ()
            for claim in dynamic:
                for res in claim.claim_resources:
                    identity = identities.get((res.driver_name, res.pool_name, res.device_name))
                    if identity is None or identity.type not in ("gpu", "mig"):
                        continue
                    alloc = DeviceAllocation(
                        namespace=pod.namespace,
                        pod=pod.name,
                        container=container.name,
                        resource_name=f"{res.driver_name}/{claim.claim_namespace}/"
                        f"{claim.claim_name}",
                        device_id=identity.uuid,
                        parent_uuid=identity.parent_uuid if not identity.uuid else "",
                        profile=identity.profile if not identity.uuid else "",
                    )
                    if (alloc.device_id or alloc.parent_uuid) and alloc not in seen:
                        seen.add(alloc)
                        out.append(alloc)
    return out


class PodResourcesClient:
    """A client of the kubelet's pod-resources socket that lists GPU assignments.

    The channel is opened on first use and kept; gRPC reconnects it by itself when the
    kubelet restarts. Every failure is a :class:`SourceError` with one line.
    """

    def __init__(
        self,
        socket_path: Path,
        timeout: float = 2.0,
        gpu_resources: Sequence[str] = DEFAULT_GPU_RESOURCES,
        dra_devices: Callable[[], Mapping[DeviceKey, DeviceIdentity]] | None = None,
    ) -> None:
        self.socket_path = Path(socket_path)
        #: This node's DRA device identities (:class:`gpuscope.agent.workloads.dra.SliceSource`),
        #: for ``dynamic_resources``; None: DRA devices are not attributed.
        self.dra_devices = dra_devices
        self.timeout = timeout
        self.gpu_resources = tuple(gpu_resources)
        self._channel: Any = None
        self._stub: Any = None

    def _connect(self) -> Any:
        if self._stub is None:
            self._channel = grpc.insecure_channel(
                f"unix://{self.socket_path}",
                options=[("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES)],
            )
            self._stub = pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def list_gpu_allocations(self) -> list[DeviceAllocation]:
        """Every GPU device assigned to a container on this node.

        Raises :class:`SourceError` when the socket is missing or the call fails or
        takes longer than ``timeout`` seconds.
        """
        if not self.socket_path.exists():
            raise SourceError(f"pod-resources socket {self.socket_path} does not exist")
        stub = self._connect()
        try:
            response = stub.List(pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            name = getattr(code, "name", "UNKNOWN")
            details = exc.details() if hasattr(exc, "details") else str(exc)
            line = " ".join(str(details or "").split())
            raise SourceError(
                f"pod-resources List on {self.socket_path} failed: {name}: {line}"
            ) from None
        allocations = allocations_from_response(cast(_ListResponse, response), self.gpu_resources)
        if self.dra_devices is not None:
            identities = self.dra_devices()
            if identities:
                allocations += dynamic_allocations(cast(_ListResponse, response), identities)
        log.debug("pod-resources listed gpu_allocations=%d", len(allocations))
        return allocations

    def close(self) -> None:
        """Close the channel; a later call opens a new one."""
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None

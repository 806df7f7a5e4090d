"""Which pods hold and use each GPU: the ``gpuscope_gpu_workload_*`` series.

Two views are needed and neither is enough alone (docs/design.md, Metric catalogue):

* the kubelet's device assignments (pod-resources) show who *holds* a GPU, including an
  idle notebook with no process on it, which is the waste to find;
* the driver's per-process list, mapped pid -> cgroup -> pod, shows who *uses* a GPU and
  how much, including several pods time-slicing one GPU that the assignments show once.

A source that names pods itself (dcgm-exporter) adds a third. The three are merged by
(GPU, namespace, pod, container). Any part that fails is left out and noted in
:attr:`KubeletAttributor.last_errors`; attribution never fails the scrape.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from gpuscope.agent.workloads.cgroup import CgroupRef, container_of_pid
from gpuscope.agent.workloads.dra import DeviceIdentity, resolve
from gpuscope.agent.workloads.podmeta import PodMeta, PodMetadataSource
from gpuscope.agent.workloads.podresources import DeviceAllocation
from gpuscope.core.errors import SourceError
from gpuscope.core.records import GpuReading, GpuWorkload, WorkloadKind
from gpuscope.core.workload import WorkloadPolicy, classify

log = logging.getLogger(__name__)

_Key = tuple[str, str, str, str]  # gpu uuid, namespace, pod, container


class PodResourcesLike(Protocol):
    """What attribution needs of
    :class:`gpuscope.agent.workloads.podresources.PodResourcesClient`."""

    def list_gpu_allocations(self) -> Sequence[DeviceAllocation]: ...


@dataclass(slots=True)
class _Usage:
    memory_bytes: int | None = None
    utilization: float | None = None
    meta: PodMeta | None = None

    def add(self, memory_bytes: int | None, utilization: float | None) -> None:
        if memory_bytes is not None:
            self.memory_bytes = (self.memory_bytes or 0) + memory_bytes
        if utilization is not None:
            self.utilization = (self.utilization or 0.0) + utilization


class _Streak:
    """Logs a failing part at WARNING on the first failure of a streak only."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.failing = False

    def failed(self, reason: str) -> None:
        if not self.failing:
            log.warning("attribution degraded part=%s reason=%r", self.part, reason)
        self.failing = True

    def ok(self) -> None:
        if self.failing:
            log.info("attribution recovered part=%s", self.part)
        self.failing = False


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _placed(
    allocations: Sequence[DeviceAllocation], gpus: Sequence[GpuReading]
) -> list[DeviceAllocation]:
    """DRA MIG placements named only by parent GPU and profile, matched to this scrape's
    MIG readings (:func:`gpuscope.agent.workloads.dra.resolve`); those that match none are left
    out."""
    out, taken = [], {a.device_id for a in allocations if a.device_id}
    for alloc in allocations:
        if alloc.device_id:
            out.append(alloc)
            continue
        uuid = resolve(DeviceIdentity("mig", "", alloc.parent_uuid, alloc.profile), gpus, taken)
        if uuid:
            taken.add(uuid)
            out.append(replace(alloc, device_id=uuid))
    return out


class KubeletAttributor:
    """Maps GPUs to pods from pod-resources, per-process cgroups and the GPU source.

    ``pod_resources`` may be ``None`` (no kubelet socket configured): attribution then
    rests on processes and the source's own pod mapping.
    """

    name = "attribution"

    def __init__(
        self,
        procfs_root: Path,
        pod_resources: PodResourcesLike | None,
        metadata: PodMetadataSource,
        workload_settings: WorkloadPolicy,
    ) -> None:
        self.procfs_root = Path(procfs_root)
        self.pod_resources = pod_resources
        self.metadata = metadata
        self.workload_settings = workload_settings
        #: One line per part that failed in the last :meth:`attribute`; empty when whole.
        self.last_errors: list[str] = []
        self._streaks = {
            part: _Streak(part) for part in ("pod_resources", "pod_metadata", "procfs")
        }
        self._procfs_failed = False

    # -- inputs, each of which may fail alone -------------------------------------------

    def _allocations(self) -> list[DeviceAllocation]:
        if self.pod_resources is None:
            return []
        streak = self._streaks["pod_resources"]
        try:
            allocations = list(self.pod_resources.list_gpu_allocations())
        except Exception as exc:  # SourceError expected; anything else degrades the same
            reason = _one_line(exc)
            if not isinstance(exc, SourceError):
                reason = f"{type(exc).__name__}: {reason}"
            self.last_errors.append(f"pod_resources: {reason}")
            streak.failed(reason)
            return []
        streak.ok()
        return allocations

    def _pods_by_uid(self) -> Mapping[str, PodMeta]:
        streak = self._streaks["pod_metadata"]
        try:
            pods = self.metadata.pods()
        except Exception as exc:
            reason = _one_line(exc)
            self.last_errors.append(f"pod_metadata: {reason}")
            streak.failed(reason)
            return {}
        last_error = getattr(self.metadata, "last_error", "")
        if isinstance(last_error, str) and last_error:
            self.last_errors.append(f"pod_metadata: {last_error} (serving cached pods)")
        streak.ok()
        return pods

    def _by_name(self, namespace: str, pod: str) -> PodMeta | None:
        try:
            return self.metadata.by_name(namespace, pod)
        except Exception:  # already reported by _pods_by_uid in the same pass
            return None

    def _cgroup(self, pid: int) -> CgroupRef | None:
        try:
            return container_of_pid(self.procfs_root, pid)
        except Exception as exc:  # container_of_pid handles OSError; this is a last guard
            reason = f"pid={pid} {_one_line(exc)}"
            self.last_errors.append(f"procfs: {reason}")
            self._streaks["procfs"].failed(reason)
            self._procfs_failed = True
            return None

    # -- the merge ----------------------------------------------------------------------

    def attribute(self, gpus: Sequence[GpuReading]) -> list[GpuWorkload]:
        """One workload per (GPU, namespace, pod, container) that holds or uses a GPU."""
        self.last_errors = []
        merged: dict[_Key, _Usage] = {}
        try:
            self._merge(gpus, merged)
        except Exception as exc:  # a bug here must still not fail the scrape
            log.exception("attribution failed reason=%r", _one_line(exc))
            self.last_errors.append(f"attribution: {_one_line(exc)}")
        return [self._workload(key, usage) for key, usage in merged.items()]

    def _merge(self, gpus: Sequence[GpuReading], merged: dict[_Key, _Usage]) -> None:
        allocations = _placed(self._allocations(), gpus)
        pods_by_uid = self._pods_by_uid()

        # (a) Holders, with or without processes.
        held: dict[str, list[DeviceAllocation]] = defaultdict(list)
        for alloc in allocations:
            held[alloc.device_id].append(alloc)
            key = (alloc.device_id, alloc.namespace, alloc.pod, alloc.container)
            merged.setdefault(key, _Usage(meta=self._by_name(alloc.namespace, alloc.pod)))

        # (b) Users, from the processes on each GPU.
        self._procfs_failed = False
        for gpu in gpus:
            unknown_uids: set[str] = set()
            pending: list[tuple[CgroupRef, int | None, float | None]] = []
            for proc in gpu.processes:
                ref = self._cgroup(proc.pid)
                if ref is None:  # not in a pod, exited, or unreadable: skip the pid
                    continue
                pending.append((ref, proc.used_memory_bytes, proc.sm_utilization_ratio))
                if ref.pod_uid not in pods_by_uid:
                    unknown_uids.add(ref.pod_uid)
            for ref, memory, utilization in pending:
                key, meta = self._resolve(gpu.uuid, ref, pods_by_uid, held, len(unknown_uids))
                usage = merged.setdefault(key, _Usage(meta=meta))
                usage.meta = usage.meta or meta
                usage.add(memory, utilization)

            # (c) Pods the GPU source maps itself.
            for ref_pod in gpu.pods:
                meta = pods_by_uid.get(ref_pod.uid) if ref_pod.uid else None
                meta = meta or self._by_name(ref_pod.namespace, ref_pod.pod)
                key = (gpu.uuid, ref_pod.namespace, ref_pod.pod, ref_pod.container)
                usage = merged.setdefault(key, _Usage(meta=meta))
                usage.meta = usage.meta or meta
        if not self._procfs_failed:
            self._streaks["procfs"].ok()

    def _resolve(
        self,
        gpu_uuid: str,
        ref: CgroupRef,
        pods_by_uid: Mapping[str, PodMeta],
        held: Mapping[str, list[DeviceAllocation]],
        unknown_uids_on_gpu: int,
    ) -> tuple[_Key, PodMeta | None]:
        """The workload key of one process's cgroup, and its pod's metadata if known."""
        holders = held.get(gpu_uuid, [])
        meta = pods_by_uid.get(ref.pod_uid)
        if meta is not None:
            container = meta.containers.get(ref.container_id, "")
            if not container:
                # A container id not (yet) in the statuses: if the kubelet gave this GPU to
                # exactly one container of this pod, it is that one.
                names = {
                    a.container
                    for a in holders
                    if (a.namespace, a.pod) == (meta.namespace, meta.name)
                }
                container = names.pop() if len(names) == 1 else ""
            return (gpu_uuid, meta.namespace, meta.name, container), meta
        # No metadata for the pod (none configured, or a pod newer than the cache). If the
        # kubelet gave this GPU to one container only, and only one unknown pod runs on it,
        # and that holder is not known to be some other pod, the process is that holder's.
        distinct = {(a.namespace, a.pod, a.container) for a in holders}
        if len(distinct) == 1 and unknown_uids_on_gpu == 1:
            namespace, pod, container = distinct.pop()
            known = self._by_name(namespace, pod)
            if known is None or known.uid == ref.pod_uid:
                return (gpu_uuid, namespace, pod, container), known
        # Degrade to what the cgroup says: the pod UID and a short container id.
        return (gpu_uuid, "", ref.pod_uid, ref.container_id[:12]), None

    def _workload(self, key: _Key, usage: _Usage) -> GpuWorkload:
        gpu_uuid, namespace, pod, container = key
        if usage.meta is not None:
            settings = self.workload_settings
            found = classify(
                usage.meta.facts(),
                rules=settings.rules,
                preemptible_priority_below=settings.preemptible_priority_below,
                protected_namespaces=settings.protected_namespaces,
            )
            kind, project = found.kind, found.project
        else:
            kind, project = WorkloadKind.UNKNOWN, namespace
        utilization = usage.utilization
        if utilization is not None:
            utilization = min(1.0, max(0.0, utilization))
        return GpuWorkload(
            gpu_uuid=gpu_uuid,
            namespace=namespace,
            pod=pod,
            container=container,
            workload_kind=kind,
            project=project,
            memory_used_bytes=usage.memory_bytes,
            utilization_ratio=utilization,
        )

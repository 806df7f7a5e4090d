"""Labels, owner and containers of the pods on this node, from the API server.

Neither the kubelet's pod-resources API nor a process's cgroup says what a pod *is*: the
workload kind and project come from labels and the owner (docs/design.md, Workloads, projects
and quotas), and only the cgroup's container id links a GPU process to a container name.
The agent asks the API server for the pods of its own node only (``spec.nodeName``), at
most once per TTL, so a cluster of agents costs the API server one small list each per TTL.

A failed list never fails a scrape: the last good answer is kept and served, and the
failure is logged once per streak rather than once per scrape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from gpuscope.core.workload import PodFacts

log = logging.getLogger(__name__)

_EMPTY: Mapping[str, str] = MappingProxyType({})


def strip_runtime_prefix(container_id: str) -> str:
    """``containerd://abc`` (or ``cri-o://``, ``docker://``) -> ``abc``."""
    _, sep, rest = container_id.partition("://")
    return rest if sep else container_id


@dataclass(frozen=True, slots=True)
class PodMeta:
    """What the agent needs to know of one pod."""

    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: Kind of the controlling owner (``ReplicaSet``, ``Job``, ``Notebook``...), or ``""``.
    owner_kind: str = ""
    priority: int | None = None
    #: Container name by runtime container id (no ``containerd://`` prefix).
    containers: Mapping[str, str] = field(default_factory=dict)

    def facts(self) -> PodFacts:
        """The pod as :func:`gpuscope.core.workload.classify` sees it."""
        return PodFacts(
            namespace=self.namespace,
            labels=self.labels,
            annotations=self.annotations,
            owner_kind=self.owner_kind,
            priority=self.priority,
        )


class PodMetadataSource(Protocol):
    """Pods of this node, by UID and by namespace and name."""

    def pods(self) -> Mapping[str, PodMeta]: ...

    def by_name(self, namespace: str, name: str) -> PodMeta | None: ...


class NoPodMetadata:
    """No metadata at all: every workload is of unknown kind, its project its namespace."""

    def pods(self) -> Mapping[str, PodMeta]:
        return {}

    def by_name(self, namespace: str, name: str) -> PodMeta | None:
        return None


def _owner_kind(owner_references: Any) -> str:
    owners = list(owner_references or [])
    for owner in owners:
        if getattr(owner, "controller", False):
            return str(getattr(owner, "kind", "") or "")
    return str(getattr(owners[0], "kind", "") or "") if owners else ""


def pod_meta_from_api(pod: Any) -> PodMeta | None:
    """A :class:`PodMeta` from a ``kubernetes.client.V1Pod``; ``None`` without a UID."""
    metadata = getattr(pod, "metadata", None)
    uid = str(getattr(metadata, "uid", "") or "")
    if metadata is None or not uid:
        return None
    spec = getattr(pod, "spec", None)
    status = getattr(pod, "status", None)
    containers: dict[str, str] = {}
    for attr in ("container_statuses", "init_container_statuses", "ephemeral_container_statuses"):
        for cs in getattr(status, attr, None) or []:
            cid = strip_runtime_prefix(str(getattr(cs, "container_id", "") or ""))
            if cid:
                containers[cid] = str(getattr(cs, "name", "") or "")
    priority = getattr(spec, "priority", None)
    return PodMeta(
        uid=uid,
        namespace=str(getattr(metadata, "namespace", "") or ""),
        name=str(getattr(metadata, "name", "") or ""),
        labels=MappingProxyType(dict(getattr(metadata, "labels", None) or {})),
        annotations=MappingProxyType(dict(getattr(metadata, "annotations", None) or {})),
        owner_kind=_owner_kind(getattr(metadata, "owner_references", None)),
        priority=int(priority) if priority is not None else None,
        containers=MappingProxyType(containers),
    )


def _default_api() -> Any:
    """The API server as the pod's service account (made only when first needed), without
    the Kubernetes client (gpuscope/agent/workloads/kubeapi.py)."""
    from gpuscope.agent.workloads.kubeapi import InClusterApi

    return InClusterApi()


class ApiServerPodMetadata:
    """Pods of ``node`` from the API server, cached for ``ttl_seconds``.

    ``api`` is anything with ``list_pod_for_all_namespaces`` as the Kubernetes client's
    ``CoreV1Api`` has it; by default the agent's own in-cluster client
    (:class:`gpuscope.agent.workloads.kubeapi.InClusterApi`) is built on first use. After a failed
    list the stale cache is served and the next try waits a TTL too, so an API server
    outage does not slow every scrape by a timeout.
    """

    def __init__(
        self,
        node: str,
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        api: Any | None = None,
        *,
        request_timeout_seconds: float = 5.0,
        api_factory: Callable[[], Any] = _default_api,
    ) -> None:
        self.node = node
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._api = api
        self._api_factory = api_factory
        self._request_timeout = request_timeout_seconds
        self._by_uid: Mapping[str, PodMeta] = MappingProxyType({})
        self._by_name: dict[tuple[str, str], PodMeta] = {}
        self._fetched_at: float | None = None
        self._failing = False
        #: The reason of the last failed list, ``""`` after a good one.
        self.last_error = ""

    def _fresh(self, now: float) -> bool:
        return self._fetched_at is not None and now - self._fetched_at < self.ttl_seconds

    def _refresh(self, now: float) -> None:
        self._fetched_at = now
        try:
            if self._api is None:
                self._api = self._api_factory()
            result = self._api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node}",
                _request_timeout=self._request_timeout,
            )
            metas = [m for m in (pod_meta_from_api(p) for p in result.items or []) if m]
        except Exception as exc:  # any failure keeps the last good cache
            reason = " ".join(str(getattr(exc, "reason", "") or exc).split()) or type(exc).__name__
            self.last_error = f"{type(exc).__name__}: {reason}"
            if not self._failing:
                log.warning(
                    "pod metadata list failed node=%s reason=%r serving_cached_pods=%d",
                    self.node,
                    self.last_error,
                    len(self._by_uid),
                )
            self._failing = True
            return
        if self._failing:
            log.info("pod metadata list recovered node=%s pods=%d", self.node, len(metas))
        self._failing = False
        self.last_error = ""
        self._by_uid = MappingProxyType({m.uid: m for m in metas})
        self._by_name = {(m.namespace, m.name): m for m in metas}

    def pods(self) -> Mapping[str, PodMeta]:
        """Pods of this node by UID, at most ``ttl_seconds`` old unless the API is failing."""
        now = self._clock()
        if not self._fresh(now):
            self._refresh(now)
        return self._by_uid

    def by_name(self, namespace: str, name: str) -> PodMeta | None:
        """The pod ``namespace/name`` of this node, or ``None``."""
        self.pods()
        return self._by_name.get((namespace, name))

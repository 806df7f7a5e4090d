"""The one wrapper around the Kubernetes API that actions use, with retries and error classes.

Everything the executor does to a cluster goes through :class:`ClusterClient`: read a pod
or node again before acting, delete or evict a pod (with its UID as a precondition, so a
pod re-created under the same name is never the one removed), annotate a pod, stop a
Kubeflow Notebook, cordon and uncordon a node, and record a Kubernetes Event.

Every mutating call takes ``dry_run``: then it is sent as a server-side dry run
(``dryRun=All``), which the API server validates, authorizes (RBAC) and admits without
persisting, so a dry run reports "forbidden" or "not found" exactly as the real run would,
and changes nothing.

Errors are one line and typed by what the caller should do next: :class:`NotFound` (the
object is gone: nothing to do), :class:`Conflict` (it changed under us: re-read, next
run), :class:`DisruptionBlocked` (an eviction a PodDisruptionBudget forbids now: not now,
try next run), :class:`Forbidden` (RBAC: a configuration problem, stop), and
:class:`KubeError` for the rest. 5xx and connection errors are retried with backoff first
(429 too, except for evictions, where it is the budget's answer).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from kubernetes import client

from collector.inventory import (
    InventoryError,
    RetryPolicy,
    call_with_retry,
    kube_configuration,
    may_pass_later,
)
from gpuscope.errors import SourceError
from gpuscope.settings import CollectorSettings

log = logging.getLogger(__name__)
T = TypeVar("T")
Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
#: The annotation Kubeflow's notebook controller reads to scale a Notebook to zero.
KUBEFLOW_STOPPED = "kubeflow-resource-stopped"
NOTEBOOKS = ("kubeflow.org", "v1", "notebooks")
COMPONENT = "gpuscope"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"


class KubeError(SourceError):
    """The API server refused or failed a request; one line with the status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFound(KubeError):
    """404: the object is gone; the action has nothing left to do."""


class Conflict(KubeError):
    """409: the object changed (or is another one with the same name); re-read first."""


class Forbidden(KubeError):
    """403: RBAC does not allow the verb; fix the Role, not a retry."""


class DisruptionBlocked(KubeError):
    """429 on an eviction: a PodDisruptionBudget allows no disruption now."""


_BY_STATUS: dict[int, type[KubeError]] = {404: NotFound, 409: Conflict, 403: Forbidden}


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"


def _not_429(status: int) -> bool:
    return status >= 500


class ClusterClient:
    """Reads and changes a cluster through the official client; see the module docstring."""

    def __init__(
        self,
        configuration: client.Configuration | str,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        request_timeout_seconds: float = 30.0,
    ) -> None:
        if isinstance(configuration, str):
            host, configuration = configuration, client.Configuration()
            configuration.host = host.rstrip("/")
        configuration.retries = 0  # retries are ours, with backoff
        self.host: str = configuration.host
        self._api = client.ApiClient(configuration)
        self._core = client.CoreV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)
        self._retry, self._sleep = retry or RetryPolicy(), sleep
        self._timeout = (5, request_timeout_seconds)

    @classmethod
    def from_setting(cls, access: CollectorSettings, **kwargs: Any) -> ClusterClient | None:
        """``collector.kubernetes``: ``none`` gives None, a URL that server (with the
        ``collector.kubernetes_*`` CA, certificate and token files), ``auto`` the in-cluster
        account or kubeconfig (None when there is neither)."""
        mode = access.kubernetes
        try:
            cfg = kube_configuration(access)
        except InventoryError as exc:
            if mode == "auto":
                log.info("no Kubernetes API; actions plan only reason=%s", exc)
                return None
            raise KubeError(f"collector.kubernetes={mode}: {exc}") from None
        return None if cfg is None else cls(cfg, **kwargs)

    def close(self) -> None:
        self._api.close()

    # -- plumbing ---------------------------------------------------------------------------
    def _call(
        self, what: str, fn: Callable[[], T], retryable: Callable[[int], bool] = may_pass_later
    ) -> T:
        try:
            return call_with_retry(what, self.host, fn, self._retry, self._sleep, retryable)
        except InventoryError as exc:
            status = exc.status
            kind = _BY_STATUS.get(status or 0, KubeError)
            if status == 429 and retryable is _not_429:
                kind = DisruptionBlocked
            raise kind(str(exc), status) from None

    def _raw(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """Call ``fn`` and return the JSON body as a dict (no model round trip)."""
        retryable = kwargs.pop("retryable", may_pass_later)

        def go() -> Obj:
            resp = fn(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            data = resp.data
            return dict(json.loads(data)) if data else {}

        return self._call(what, go, retryable)

    @staticmethod
    def _dry(dry_run: bool) -> dict[str, str]:
        return {"dry_run": "All"} if dry_run else {}

    # -- reads ------------------------------------------------------------------------------
    def get_pod(self, namespace: str, name: str) -> Obj:
        return self._raw(
            f"get pod {namespace}/{name}", self._core.read_namespaced_pod, name, namespace
        )

    def get_node(self, name: str) -> Obj:
        return self._raw(f"get node {name}", self._core.read_node, name)

    def pods_on_node(self, node: str) -> list[Obj]:
        body = self._raw(
            f"list pods on {node}",
            self._core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node}",
        )
        return list(body.get("items") or [])

    # -- changes ----------------------------------------------------------------------------
    def delete_pod(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> Obj:
        """Delete the pod with this UID (409 if the name is another pod's now)."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        return self._raw(
            f"delete pod {namespace}/{name}",
            self._core.delete_namespaced_pod,
            name,
            namespace,
            body=options,
            **self._dry(dry_run),
        )

    def evict_pod(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> Obj:
        """Evict through the Eviction API (policy/v1): the API server checks the pod's
        PodDisruptionBudgets and answers 429 (:class:`DisruptionBlocked`) while they
        allow no disruption."""
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(uid=uid),
                dry_run=["All"] if dry_run else None,
            ),
        )
        return self._raw(
            f"evict pod {namespace}/{name}",
            self._core.create_namespaced_pod_eviction,
            name,
            namespace,
            body,
            retryable=_not_429,
            **self._dry(dry_run),
        )

    def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str | None], *, dry_run: bool
    ) -> Obj:
        """Set (or, with None, remove) annotations on a pod by JSON merge patch."""
        patch = {"metadata": {"annotations": dict(annotations)}}
        return self._raw(
            f"annotate pod {namespace}/{name}",
            self._core.patch_namespaced_pod,
            name,
            namespace,
            patch,
            _content_type=MERGE_PATCH,
            **self._dry(dry_run),
        )

    def tolerate_unschedulable(
        self, namespace: str, name: str, tolerations: list[Obj], *, dry_run: bool
    ) -> Obj:
        """Add the ``node.kubernetes.io/unschedulable`` toleration to a pending pod, so the
        scheduler may bind it to a node cordoned for it (Kubernetes allows adding
        tolerations to an existing pod; a merge patch replaces the list, so the pod's own
        tolerations are sent with it)."""
        wanted = {"key": UNSCHEDULABLE, "operator": "Exists", "effect": "NoSchedule"}
        if any(t.get("key") == UNSCHEDULABLE for t in tolerations):
            return {}
        patch = {"spec": {"tolerations": [*tolerations, wanted]}}
        return self._raw(
            f"add a toleration to pod {namespace}/{name}",
            self._core.patch_namespaced_pod,
            name,
            namespace,
            patch,
            _content_type=MERGE_PATCH,
            **self._dry(dry_run),
        )

    def stop_notebook(self, namespace: str, name: str, at: datetime, *, dry_run: bool) -> Obj:
        """Stop a Kubeflow Notebook the way its controller expects: the
        ``kubeflow-resource-stopped`` annotation (a timestamp) scales it to zero and keeps
        the Notebook (and its volumes) for the owner to start again."""
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        group, version, plural = NOTEBOOKS
        return self._raw(
            f"stop notebook {namespace}/{name}",
            self._custom.patch_namespaced_custom_object,
            group,
            version,
            namespace,
            plural,
            name,
            {"metadata": {"annotations": {KUBEFLOW_STOPPED: stamp}}},
            _content_type=MERGE_PATCH,
            **self._dry(dry_run),
        )

    def set_unschedulable(
        self,
        node: str,
        unschedulable: bool,
        annotations: Mapping[str, str | None],
        *,
        dry_run: bool,
    ) -> Obj:
        """Cordon (or uncordon) a node, with annotations saying who did and why."""
        patch = {
            "metadata": {"annotations": dict(annotations)},
            "spec": {"unschedulable": True if unschedulable else None},
        }
        return self._raw(
            f"{'cordon' if unschedulable else 'uncordon'} node {node}",
            self._core.patch_node,
            node,
            patch,
            _content_type=MERGE_PATCH,
            **self._dry(dry_run),
        )

    def create_event(
        self,
        about: ObjectRef,
        reason: str,
        message: str,
        at: datetime,
        *,
        warning: bool = False,
        dry_run: bool,
    ) -> Obj:
        """A core/v1 Event on ``about``, so ``kubectl describe`` shows what gpuscope did."""
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = about.namespace or "default"
        event = {
            "metadata": {"generateName": f"{about.name}.gpuscope.", "namespace": namespace},
            "involvedObject": {
                "kind": about.kind,
                "name": about.name,
                "namespace": about.namespace or None,
                "uid": about.uid or None,
                "apiVersion": about.api_version,
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        return self._raw(
            f"create event on {about.kind.lower()} {about.name}",
            self._core.create_namespaced_event,
            namespace,
            event,
            **self._dry(dry_run),
        )

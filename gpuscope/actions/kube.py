"""The one wrapper around the Kubernetes API that actions use, with retries and error classes.

Everything the executor does to a cluster goes through :class:`ClusterClient`: read a pod,
node or Notebook right before changing it, delete or evict a pod, patch a pod (annotations,
a toleration), a Notebook (stop it) or a node (the reservation taint), and record a
Kubernetes Event.

Every change names the object it was planned against: delete and evict carry the pod's UID
as a precondition; every patch carries ``metadata.uid`` and ``metadata.resourceVersion`` of
the object as just read, so the API server applies it to that version of that object only
(409 when it changed since, 422 when the name is another object's now). Every change takes
``dry_run``: then it is sent as a server-side dry run (``dryRun=All``), which the API server
validates, authorizes (RBAC) and admits without persisting.

Errors are one line and typed by what the caller should do next: :class:`NotFound` (404:
gone), :class:`Conflict` (409: changed under us, re-read next run), :class:`Invalid` (422),
:class:`DisruptionBlocked` (an eviction a PodDisruptionBudget forbids now), :class:`Forbidden`
(403: RBAC), :class:`Unauthorized` (401), :class:`Unreachable` (no answer, or a timeout: a
change may or may not have been applied) and :class:`KubeError` for the rest (5xx, a 429
that outlasted its retries). Reads are retried with backoff on 5xx, 429 and connection
errors. A change is sent once, except after a 429 that throttled it (API Priority and
Fairness: the server did not process it), which is retried after its ``Retry-After``; a
change that failed or timed out is never repeated blind, because the next run re-reads
the object and sees whether it landed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuscope.collector.cluster.inventory import InventoryError, kube_configuration
from gpuscope.collector.cluster.kube_api import (
    CONNECTION_ERRORS,
    RetryPolicy,
    call_with_retry,
    retry_after,
    retrying,
)
from gpuscope.core.collector_settings import CollectorSettings
from gpuscope.core.errors import SourceError

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

    def __init__(
        self, message: str, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class NotFound(KubeError):
    """404: the object is gone; the action has nothing left to do."""


class Conflict(KubeError):
    """409: the object changed (or is another one with the same name); re-read first."""


class Invalid(KubeError):
    """422: the API server's validation refused the change (e.g. a toleration removed)."""


class Forbidden(KubeError):
    """403: RBAC does not allow the verb; fix the Role, not a retry."""


class Unauthorized(KubeError):
    """401: the credentials are not accepted (an expired or wrong token)."""


class DisruptionBlocked(KubeError):
    """429 on an eviction with a ``DisruptionBudget`` cause: a PodDisruptionBudget allows
    no disruption now."""


class Unreachable(KubeError):
    """No answer (connection refused or reset, a timeout): a change may or may not have
    been applied; the next run re-reads the object to find out."""


_BY_STATUS: dict[int, type[KubeError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: Invalid,
}


@dataclass(frozen=True)
class ObjectRef:
    """What an Event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"


def _status_body(exc: ApiException) -> Obj:
    try:
        body = json.loads(exc.body or "")
    except (ValueError, TypeError):
        return {}
    return body if isinstance(body, dict) else {}


def _budget(exc: ApiException) -> list[Obj]:
    """The ``DisruptionBudget`` causes of a refused eviction (none for anything else)."""
    causes = (_status_body(exc).get("details") or {}).get("causes") or []
    return [c for c in causes if c.get("reason") == "DisruptionBudget"]


def _throttled(exc: BaseException) -> bool:
    """A 429 from API Priority and Fairness: the server did not process the change, so it
    may be sent again (a PodDisruptionBudget's 429 is an answer, not throttling)."""
    return isinstance(exc, ApiException) and exc.status == 429 and not _budget(exc)


def guard(obj: Mapping[str, Any]) -> Obj:
    """``metadata.uid`` and ``metadata.resourceVersion`` of an object as read: put in a
    patch, the API server applies it to that version of that object only."""
    meta = obj.get("metadata") or {}
    return {"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}


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
        self._policy = client.PolicyV1Api(self._api)
        self._retry, self._sleep = retry or RetryPolicy(), sleep
        self._timeout = (5, request_timeout_seconds)
        #: The HTTP status of the last change the server accepted (200, 201...).
        self.last_status: int | None = None

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
    def _read(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """A read, retried with backoff on what may pass; the JSON body as a dict."""

        def go() -> Obj:
            resp = fn(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            return dict(json.loads(resp.data)) if resp.data else {}

        try:
            return call_with_retry(what, self.host, go, self._retry, self._sleep)
        except InventoryError as exc:
            kind = _BY_STATUS.get(exc.status or 0, KubeError)
            if exc.status is None:
                kind = Unreachable
            raise kind(str(exc), exc.status) from None

    def _change(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """A change, sent once (module docstring); the JSON body as a dict."""

        def send() -> Obj:
            resp = fn(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            self.last_status = int(resp.status)
            return dict(json.loads(resp.data)) if resp.data else {}

        try:
            return retrying(what, self._retry, self._sleep, _throttled)(send)
        except ApiException as exc:
            status, body, budget = int(exc.status or 0), _status_body(exc), _budget(exc)
            message = " ".join(str(body.get("message") or exc.reason or "").split())
            if budget:
                message += f" ({budget[0].get('message', '')})"
            line = f"Kubernetes API {what} at {self.host} failed: {status} {message}"
            if budget:
                raise DisruptionBlocked(line, status, retry_after(exc)) from None
            raise _BY_STATUS.get(status, KubeError)(line, status, retry_after(exc)) from None
        except CONNECTION_ERRORS as exc:
            timed_out = isinstance(exc, urllib3.exceptions.TimeoutError) or "timed out" in str(exc)
            why = "no answer in time" if timed_out else type(exc).__name__
            raise Unreachable(
                f"Kubernetes API {what} at {self.host}: {why}; it may or may not have "
                "been applied (the next run re-reads)"
            ) from None

    @staticmethod
    def _dry(dry_run: bool) -> dict[str, str]:
        return {"dry_run": "All"} if dry_run else {}

    # -- reads ------------------------------------------------------------------------------
    def get_pod(self, namespace: str, name: str) -> Obj:
        return self._read(
            f"get pod {namespace}/{name}", self._core.read_namespaced_pod, name, namespace
        )

    def get_node(self, name: str) -> Obj:
        return self._read(f"get node {name}", self._core.read_node, name)

    def list_nodes(self) -> list[Obj]:
        return list(self._read("list nodes", self._core.list_node).get("items") or [])

    def list_pdbs(self) -> list[Obj]:
        """Every PodDisruptionBudget (policy/v1), with the status the Eviction API decides
        from (gpuscope/collector/cluster/pdb_records.py)."""
        return list(
            self._read(
                "list poddisruptionbudgets",
                self._policy.list_pod_disruption_budget_for_all_namespaces,
            ).get("items")
            or []
        )

    def get_notebook(self, namespace: str, name: str) -> Obj:
        group, version, plural = NOTEBOOKS
        return self._read(
            f"get notebook {namespace}/{name}",
            self._custom.get_namespaced_custom_object,
            group,
            version,
            namespace,
            plural,
            name,
        )

    # -- changes ----------------------------------------------------------------------------
    def delete_pod(self, namespace: str, name: str, uid: str, *, dry_run: bool) -> Obj:
        """Delete the pod with this UID (409 if the name is another pod's now)."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        return self._change(
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
        return self._change(
            f"evict pod {namespace}/{name}",
            self._core.create_namespaced_pod_eviction,
            name,
            namespace,
            body,
            **self._dry(dry_run),
        )

    def patch_pod(self, pod: Obj, change: Obj, what: str, *, dry_run: bool) -> Obj:
        """A JSON merge patch of ``pod`` (as just read), guarded by its UID and
        resourceVersion."""
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        body = {**change, "metadata": {**(change.get("metadata") or {}), **guard(pod)}}
        return self._change(
            f"{what} pod {ns}/{name}",
            self._core.patch_namespaced_pod,
            name,
            ns,
            body,
            _content_type=MERGE_PATCH,
            **self._dry(dry_run),
        )

    def annotate_pod(
        self, pod: Obj, annotations: Mapping[str, str | None], *, dry_run: bool
    ) -> Obj:
        """Set (or, with None, remove) annotations on ``pod`` (as just read)."""
        change = {"metadata": {"annotations": dict(annotations)}}
        return self.patch_pod(pod, change, "annotate", dry_run=dry_run)

    def add_toleration(self, pod: Obj, toleration: Obj, *, dry_run: bool) -> Obj:
        """Add one toleration to a pending ``pod`` (as just read). Kubernetes allows only
        additions to a pod's tolerations, and a merge patch replaces the list, so the pod's
        own are sent with it, unchanged."""
        own = list((pod.get("spec") or {}).get("tolerations") or [])
        change = {"spec": {"tolerations": [*own, toleration]}}
        return self.patch_pod(pod, change, "add a toleration to", dry_run=dry_run)

    def stop_notebook(self, notebook: Obj, at: datetime, *, dry_run: bool) -> Obj:
        """Stop a Kubeflow Notebook (as just read) the way its controller expects: the
        ``kubeflow-resource-stopped`` annotation (a timestamp) scales it to zero and keeps
        the Notebook (and its volumes) for the owner to start again."""
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = notebook.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        group, version, plural = NOTEBOOKS
        body = {"metadata": {"annotations": {KUBEFLOW_STOPPED: stamp}, **guard(notebook)}}
        return self._change(
            f"stop notebook {ns}/{name}",
            self._custom.patch_namespaced_custom_object,
            group,
            version,
            ns,
            plural,
            name,
            body,
            _content_type=MERGE_PATCH,
            **self._dry(dry_run),
        )

    def patch_node(self, node: Obj, change: Obj, what: str, *, dry_run: bool) -> Obj:
        """A JSON merge patch of ``node`` (as just read), guarded by its UID and
        resourceVersion (a node's taints are one list: the guard keeps a taint someone
        added meanwhile from being dropped)."""
        name = str((node.get("metadata") or {}).get("name", ""))
        body = {**change, "metadata": {**(change.get("metadata") or {}), **guard(node)}}
        return self._change(
            f"{what} node {name}",
            self._core.patch_node,
            name,
            body,
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
        return self._change(
            f"create event on {about.kind.lower()} {about.name}",
            self._core.create_namespaced_event,
            namespace,
            event,
            **self._dry(dry_run),
        )

"""The two lists the agent asks the API server for, without the Kubernetes client.

A node agent needs its own node's pods (labels, owner, containers:
gpuscope/agent/workloads/podmeta.py) and ResourceSlices (gpuscope/agent/workloads/dra.py), listed
with the pod's service account. The ``kubernetes`` package is 128 MB of the agent's install and ~37
MiB of its memory once imported, for two GETs; so the agent makes them itself, over HTTPS with the
service account's CA and token as ``kubernetes.config.load_incluster_config`` does (the token is
read again when it changes, as a projected token is rotated). It answers the two calls the
callers make, with the shapes they read: ``list_pod_for_all_namespaces`` (``.items`` of
pods whose fields have the client's snake_case names) and ``list_resource_slice`` (the raw
body in ``.data``). A failure raises :class:`ApiError` with the status and reason, as the
client's ``ApiException`` does. The collector, which watches many kinds, keeps the client.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote, urlencode

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ApiError(Exception):
    """The API server answered with an error (``status``), or could not be reached (0)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"({status}) {reason}" if status else reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class _Token:
    text: str
    mtime_ns: int


class InClusterApi:
    """GETs on the API server as the pod's service account."""

    def __init__(
        self,
        host: str | None = None,
        port: int | None = None,
        *,
        token_file: Path = SERVICE_ACCOUNT / "token",
        ca_file: Path = SERVICE_ACCOUNT / "ca.crt",
    ) -> None:
        host = host or os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = port or int(os.environ.get("KUBERNETES_SERVICE_PORT", "443") or 443)
        if not host:
            raise ApiError(0, "not in a cluster: KUBERNETES_SERVICE_HOST is not set")
        if not token_file.is_file():
            raise ApiError(0, f"no service account token at {token_file}")
        self.host = host
        self.port = port
        self._token_file = token_file
        self._ca_file = ca_file
        self._token: _Token | None = None
        self._context: Any = None

    def _bearer(self) -> str:
        mtime = self._token_file.stat().st_mtime_ns
        if self._token is None or self._token.mtime_ns != mtime:
            self._token = _Token(self._token_file.read_text(encoding="utf-8").strip(), mtime)
        return self._token.text

    def get(self, path: str, params: dict[str, str], timeout: float | None) -> bytes:
        """The body of ``GET path?params``; raises :class:`ApiError`."""
        import http.client
        import ssl

        if self._context is None:
            self._context = ssl.create_default_context(cafile=str(self._ca_file))
        conn = http.client.HTTPSConnection(
            self.host, self.port, timeout=timeout, context=self._context
        )
        try:
            conn.request(
                "GET",
                f"{path}?{urlencode(params, quote_via=quote)}",
                headers={"Authorization": f"Bearer {self._bearer()}", "Accept": "application/json"},
            )
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
        if resp.status != 200:
            raise ApiError(resp.status, resp.reason)
        return body

    def list_pod_for_all_namespaces(
        self, *, field_selector: str, _request_timeout: float | None = None
    ) -> SimpleNamespace:
        """Pods matching ``field_selector``, as ``.items`` in the client's attribute names."""
        body = json.loads(self.get("/api/v1/pods", {"fieldSelector": field_selector},
                                   _request_timeout))  # fmt: skip
        return SimpleNamespace(items=[pod_from_json(p) for p in body.get("items") or ()])

    def list_resource_slice(
        self,
        *,
        field_selector: str,
        _preload_content: bool = False,
        _request_timeout: float | None = None,
    ) -> SimpleNamespace:
        """ResourceSlices matching ``field_selector``; the raw body in ``.data``."""
        path = "/apis/resource.k8s.io/v1/resourceslices"
        return SimpleNamespace(
            data=self.get(path, {"fieldSelector": field_selector}, _request_timeout)
        )


def pod_from_json(pod: dict[str, Any]) -> SimpleNamespace:
    """The fields of a pod that :func:`gpuscope.agent.workloads.podmeta.pod_meta_from_api` reads,
    under the Kubernetes client's names (labels and annotations stay mappings)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}

    def statuses(key: str) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(name=cs.get("name"), container_id=cs.get("containerID"))
            for cs in status.get(key) or ()
        ]

    return SimpleNamespace(
        metadata=SimpleNamespace(
            uid=meta.get("uid"),
            namespace=meta.get("namespace"),
            name=meta.get("name"),
            labels=meta.get("labels"),
            annotations=meta.get("annotations"),
            owner_references=[
                SimpleNamespace(kind=o.get("kind"), controller=o.get("controller"))
                for o in meta.get("ownerReferences") or ()
            ],
        ),
        spec=SimpleNamespace(priority=spec.get("priority")),
        status=SimpleNamespace(
            container_statuses=statuses("containerStatuses"),
            init_container_statuses=statuses("initContainerStatuses"),
            ephemeral_container_statuses=statuses("ephemeralContainerStatuses"),
        ),
    )

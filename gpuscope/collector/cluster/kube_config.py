"""How gpuscope reaches a Kubernetes API server, and what a failed connection means.

``collector.kubernetes`` is ``auto`` (the in-cluster service account, else the kubeconfig),
``none``, or a URL: ``kubectl proxy``'s plain http, or the API server's https with a CA
bundle, a client certificate and key, or a bearer token file (``collector.kubernetes_*``).
Files are checked when the configuration is built, so a wrong path or a key that does not
match its certificate stops the start with one line. A request that fails says why in one
line: TLS verification (and which check), a host name that does not resolve, a refused
connection, or the API server's 401 and 403.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Callable
from pathlib import Path

import urllib3
from kubernetes import client, config

from gpuscope.core.collector_settings import CollectorSettings
from gpuscope.core.errors import SourceError


class InventoryError(SourceError):
    """The API server cannot give the inventory now; one line, with the HTTP status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def connection_reason(exc: BaseException) -> str:
    """The cause of a failed connection in words: TLS verification (and what failed),
    a host name that does not resolve, a refused or timed-out connection."""
    cause = getattr(exc, "reason", None) or exc
    text = str(cause)
    if isinstance(cause, (urllib3.exceptions.SSLError, ssl.SSLError)) or "SSL" in text[:200]:
        found = re.search(r"\] ([^()]+?)\s*\(_ssl", text) or re.search(r"\] ([^()'\"]+)", text)
        detail = found.group(1).strip() if found else type(cause).__name__
        return (
            f"TLS verification failed: {detail} (is collector.kubernetes_ca_file the CA "
            "that signed the API server's certificate?)"
        )
    errno = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    reason = errno.group(1).strip() if errno else ""
    if isinstance(cause, urllib3.exceptions.NameResolutionError) or "resolve" in text:
        host = re.search(r"resolve '([^']+)'", text)
        return f"DNS lookup of {host.group(1) if host else 'the host'} failed: {reason}".rstrip(
            ": "
        )
    if reason:  # refused, unreachable: urllib3's NewConnectionError is also a timeout class
        return reason
    if isinstance(cause, (TimeoutError, urllib3.exceptions.TimeoutError)):
        return "timed out"
    return type(cause).__name__


def status_hint(status: int) -> str:
    """What a 401 means for the operator (a 403's message already names user and verb)."""
    if status == 401:
        return (
            " (the API server did not accept the credentials: check "
            "collector.kubernetes_token_file or the client certificate)"
        )
    return ""


def _readable(path: Path, setting: str) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise InventoryError(f"collector.{setting} {path}: {exc.strerror}") from None


def _token_reader(path: Path) -> Callable[[client.Configuration], None]:
    """A ``refresh_api_key_hook``: the token file is read again when it changes (a
    projected service-account token is rotated in place), before each request."""
    seen: list[float] = []

    def refresh(cfg: client.Configuration) -> None:
        try:
            mtime = path.stat().st_mtime
            if seen and seen[0] == mtime:
                return
            token = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InventoryError(
                f"collector.kubernetes_token_file {path}: {exc.strerror}"
            ) from None
        if not token:
            raise InventoryError(f"collector.kubernetes_token_file {path} is empty")
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        seen[:] = [mtime]

    return refresh


def _url_configuration(url: str, access: CollectorSettings | None) -> client.Configuration:
    """An API server given by URL, with the CA, client certificate and token files of
    ``access`` (each checked now, so a wrong path or a key that does not match its
    certificate is one line at start-up rather than an error on every request)."""
    cfg = client.Configuration()
    cfg.host = url.rstrip("/")
    if access is None:
        return cfg
    ca, cert, key = (
        access.kubernetes_ca_file,
        access.kubernetes_client_cert_file,
        access.kubernetes_client_key_file,
    )
    try:
        if ca is not None:
            _readable(ca, "kubernetes_ca_file")
            ssl.create_default_context(cafile=str(ca))
            cfg.ssl_ca_cert = str(ca)
        if cert is not None and key is not None:
            _readable(cert, "kubernetes_client_cert_file")
            _readable(key, "kubernetes_client_key_file")
            ssl.create_default_context().load_cert_chain(str(cert), str(key))
            cfg.cert_file, cfg.key_file = str(cert), str(key)
    except ssl.SSLError as exc:
        raise InventoryError(
            f"collector.kubernetes_{'client_cert' if cert else 'ca'}_file: not usable PEM "
            f"({exc.reason or exc})"
        ) from None
    if access.kubernetes_token_file is not None:
        refresh = _token_reader(access.kubernetes_token_file)
        refresh(cfg)
        cfg.refresh_api_key_hook = refresh
    return cfg


def kube_configuration(access: CollectorSettings) -> client.Configuration | None:
    """What ``collector.kubernetes`` names: None for ``none``; a URL with its CA,
    certificate and token files; else (``auto``) the in-cluster account or the
    kubeconfig, raising :class:`InventoryError` when there is neither."""
    if access.kubernetes == "none":
        return None
    if access.kubernetes.startswith(("http://", "https://")):
        return _url_configuration(access.kubernetes, access)
    return load_configuration()


def load_configuration(
    *, kubeconfig: str | None = None, context: str | None = None
) -> client.Configuration:
    """The API server and credentials: the in-cluster service account when running in a
    pod, else the kubeconfig. Shared by the inventory and the actions' client (through
    :func:`kube_configuration`, which adds the URL mode)."""
    cfg = client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=cfg
            )
    except (config.ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InventoryError(f"no usable Kubernetes configuration: {first}") from None
    return cfg

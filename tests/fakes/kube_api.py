"""A small stateful fake Kubernetes API server over real HTTP on loopback.

It serves what gpuscope's inventory and actuator use, with the API server's semantics:
lists with label and field selectors, a resourceVersion that grows on every change, watches
as newline-delimited JSON (``ADDED``/``MODIFIED``/``DELETED``, ``BOOKMARK`` before the
timeout, an ``ERROR`` event with a 410 ``Expired`` Status once history was compacted), get,
JSON-merge PATCH, DELETE (404 when missing), create (409 when the name is taken), evictions,
``dryRun=All``, and 404 for API groups not installed; the write rules (guarded patches,
immutable tolerations, preconditions, graceful deletion leaving pods Terminating, budgets)
are in kube_rules.py. Tests change the state through :attr:`FakeKubeApi.store` (changes
reach open watches), count requests, and script answers per request (:meth:`FakeKubeApi.script`,
kube_faults.py: every error with the real server's Status body, and hung requests).

RBAC is opt-in: :meth:`FakeKubeApi.deny` refuses a verb on a resource with the API server's
403. So are TLS and authentication: with ``tls`` (a server-side SSL context) it serves https,
and with ``token`` every request needs ``Authorization: Bearer <token>`` or a client
certificate the context verified, else the API server's 401 ``Unauthorized`` Status.
Answers are scripted per request
(:meth:`FakeKubeApi.script`). Simplified: no namespace existence checks, no json-patch, no
pagination (``limit``/``continue`` are ignored), PUT is not served, and both merge-patch and
strategic-merge-patch are applied as a JSON merge.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.conftest import SHUTDOWN_POLL_S
from tests.fakes import kube_rules
from tests.fakes.kube_faults import Answer, Planted, Target, forbidden, planted_error
from tests.fakes.kube_store import (
    DEFAULT_INSTALLED,
    ApiError,
    KubeStore,
    Obj,
    Resource,
    WatchEvent,
    not_found,
)

_MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: bytes = b""

    def json(self) -> Obj:
        data = json.loads(self.body or b"{}")
        return data if isinstance(data, dict) else {}

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


@dataclass(frozen=True)
class _Route:
    res: Resource
    namespace: str | None
    name: str | None
    sub: str | None


def _route(store: KubeStore, path: str) -> _Route:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group_version, rest = parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise not_found()
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise not_found()
    res = store.resource(rest[0], group_version)
    if namespace is not None and not res.namespaced:
        raise not_found()
    return _Route(res, namespace, *[*rest[1:], None, None][:2])


def _discovery(store: KubeStore, path: str) -> Obj | None:
    """``GET /apis/<group>``: the APIGroup with the versions installed (a group with none
    is a 404, as on a cluster without it); None for any other path."""
    parts = [p for p in path.split("/") if p]
    if len(parts) != 2 or parts[0] != "apis":
        return None
    versions = sorted(gv.split("/")[1] for gv in store.installed if gv.startswith(f"{parts[1]}/"))
    if not versions:
        raise not_found()
    listed = [{"groupVersion": f"{parts[1]}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": parts[1],
        "versions": listed,
        "preferredVersion": listed[-1],
    }


class FakeKubeApi:
    """The fake API server; use as a context manager, or ``start()`` and ``stop()``."""

    def __init__(
        self,
        installed: set[str] | frozenset[str] = DEFAULT_INSTALLED,
        *,
        tls: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> None:
        self.store = KubeStore(installed)
        self.token = token
        self.requests: list[RecordedRequest] = []
        self._planted: list[Planted] = []
        self._after: list[tuple[str, str, Callable[[], None]]] = []
        #: Set at stop: releases requests held unanswered (planted status 0).
        self._release = threading.Event()
        #: (verb, resource) pairs RBAC refuses, e.g. ("delete", "pods"), ("create", "pods/eviction")
        self.denied: set[tuple[str, str]] = set()
        self.user = "system:serviceaccount:gpuscope:gpuscope"
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_S},
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host!s}:{port}"

    def start(self) -> FakeKubeApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self.store.close()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test-side API ----------------------------------------------------------------------
    def count(self, method: str = "GET", path: str | None = None, watch: bool | None = None) -> int:
        """Requests seen with this method (and path, and watch or not, when given)."""
        with self._lock:
            return sum(
                r.method == method
                and (path is None or r.path == path)
                and (watch is None or r.watch == watch)
                for r in self.requests
            )

    def fail_next(
        self, status: int, *, times: int = 1, method: str = "GET", path: str = ""
    ) -> None:
        """Answer the next ``times`` matching requests (path prefix) with ``status``."""
        self.script(Answer(status), times=times, method=method, path=path)

    def script(self, *answers: Answer, times: int = 1, method: str = "GET", path: str = "") -> None:
        """Plant answers for the next requests with ``method`` whose path starts with
        ``path``, in order, each ``times`` times (tests/fakes/kube_faults.py)."""
        with self._lock:
            self._planted.extend(Planted(a, times, method, path) for a in answers)

    def after_next(self, method: str, path: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the next ``method`` request on ``path`` (exactly) was answered:
        a change that races the client's read and its write."""
        with self._lock:
            self._after.append((method, path, fn))

    def _run_after(self, method: str, path: str) -> None:
        with self._lock:
            due = [h for h in self._after if h[0] == method and h[1] == path]
            self._after = [h for h in self._after if h not in due]
        for _, _, fn in due:
            fn()

    def unanswered_scripts(self) -> int:
        """Planted answers not used yet (a test's script that never matched is a bug)."""
        with self._lock:
            return sum(p.times for p in self._planted)

    def deny(self, verb: str, resource: str) -> None:
        """RBAC: refuse ``verb`` on ``resource`` (``pods``, ``pods/eviction``...) with 403."""
        with self._lock:
            self.denied.add((verb, resource))

    def mutating(self) -> list[RecordedRequest]:
        """Requests that would change something, server-side dry runs left out."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.method in ("POST", "PATCH", "PUT", "DELETE") and r.query.get("dryRun") != "All"
            ]

    def _target(self, method: str, r: _Route, query: dict[str, str]) -> Target:
        if method == "GET":
            verb = (
                "watch"
                if query.get("watch") in ("true", "1")
                else "list"
                if r.name is None
                else "get"
            )
        else:
            verb = {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}[method]
        return Target(
            plural=r.res.plural + (f"/{r.sub}" if r.sub else ""),
            kind=r.res.kind,
            name=r.name or "",
            namespace=r.namespace,
            group=r.res.group_version.rpartition("/")[0],
            verb=verb,
            user=self.user,
        )

    def _authorize(self, target: Target) -> None:
        with self._lock:
            refused = (target.verb, target.plural) in self.denied
        if refused:
            raise forbidden(target)

    def _record(
        self, method: str, path: str, query: dict[str, str], body: bytes = b""
    ) -> Answer | None:
        with self._lock:
            self.requests.append(RecordedRequest(method, path, query, body))
            for planted in self._planted:
                if planted.times > 0 and planted.method == method and path.startswith(planted.path):
                    planted.times -= 1
                    return planted.answer
        return None


def _handler(api: FakeKubeApi) -> type[BaseHTTPRequestHandler]:
    store = api.store

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out as two writes: with Nagle on, the body waits for the
        # client's delayed ACK of the headers (~40 ms a request on loopback). kube-apiserver
        # serves through Go's net/http, whose accepted connections have Nagle off (Go's
        # net/tcpsock.go, newTCPConn: setNoDelay(fd, true)); so does this fake now.
        disable_nagle_algorithm = True
        _muted = False  # while a planted answer replaces the real one

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_PUT(self) -> None:
            self._serve("PUT")

        # -- plumbing -----------------------------------------------------------------------
        def _serve(self, method: str) -> None:
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._muted = False
            try:
                self._authenticate()
                planted = api._record(method, url.path, query, body)
                group = _discovery(store, url.path) if method == "GET" else None
                if group is not None and planted is None:
                    self._send(200, group)
                    return
                route = _route(store, url.path)
                target = api._target(method, route, query)
                if planted is not None and planted.apply:
                    self._muted = True  # carry it out, then answer as planted
                    with contextlib.suppress(ApiError):
                        self._dispatch(method, route, query, body)
                    self._muted = False
                if planted is not None and planted.status == 0:
                    api._release.wait(60)  # never answer: the client's timeout ends it
                    self.close_connection = True
                    return
                if planted is not None:
                    raise planted_error(planted, target)
                api._authorize(target)
                self._dispatch(method, route, query, body)
            except ApiError as err:
                self._muted = False
                self._send(err.code, err.status(), err.headers)
            api._run_after(method, url.path)

        def _authenticate(self) -> None:
            if api.token is None:
                return
            bearer = self.headers.get("Authorization", "") == f"Bearer {api.token}"
            cert = isinstance(self.connection, ssl.SSLSocket) and self.connection.getpeercert()
            if not (bearer or cert):
                raise ApiError(401, "Unauthorized", "Unauthorized")

        def _send(self, code: int, body: Obj, headers: dict[str, str] | None = None) -> None:
            if self._muted:
                return
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json_body(self, body: bytes) -> Obj:
            try:
                obj = json.loads(body or b"{}")
            except ValueError:
                raise ApiError(400, "BadRequest", "the request body is not valid JSON") from None
            if not isinstance(obj, dict):
                raise ApiError(400, "BadRequest", "the request body must be a JSON object")
            return obj

        # -- verbs --------------------------------------------------------------------------
        def _dispatch(self, method: str, r: _Route, query: dict[str, str], body: bytes) -> None:
            dry = query.get("dryRun") == "All"
            if method == "GET" and r.name is None:
                if query.get("watch") in ("true", "1"):
                    return self._watch(r, query)
                items, rv = store.list(
                    r.res,
                    r.namespace,
                    query.get("labelSelector", ""),
                    query.get("fieldSelector", ""),
                )
                if r.res.plural == "poddisruptionbudgets":
                    items = [kube_rules.with_pdb_status(store, i) for i in items]
                if r.res.builtin:
                    items = [
                        {k: v for k, v in i.items() if k not in ("kind", "apiVersion")}
                        for i in items
                    ]
                return self._send(
                    200,
                    {
                        "kind": f"{r.res.kind}List",
                        "apiVersion": r.res.group_version,
                        "metadata": {"resourceVersion": str(rv)},
                        "items": items,
                    },
                )
            if method == "GET" and r.sub is None:
                obj = store.get(r.res, r.namespace, r.name or "")
                if r.res.plural == "poddisruptionbudgets":
                    obj = kube_rules.with_pdb_status(store, obj)
                return self._send(200, obj)
            if method == "POST" and r.name is None:
                obj = self._json_body(body)
                obj.setdefault("kind", r.res.kind)
                return self._send(201, store.create(obj, r.namespace, dry_run=dry))
            if method == "POST" and r.res.plural == "pods" and r.sub == "eviction":
                return self._evict(r, self._json_body(body), dry)
            if method == "PATCH" and r.name and r.sub is None:
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                if ctype not in _MERGE_TYPES:
                    raise ApiError(
                        415,
                        "UnsupportedMediaType",
                        f"the body of the request was in an unknown format - accepted media types include: {', '.join(_MERGE_TYPES)}",
                    )
                patch = self._json_body(body)
                with store.cond:
                    kube_rules.check_patch(r.res, store.get(r.res, r.namespace, r.name), patch)
                    patched = store.patch(r.res, r.namespace, r.name, patch, dry_run=dry)
                return self._send(200, patched)
            if method == "DELETE" and r.name and r.sub is None:
                options = self._json_body(body) if body else {}
                if "gracePeriodSeconds" in query:
                    options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
                deleted = kube_rules.delete(store, r.res, r.namespace, r.name, options, dry_run=dry)
                return self._send(200, deleted)
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )

        def _evict(self, r: _Route, body: Obj, dry: bool) -> None:
            kube_rules.evict(store, r.res, r.namespace, r.name or "", body, dry_run=dry)
            self._send(
                201,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "code": 201,
                },
            )

        # -- watch --------------------------------------------------------------------------
        def _watch(self, r: _Route, query: dict[str, str]) -> None:
            labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
            deadline = time.monotonic() + float(query.get("timeoutSeconds") or 1800)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in self._events(r, query, labels, fields, deadline):
                    line = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def _events(
            self, r: _Route, query: dict[str, str], labels: str, fields: str, deadline: float
        ) -> Iterator[Obj]:
            rv = int(query.get("resourceVersion") or 0)
            if rv == 0:  # "any version": the current state first, as synthetic ADDED events
                items, rv = store.list(r.res, r.namespace, labels, fields)
                yield from ({"type": "ADDED", "object": o} for o in items)
            while time.monotonic() < deadline and not store.closed:
                try:
                    events = store.events_after(rv)
                except ApiError as err:
                    yield {"type": "ERROR", "object": err.status()}
                    return
                for e in events:
                    rv = e.rv
                    out = _visible(e, r, labels, fields)
                    if out is not None:
                        yield out
                if not events:
                    with store.cond:
                        if store.rv <= rv:
                            store.cond.wait(max(0.0, min(0.5, deadline - time.monotonic())))
            if query.get("allowWatchBookmarks") in ("true", "1") and not store.closed:
                meta = {"resourceVersion": str(rv)}
                yield {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": r.res.kind,
                        "apiVersion": r.res.group_version,
                        "metadata": meta,
                    },
                }

    return Handler


def _visible(e: WatchEvent, r: _Route, labels: str, fields: str) -> Obj | None:
    """The event a watcher with these selectors sees: objects moving out of the selection
    are DELETED for it, and moving in are ADDED."""
    if e.resource != r.res:
        return None
    if r.namespace is not None and e.obj["metadata"].get("namespace") != r.namespace:
        return None
    now = e.type != "DELETED" and store_selected(e.obj, labels, fields)
    before = e.old is not None and store_selected(e.old, labels, fields)
    if e.type == "DELETED":
        return {"type": "DELETED", "object": e.obj} if before else None
    if now and before:
        return {"type": "MODIFIED", "object": e.obj}
    if now:
        return {"type": "ADDED", "object": e.obj}
    if before:
        return {"type": "DELETED", "object": e.obj}
    return None


store_selected = KubeStore.selected

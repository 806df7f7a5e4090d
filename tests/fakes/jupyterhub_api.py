"""A small fake JupyterHub REST API over real HTTP on loopback, for jupyterhub-idle-culler.

It serves what the culler reads and does: ``GET /hub/api/`` (the version), ``GET
/hub/api/users?state=ready`` (paginated when asked, as JupyterHub >= 2 answers), and ``DELETE
/hub/api/users/NAME/server`` (stop the default server; recorded). As JupyterHub does, a
server's ``state`` (where KubeSpawner keeps ``pod_name`` and ``namespace``) is in the model
only when the token has the ``admin:server_state`` scope, and a wrong token gets 403.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.conftest import SHUTDOWN_POLL_S

CULLER_SCOPES = frozenset({"list:users", "read:users:activity", "read:servers", "delete:servers"})


@dataclass
class HubServer:
    """A user's running default server."""

    user: str
    last_activity: datetime | None
    started: datetime | None
    state: dict[str, str] = field(default_factory=dict)


def _iso(ts: datetime | None) -> str | None:
    return ts.isoformat().replace("+00:00", "Z") if ts else None


class FakeHub:
    """The hub API; ``url`` is what the culler's ``--url`` takes."""

    def __init__(
        self, servers: list[HubServer], *, token: str, scopes: frozenset[str] = CULLER_SCOPES
    ) -> None:
        self.servers = {s.user: s for s in servers}
        self.token, self.scopes = token, scopes
        self.stopped: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_S},
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/hub/api"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def user_model(self, s: HubServer) -> dict[str, Any]:
        server: dict[str, Any] = {
            "name": "",
            "ready": True,
            "pending": None,
            "url": f"/user/{s.user}/",
            "started": _iso(s.started),
            "last_activity": _iso(s.last_activity),
        }
        if "admin:server_state" in self.scopes:
            server["state"] = dict(s.state)
        return {
            "kind": "user",
            "name": s.user,
            "admin": False,
            "last_activity": _iso(s.last_activity),
            "servers": {"": server},
        }


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # one request, not one per client delayed ACK

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _send(self, code: int, body: object = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if self.headers.get("Authorization") == f"token {hub.token}":
                return True
            self._send(403, {"status": 403, "message": "Forbidden"})
            return False

        def do_GET(self) -> None:
            if not self._authorized():
                return None
            path = urlsplit(self.path).path.rstrip("/")
            if path == "/hub/api":
                return self._send(200, {"version": "5.3.0"})
            if path == "/hub/api/users":
                with hub._lock:
                    users = [hub.user_model(s) for s in hub.servers.values()]
                if "jupyterhub-pagination" in self.headers.get("Accept", ""):
                    page = {"offset": 0, "limit": 200, "total": len(users), "next": None}
                    return self._send(200, {"items": users, "_pagination": page})
                return self._send(200, users)
            return self._send(404, {"status": 404, "message": "Not Found"})

        def do_DELETE(self) -> None:
            if not self._authorized():
                return None
            parts = urlsplit(self.path).path.strip("/").split("/")
            if parts[:3] == ["hub", "api", "users"] and len(parts) == 5 and parts[4] == "server":
                name = unquote(parts[3])
                with hub._lock:
                    if hub.servers.pop(name, None) is None:
                        return self._send(400, {"status": 400, "message": "not running"})
                    hub.stopped.append(name)
                return self._send(204)
            return self._send(404, {"status": 404, "message": "Not Found"})

    return Handler

"""gpuscope's GPU verdict for jupyterhub-idle-culler, as its ``cull_arbiter_hook``.

The culler sees only a server's ``last_activity`` (kernels, HTTP), never its GPU. With this
hook, a server whose pod holds a GPU is judged by the GPU instead: culled once gpuscope has
seen its GPU idle for the culler's ``--timeout``, kept while the GPU works even if nobody
types. Whenever gpuscope cannot tell (the pod holds no GPU, the analysis is stale, gpuscope
is unreachable or refuses the request, the server model carries no pod name) the culler's own
verdict stands: inactive for at least the timeout.

One file with no dependency beyond the culler's own (tornado), so it can be mounted next to
the culler's config file. In ``idle_culler_config.py`` (the culler loads it from its working
folder, or ``--config=FILE``), with this file's folder on ``PYTHONPATH``::

    from gpuscope_cull_arbiter import GpuscopeArbiter

    c.IdleCuller.cull_arbiter_hook = GpuscopeArbiter(
        "http://gpuscope-collector.gpuscope:8080",
        namespace="jhub",  # where KubeSpawner's pods are, when its state does not say
        token_file="/etc/gpuscope/api-token",  # when collector.read_requires_token is on
    )

The culler's JupyterHub token needs the ``admin:server_state`` scope besides the culler's
own (``list:users``, ``read:users:activity``, ``read:servers``, ``delete:servers``): without
it the server model has no ``state``, so no ``pod_name``, and every server falls back to the
culler's verdict (logged once).

The culler awaits the hook on its event loop, so the request is asynchronous (tornado's
client, as the culler's own requests), with a short timeout.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

log = logging.getLogger("gpuscope_cull_arbiter")
ARBITER_PATH = "/api/v1/arbiter/idle"


class GpuscopeArbiter:
    """A ``cull_arbiter_hook``: called by the culler as
    ``hook(inactive=timedelta | None, inactive_limit=seconds, server=server_model)``."""

    def __init__(
        self,
        url: str,
        *,
        namespace: str,
        token: str = "",
        token_file: str | Path | None = None,
        timeout_seconds: float = 5.0,
    ) -> None:
        self.url = url.rstrip("/") + ARBITER_PATH
        self.namespace = namespace
        self.timeout_seconds = timeout_seconds
        self._token = token
        self._token_file = Path(token_file) if token_file else None
        self._warned: set[str] = set()

    async def __call__(
        self,
        *,
        inactive: timedelta | None,
        inactive_limit: float,
        server: dict[str, Any],
        **_: Any,
    ) -> bool:
        inactive_for_limit = inactive is not None and inactive.total_seconds() >= inactive_limit
        state = server.get("state")
        pod = state.get("pod_name") if isinstance(state, dict) else None
        if not pod:
            self._warn(
                "no-state",
                "the server model has no state.pod_name: give the culler's JupyterHub token "
                "the admin:server_state scope; culling by activity alone",
            )
            return inactive_for_limit
        assert isinstance(state, dict)
        namespace = str(state.get("namespace") or self.namespace)
        verdict = await self._ask(namespace, str(pod))
        if verdict is None or verdict["stale"] or not verdict["holds_gpu"]:
            return inactive_for_limit
        return bool(verdict["gpu_idle"]) and float(verdict["idle_seconds"]) >= inactive_limit

    async def _ask(self, namespace: str, pod: str) -> dict[str, Any] | None:
        """gpuscope's answer for the pod, or None (logged) when there is none to trust."""
        url = f"{self.url}?{urlencode({'namespace': namespace, 'pod': pod})}"
        try:
            token = self._bearer()
        except OSError as exc:
            self._warn("token", f"cannot read {self._token_file}: {exc.strerror}")
            return None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # a client of our own: the culler's shared one carries its hub's TLS options
        client = AsyncHTTPClient(force_instance=True, defaults={})
        try:
            response = await client.fetch(
                HTTPRequest(
                    url,
                    headers=headers,
                    connect_timeout=self.timeout_seconds,
                    request_timeout=self.timeout_seconds,
                )
            )
            answer = json.loads(response.body)
            verdict = {
                "stale": bool(answer["stale"]),
                "holds_gpu": bool(answer["holds_gpu"]),
                "gpu_idle": bool(answer["gpu_idle"]),
                "idle_seconds": float(answer["idle_seconds"]),
            }
        except HTTPClientError as exc:
            self._warn(f"http-{exc.code}", f"gpuscope answered {exc.code} for {url}: {exc}")
            return None
        except (ValueError, KeyError, TypeError) as exc:
            self._warn("answer", f"gpuscope's answer for {url} is not usable: {exc!r}")
            return None
        except Exception as exc:  # anything else: never let the culler's cycle fail on us
            self._warn("unreachable", f"cannot reach gpuscope at {self.url}: {exc!r}")
            return None
        finally:
            client.close()
        self._warned &= {"no-state"}  # gpuscope answers again: warn anew when it stops
        return verdict

    def _bearer(self) -> str:
        if self._token_file is not None:
            return self._token_file.read_text(encoding="utf-8").strip()
        return self._token

    def _warn(self, reason: str, message: str) -> None:
        """Each reason once until gpuscope answers again (not once per server per cycle)."""
        if reason not in self._warned:
            self._warned.add(reason)
            log.warning("%s; the culler's own verdict stands", message)

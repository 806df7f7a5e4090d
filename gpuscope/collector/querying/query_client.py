"""One HTTP client for a Prometheus-compatible query API (Prometheus, Thanos Query, Mimir,
VictoriaMetrics single or cluster), shared by the pull path and fleet mode.

Why its own module: every query the collector sends must carry the same things — the
tenant header (``X-Scope-OrgID``, Mimir/Cortex/Thanos receive), a bearer token read afresh
from its file (a projected token rotates), a timeout the engine is told about too (the
``timeout`` parameter, so it stops the work instead of finishing an abandoned query), retry
with back-off for what may pass on a second try, and cancellation on shutdown: ``cancel()``
closes the connection mid-request (both engines stop a query whose client went away) and
ends any back-off at once. Each answer's bytes and time are counted for the status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpuscope.collector.scraping.fetch import redact_url
from gpuscope.core.errors import SourceError

log = logging.getLogger(__name__)


class QueryRefused(SourceError):
    """The engine refused the query for its size (too many samples or series, too long):
    asking the same thing again cannot pass, asking less may."""


class QueryCancelled(SourceError):
    """The collector is stopping: the query was abandoned on purpose."""


class DeadlinePassed(SourceError):
    """The cycle's deadline came before the query could be (re)sent."""


#: Words in an engine's error that say the query was too big (Prometheus
#: ``--query.max-samples``, VictoriaMetrics ``-search.maxUniqueTimeseries``/``maxSamplesPerQuery``,
#: Mimir/Thanos per-tenant limits).
_TOO_BIG = ("too many", "max-samples", "maxuniquetimeseries", "maxsamplesperquery",
            "exceeded", "limit", "would load too much")  # fmt: skip


def engine_duration(seconds: float) -> str:
    """A timeout as every engine parses it: Prometheus (and Thanos, Mimir) take whole units
    only ("47.9s" is refused as bad_data), VictoriaMetrics takes both: whole seconds, else
    whole milliseconds, rounded down so the engine stops no later than the client."""
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{max(1, int(seconds * 1000))}ms"


@dataclass
class QueryStats:
    """What one cycle's queries cost: counted by the client, read and reset by the cycle."""

    queries: int = 0
    failures: int = 0
    seconds: float = 0.0
    bytes: int = 0

    def add(self, other: QueryStats) -> None:
        self.queries += other.queries
        self.failures += other.failures
        self.seconds += other.seconds
        self.bytes += other.bytes


@dataclass
class QueryClient:
    base_url: str
    timeout_seconds: float = 20.0
    tenant: str = ""
    bearer_token_file: Path | None = None
    bearer_token: str = ""
    retries: int = 2
    backoff_seconds: float = 1.0
    #: Injected in tests: an httpx transport (the default opens real connections).
    transport: httpx.BaseTransport | None = None
    sleep: Callable[[float], bool] | None = None
    stats: QueryStats = field(default_factory=QueryStats)

    def __post_init__(self) -> None:
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._stats_lock = threading.Lock()  # shards are asked from several threads
        self._client = self._new_client()

    @property
    def shown_url(self) -> str:
        return redact_url(self.base_url)

    def _new_client(self) -> httpx.Client:
        return httpx.Client(
            timeout=httpx.Timeout(self.timeout_seconds, connect=min(5.0, self.timeout_seconds)),
            transport=self.transport,
        )

    def headers(self) -> dict[str, str]:
        """The tenant header and the bearer token (the file read at each query)."""
        out: dict[str, str] = {}
        if self.tenant:
            out["X-Scope-OrgID"] = self.tenant
        token = self.bearer_token
        if self.bearer_token_file is not None:
            try:
                token = self.bearer_token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise SourceError(
                    f"query API bearer token file {self.bearer_token_file}: {exc.strerror}"
                ) from None
        if token:
            out["Authorization"] = f"Bearer {token}"
        return out

    def cancel(self) -> None:
        """Abandon every query in flight and any back-off; later queries fail at once."""
        self._cancelled.set()
        with self._lock:
            self._client.close()

    def close(self) -> None:
        with self._lock:
            self._client.close()

    def take_stats(self) -> QueryStats:
        with self._stats_lock:
            out, self.stats = self.stats, QueryStats()
        return out

    def _wait(self, seconds: float) -> bool:
        if self.sleep is not None:
            return self.sleep(seconds)
        return not self._cancelled.wait(seconds)

    def query(
        self, path: str, params: dict[str, str], *, deadline: float | None = None
    ) -> dict[str, Any]:
        """POST ``params`` to ``path`` (``/api/v1/query_range`` ...) and return ``data``.

        Retries a connection failure, a timeout or a 5xx with back-off; a refusal for size
        raises :class:`QueryRefused` at once (asking again the same cannot pass); any other
        4xx raises :class:`SourceError` at once. Every error is one line, URL redacted.
        ``deadline`` (``time.monotonic()``): no attempt, back-off or wait goes past it (each
        attempt's timeout, the engine's included, is cut to what is left); past it,
        :class:`DeadlinePassed`.
        """
        delay = self.backoff_seconds
        attempt = 0
        while True:
            timeout = self.timeout_seconds
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0.05:
                    raise DeadlinePassed(f"query API {self.shown_url}: cycle deadline passed")
                timeout = min(timeout, left)
            try:
                return self._once(path, {**params, "timeout": engine_duration(timeout)}, timeout)
            except (QueryRefused, QueryCancelled):
                raise
            except _Retryable as exc:
                attempt += 1
                if attempt > self.retries:
                    raise SourceError(str(exc)) from None
                if deadline is not None and time.monotonic() + delay >= deadline:
                    raise SourceError(str(exc)) from None
                log.debug("query retried in %.1fs error=%s", delay, exc)
                if not self._wait(delay):
                    raise QueryCancelled(f"query API {self.shown_url}: cancelled") from None
                delay *= 2

    def _post(self, url: str, params: dict[str, str], timeout: float) -> httpx.Response:
        """The POST, in a worker thread the caller stops waiting for on :meth:`cancel` or
        after ``timeout`` in all (httpx's own timeout is per read: an engine that trickles
        bytes would pass it): closing an httpx client does not interrupt a read blocked in
        another thread, and a shutdown must not wait for the engine (the worker is a
        daemon; the socket closes with the client or the process, and the engine then
        stops the query)."""
        headers = self.headers()
        done = threading.Event()
        box: dict[str, Any] = {}
        limit = httpx.Timeout(timeout, connect=min(5.0, timeout))

        def work() -> None:
            try:
                box["resp"] = self._client.post(url, data=params, headers=headers, timeout=limit)
            except BaseException as exc:
                box["exc"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name="query", daemon=True).start()
        end = time.monotonic() + timeout + 0.5
        while not done.wait(0.05):
            if self._cancelled.is_set():
                raise QueryCancelled(f"query API {self.shown_url}: cancelled")
            if time.monotonic() > end:
                raise httpx.ReadTimeout("no answer in time")
        if "exc" in box:
            raise box["exc"]
        resp: httpx.Response = box["resp"]
        return resp

    def _count(self, **add: float) -> None:
        with self._stats_lock:
            for k, v in add.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    def _once(self, path: str, params: dict[str, str], timeout: float) -> dict[str, Any]:
        if self._cancelled.is_set():
            raise QueryCancelled(f"query API {self.shown_url}: cancelled")
        url = self.base_url.rstrip("/") + path
        start = time.monotonic()
        self._count(queries=1)
        try:
            resp = self._post(url, params, timeout)
        except httpx.TimeoutException:
            self._count(failures=1)
            raise _Retryable(
                f"query API {self.shown_url}: no answer within {timeout:.3g}s"
            ) from None
        except (httpx.HTTPError, RuntimeError) as exc:  # RuntimeError: client closed
            self._count(failures=1)
            if self._cancelled.is_set():
                raise QueryCancelled(f"query API {self.shown_url}: cancelled") from None
            text = str(exc).replace(self.base_url, self.shown_url)
            raise _Retryable(f"query API {self.shown_url} unreachable: {text}") from None
        except QueryCancelled:
            self._count(failures=1)
            raise
        finally:
            self._count(seconds=time.monotonic() - start)
        self._count(bytes=len(resp.content))
        try:
            body = resp.json()
        except ValueError:
            self._count(failures=1)
            line = f"query API {self.shown_url} answered HTTP {resp.status_code}, not JSON"
            if resp.status_code >= 500 or resp.status_code == 429:
                raise _Retryable(line) from None
            raise SourceError(line) from None
        if resp.status_code == 200 and body.get("status") == "success":
            data = body.get("data")
            if not isinstance(data, dict):
                raise SourceError(f"query API {self.shown_url}: answer without data")
            return data
        self._count(failures=1)
        error = str(body.get("error", "failed")).splitlines()[0] if body.get("error") else "failed"
        line = f"query API {self.shown_url}: {body.get('errorType', resp.status_code)}: {error}"
        if any(w in error.lower() for w in _TOO_BIG):
            raise QueryRefused(line)
        if resp.status_code >= 500 or resp.status_code == 429:
            raise _Retryable(line)
        raise SourceError(line)


class _Retryable(Exception):
    """A failure a second try may get past (connection, timeout, 5xx)."""

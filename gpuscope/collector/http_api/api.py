"""The collector's HTTP API (FastAPI): health, metrics, status and a versioned JSON API.

Read endpoints are open unless ``collector.read_requires_token``; endpoints that change
anything always need the bearer token, and refuse when none is configured. Every list is
paginated (``limit`` at most 1000). The OpenAPI document is at ``/openapi.json``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import duckdb
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import BaseModel

from gpuscope import __version__
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api import api_queries as Q
from gpuscope.collector.http_api import api_utilization as U
from gpuscope.collector.http_api.api_docs import add_docs
from gpuscope.collector.http_api.api_expensive import expensive_gate
from gpuscope.collector.http_api.api_input import MAX_OFFSET, BodyLimit, parse_time, token_matches
from gpuscope.collector.http_api.api_json import TimesJSONResponse, validation_error
from gpuscope.collector.http_api.api_openapi import declare_errors
from gpuscope.collector.http_api.api_whatif import WhatIf, whatif_router
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.timefmt import rfc3339

MAX_LIMIT = 1000
MAX_POINTS = 11_000
#: The longest utilization step: a year (finite, so DuckDB's interval arithmetic holds).
MAX_STEP_SECONDS = 366 * 86400.0
#: Module level, so FastAPI can resolve them (annotations are strings here).
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]


@dataclass
class ApiState:
    """What the API needs of the running collector."""

    store: Store
    targets: TargetRegistry
    metrics: CollectorMetrics
    token: str = ""
    read_requires_token: bool = False
    #: Runs one scrape cycle now and returns the samples stored (POST /api/v1/scrape).
    scrape_now: Callable[[], int] | None = None
    #: Applies retention now (POST /api/v1/retention).
    retention_now: Callable[[], dict[str, int]] | None = None
    reports_dir: Path | None = None
    ready: Callable[[], bool] = lambda: True
    #: Store health, series held and the ingest limits, for GET /api/v1/status.
    ingest_status: Callable[[], dict[str, Any]] = dict
    clock: Callable[[], float] = time.time
    extra_status: dict[str, Any] = field(default_factory=dict)
    #: The culler arbiter calls an idle analysis older than this stale.
    arbiter_max_age_seconds: float = 900.0
    #: Routers of the layers above (alerts), built with the (reader, writer) dependencies
    #: so they share the token checks; the collector itself imports none of them.
    routers: list[Callable[[list[Any], list[Any]], APIRouter]] = field(default_factory=list)
    #: Replays a stored week under placement policies (GET /api/v1/whatif); given by the
    #: assembled service, since the replay is in analytics (None: the route answers 503).
    whatif: WhatIf | None = None
    #: Routers of expensive read routes (analyses, reports), built with the expensive
    #: routes' gate (api_expensive.py) in place of the reader's checks.
    expensive_routers: list[Callable[[list[Any], list[Any]], APIRouter]] = field(
        default_factory=list
    )
    #: The expensive routes need the token even where reads are open.
    expensive_reads_require_token: bool = False
    #: How many expensive requests run at once (one more: 429).
    expensive_reads_concurrency: int = 1
    #: The most replays per policy GET /api/v1/whatif may ask for.
    whatif_max_seeds: int = 10


class Page(BaseModel):
    items: list[dict[str, Any]]
    total: int
    limit: int
    offset: int


class UtilizationSeries(BaseModel):
    key: str
    #: ``[unix_seconds, mean utilization 0..1, series averaged]`` per step, like the
    #: ``[time, value]`` pairs of Prometheus's own API (compact: a week of 1,000 GPUs is
    #: hundreds of thousands of points).
    points: list[tuple[float, float, int]]


class Utilization(BaseModel):
    by: str
    resolution: str
    start: datetime
    end: datetime
    step_seconds: float
    series: list[UtilizationSeries]
    total: int
    limit: int
    offset: int
    #: what fleet summaries in the range mean for this view (docs/api.md); else empty
    note: str = ""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def create_app(state: ApiState) -> FastAPI:
    app = FastAPI(
        title="gpuscope collector",
        version=__version__,
        description="GPU cluster utilization, inventory, findings and actions.",
        default_response_class=TimesJSONResponse,  # every time RFC 3339 with Z
        # FastAPI's /docs and /redoc pages load their scripts from a public CDN: blank in an
        # air-gapped cluster, and a third-party fetch from an operator's browser. Off; /docs
        # is Swagger UI served from the package instead (api_docs.py), on /openapi.json.
        docs_url=None,
        redoc_url=None,
    )
    add_docs(app)
    app.add_middleware(BodyLimit)
    app.add_exception_handler(RequestValidationError, validation_error)  # no 500 for NaN

    def check_token(request: Request) -> None:
        if not state.token:
            raise HTTPException(403, "no API token is configured for this collector")
        if not token_matches(request.headers.get("authorization", ""), state.token):
            raise HTTPException(
                401, "a valid bearer token is needed", headers={"WWW-Authenticate": "Bearer"}
            )

    def check_read(request: Request) -> None:
        if state.read_requires_token:
            check_token(request)

    reader = [Depends(check_read)]
    writer = [Depends(check_token)]
    expensive = [
        Depends(
            expensive_gate(
                state.expensive_reads_concurrency,
                check_token if state.expensive_reads_require_token else check_read,
            )
        )
    ]

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    def readyz(response: Response) -> dict[str, Any]:
        ok = state.ready()
        response.status_code = 200 if ok else 503
        return {"ready": ok}

    @app.get("/metrics", tags=["health"], response_class=Response)
    def metrics() -> Response:
        with contextlib.suppress(duckdb.Error):  # a failed store: the other metrics still
            state.metrics.samples_stored.set(state.store.samples_stored())
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/status", dependencies=reader, tags=["status"])
    def status() -> dict[str, Any]:
        """Targets' health (with the reason of a failure and what was dropped, by reason),
        the store's health and the ingest limits; the store's counts are null while the
        database cannot be read."""
        facts: dict[str, Any] = {"schema_version": None, "samples_stored": None, "series": None}
        try:
            cur = state.store.cursor()
            try:
                series = cur.execute(Q.SERIES_COUNT).fetchone()
            finally:
                cur.close()
            facts = {
                "schema_version": state.store.schema_version,
                "samples_stored": state.store.samples_stored(),
                "series": series[0] if series else 0,
            }
        except duckdb.Error:
            pass
        return {
            "version": __version__,
            **facts,
            "targets": state.targets.status(),
            "ingest": state.ingest_status(),
            **state.extra_status,
        }

    @app.get(
        "/api/v1/utilization", dependencies=reader, tags=["utilization"], response_model=Utilization
    )
    def utilization(
        by: Literal["cluster", "node", "gpu", "namespace", "project", "workload"] = "cluster",
        start: str | None = None,
        end: str | None = None,
        step: Annotated[float, Query(gt=0, le=MAX_STEP_SECONDS, allow_inf_nan=False)] = 60.0,
        node: str | None = None,
        namespace: str | None = None,
        project: str | None = None,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> Utilization:
        now = state.clock()
        t_end = parse_time(end, now)
        t_start = parse_time(start, t_end.timestamp() - 3600)
        if t_start >= t_end:
            raise HTTPException(400, "start must be before end")
        if (t_end - t_start).total_seconds() / step > MAX_POINTS:
            raise HTTPException(400, f"more than {MAX_POINTS} points per series; raise step")
        params = {
            "start": U.naive(t_start),
            "end": U.naive(t_end),
            "step": step,
            "node": node,
            "namespace": namespace,
            "project": project,
            "limit": limit,
            "offset": offset,
        }
        resolution = Q.resolution_for(step)
        cur = state.store.cursor()
        try:
            if resolution in Q.FRONTIER_KEYS:
                params["frontier"] = U.frontier(cur, resolution)
            rows, total, note = U.read(cur, by, resolution, params)
        finally:
            cur.close()
        # DuckDB writes each series' points as JSON; Python only joins the pieces (a week
        # of 1,000 GPUs is too many points to turn into Python objects and back).
        head = json.dumps(
            {
                "by": by,
                "resolution": resolution,
                "start": rfc3339(t_start),
                "end": rfc3339(t_end),
                "step_seconds": step,
                "total": total,
                "limit": limit,
                "offset": offset,
                "note": note,
            }
        )
        series = ",".join(f'{{"key":{json.dumps(key)},"points":{points}}}' for key, points in rows)
        return Response(
            f'{head[:-1]},"series":[{series}]}}',  # type: ignore[return-value]
            media_type="application/json",
        )

    def _page(
        sql: str,
        count_sql: str,
        params: dict[str, Any],
        shape: Callable[[tuple[Any, ...]], dict[str, Any]],
    ) -> Page:
        cur = state.store.cursor()
        try:
            rows = cur.execute(sql, params).fetchall()
            count_params = {k: v for k, v in params.items() if k not in ("limit", "offset")}
            total = cur.execute(count_sql, count_params or None).fetchone()
        finally:
            cur.close()
        return Page(
            items=[shape(r) for r in rows],
            total=total[0] if total else 0,
            limit=params["limit"],
            offset=params["offset"],
        )

    @app.get(
        "/api/v1/inventory/{kind}", dependencies=reader, tags=["inventory"], response_model=Page
    )
    def inventory(
        kind: Literal["nodes", "pods", "quotas"], limit: Limit = 100, offset: Offset = 0
    ) -> Page:
        return _page(
            Q.INVENTORY[kind],
            Q.INVENTORY_COUNT[kind],
            {"limit": limit, "offset": offset},
            lambda r: {"key": r[0], **_json(r[1]), "since": r[2]},
        )

    def _finding(r: tuple[Any, ...]) -> dict[str, Any]:
        cols = (
            "id",
            "kind",
            "severity",
            "subject",
            "since",
            "observed_at",
            "evidence",
            "recommendation",
            "resolved_at",
        )
        return {
            c: _json(v) if c in ("subject", "evidence", "recommendation") else v
            for c, v in zip(cols, r, strict=True)
        }

    @app.get("/api/v1/findings", dependencies=reader, tags=["findings"], response_model=Page)
    def findings(
        kind: str | None = None,
        severity: str | None = None,
        open_only: bool = True,
        limit: Limit = 100,
        offset: Offset = 0,
    ) -> Page:
        return _page(
            Q.FINDINGS,
            Q.FINDINGS_COUNT,
            {
                "kind": kind,
                "severity": severity,
                "open_only": open_only,
                "with_recommendation": False,
                "limit": limit,
                "offset": offset,
            },
            _finding,
        )

    @app.get("/api/v1/recommendations", dependencies=reader, tags=["findings"], response_model=Page)
    def recommendations(kind: str | None = None, limit: Limit = 100, offset: Offset = 0) -> Page:
        return _page(
            Q.FINDINGS,
            Q.FINDINGS_COUNT,
            {
                "kind": kind,
                "severity": None,
                "open_only": True,
                "with_recommendation": True,
                "limit": limit,
                "offset": offset,
            },
            _finding,
        )

    @app.get("/api/v1/actions", dependencies=reader, tags=["actions"], response_model=Page)
    def actions(kind: str | None = None, limit: Limit = 100, offset: Offset = 0) -> Page:
        cols = ("id", "ts", "kind", "finding_id", "dry_run", "result", "record")
        return _page(
            Q.ACTIONS,
            Q.ACTIONS_COUNT,
            {"kind": kind, "limit": limit, "offset": offset},
            lambda r: {c: _json(v) if c == "record" else v for c, v in zip(cols, r, strict=True)},
        )

    @app.get("/api/v1/arbiter/idle", dependencies=reader, tags=["actions"])
    def arbiter_idle(
        namespace: Annotated[str, Query(min_length=1, max_length=253)],
        pod: Annotated[str, Query(min_length=1, max_length=253)],
    ) -> dict[str, Any]:
        """For idle cullers that see only kernel activity (jupyterhub-idle-culler's
        ``cull_arbiter_hook``, Kubeflow's culler): is this server's GPU idle, and for how
        long. ``stale`` when the last idle analysis is older than ``max_age_seconds``:
        then a culler should fall back to its own verdict."""
        cur = state.store.cursor()
        try:
            row = cur.execute(Q.ARBITER_IDLE, {"namespace": namespace, "pod": pod}).fetchone()
        finally:
            cur.close()
        gpus, idle_since, as_of = row if row else (0, None, None)
        now = state.clock()
        as_of_s = as_of.replace(tzinfo=UTC).timestamp() if as_of else None
        idle = bool(gpus) and idle_since is not None
        return {
            "namespace": namespace,
            "pod": pod,
            "holds_gpu": bool(gpus),
            "gpus": int(gpus or 0),
            "gpu_idle": idle,
            "idle_since": idle_since.replace(tzinfo=UTC).isoformat() if idle else None,
            "idle_seconds": round(now - idle_since.replace(tzinfo=UTC).timestamp(), 1)
            if idle
            else 0.0,
            "as_of": as_of.replace(tzinfo=UTC).isoformat() if as_of else None,
            "stale": as_of_s is None or now - as_of_s > state.arbiter_max_age_seconds,
        }

    @app.get("/api/v1/reports", dependencies=reader, tags=["reports"], response_model=Page)
    def reports(limit: Limit = 100, offset: Offset = 0) -> Page:
        files = sorted(state.reports_dir.rglob("*.*")) if state.reports_dir else []
        items = [
            {"path": str(p.relative_to(state.reports_dir)), "bytes": p.stat().st_size}
            for p in files
            if state.reports_dir and p.is_file()
        ]
        return Page(
            items=items[offset : offset + limit], total=len(items), limit=limit, offset=offset
        )

    @app.post("/api/v1/scrape", dependencies=writer, tags=["operations"])
    def scrape() -> dict[str, int]:
        if state.scrape_now is None:
            raise HTTPException(409, "this collector ingests from a query API, not by scraping")
        return {"samples_stored": state.scrape_now()}

    @app.post("/api/v1/retention", dependencies=writer, tags=["operations"])
    def retention() -> dict[str, int]:
        if state.retention_now is None:
            raise HTTPException(409, "retention is not available")
        return state.retention_now()

    app.include_router(whatif_router(lambda: state.whatif, expensive, state.whatif_max_seeds))
    for make_router in state.routers:
        app.include_router(make_router(reader, writer))
    for make_router in state.expensive_routers:
        app.include_router(make_router(expensive, writer))
    declare_errors(app)  # 401, 403, 400, 404, 413, 503 in the OpenAPI document too
    return app

"""``GET /api/v1/findings/{id}/series``: a finding's per-GPU or per-port series, asked of
the metrics engine when someone looks (fleet mode; docs/scale.md, "Fleet summaries").

Why here: with fleet summaries the store holds per-workload and hot-port aggregates, not
every GPU's series; the evidence a user drills into (which of an idle workload's GPUs sat
idle, a hot port's traffic against its line rate) is asked of the engine for the finding's
subject, over its window (``minutes`` before it was last observed, through then or its
resolution), and never stored. 404 for an unknown finding; an empty ``series`` for kinds
whose evidence is not in samples (fragmentation, quota); 502 when the engine fails.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from gpuscope.collector.http_api import api_queries as Q
from gpuscope.collector.querying.drilldown import drilldown, drilldown_queries, drilldown_step
from gpuscope.collector.querying.query_client import QueryClient
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import SourceError


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _unix(ts: datetime) -> float:
    return ts.replace(tzinfo=UTC).timestamp() if ts.tzinfo is None else ts.timestamp()


def drilldown_router(
    store: Store, client: Callable[[], QueryClient], reader: list[Any], writer: list[Any]
) -> APIRouter:
    """The route, with the reader's checks; ``client`` gives the collector's query client."""
    router = APIRouter()

    @router.get("/api/v1/findings/{finding_id}/series", dependencies=reader, tags=["findings"])
    def finding_series(
        finding_id: str, minutes: Annotated[int, Query(ge=5, le=7 * 24 * 60)] = 60
    ) -> dict[str, Any]:
        """The finding's per-GPU or per-port series from the engine, not stored."""
        cur = store.cursor()
        try:
            row = cur.execute(Q.FINDING_BY_ID, {"id": finding_id}).fetchone()
        finally:
            cur.close()
        if row is None:
            raise HTTPException(404, "no such finding")
        kind, subject, evidence, _since, observed, resolved = row
        end = _unix(resolved or observed)
        start = end - 60 * minutes
        step = drilldown_step(start, end)
        queries = drilldown_queries(kind, _json(subject) or {}, _json(evidence) or {}, step)
        try:
            series = drilldown(client(), queries, start, end, step)
        except SourceError as exc:
            raise HTTPException(502, str(exc)) from exc
        return {
            "id": finding_id, "kind": kind, "start": start, "end": end, "step_seconds": step,
            "queries": [{"name": q.name, "query": q.query} for q in queries],
            "series": series,
        }  # fmt: skip

    return router

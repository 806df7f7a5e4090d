"""``GET /api/v1/topology``: the latest topology analysis, per level and domain.

The collector runs the topology detector on its schedule (from the inventory's node labels)
and keeps the latest run with the analytics gauges; this route serves it whole: ``levels``
(each with ``domains`` and ``slots``, as ``gpuscope analyze topology --json`` has them),
the pod-group figures, the plans, and the open ``topology_fragmentation`` findings. ``level``
narrows the answer to one level (404 when the analysis has no such level); 503 until the
first run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, HTTPException

from gpuscope.collector.gauges.analytics_gauges import Summarised
from gpuscope.core.timefmt import api_times, rfc3339


def topology_router(
    latest: Callable[[], Summarised | None], reader: list[Any], writer: list[Any] | None = None
) -> APIRouter:
    """``GET /api/v1/topology``; made as every router of ``ApiState.routers`` is, with the
    reader and writer dependencies (this one only reads)."""
    router = APIRouter()

    @router.get("/api/v1/topology", dependencies=reader, tags=["analytics"])
    def topology(level: str | None = None) -> dict[str, Any]:
        """Levels, domains, slots and blocked pod groups from the last analytics run."""
        analysis = latest()
        if analysis is None:
            raise HTTPException(503, "no topology analysis yet (it runs with the analytics)")
        summary = dict(analysis.summary)
        if level is not None:
            levels = summary.get("levels") or {}
            if level not in levels:
                shown = level if len(level) <= 80 else level[:80] + "..."
                raise HTTPException(404, f"no topology level {shown!r}")
            summary["levels"] = {level: levels[level]}
        findings = [
            {
                "kind": f.kind,
                "severity": f.severity,
                "subject": dict(f.subject),
                "since": rfc3339(f.since) if f.since else None,
                "evidence": dict(f.evidence),
            }
            for f in analysis.findings
        ]
        out: dict[str, Any] = api_times({"summary": summary, "findings": findings})
        return out

    return router

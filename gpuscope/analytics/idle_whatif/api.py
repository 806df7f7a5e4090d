"""``GET /api/v1/whatif/idle``: ``gpuscope whatif idle`` run on the collector's own store.

The CLI runs itself through here when a running collector holds the database
(gpuscope/cli/beside.py), and anything else may ask the same: the answer is the object
``gpuscope whatif idle --json`` prints. Reading only (a read cursor, a temp table of its
own); bad input is a 400 with one line, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query
from pydantic import Field

from gpuscope.analytics.idle_whatif.figures import idle_whatif, replay_range
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import UserError
from gpuscope.core.settings import Settings

#: Thresholds and time limits one request may ask for at most (the CLI's bound).
MAX_POINTS = 32
#: The longest idle threshold (minutes) and time limit (hours): a week.
MAX_MINUTES, MAX_HOURS = 7 * 24 * 60.0, 7 * 24.0
Minutes = Annotated[float, Field(ge=1, le=MAX_MINUTES, allow_inf_nan=False)]
Hours = Annotated[float, Field(ge=0.5, le=MAX_HOURS, allow_inf_nan=False)]


def idle_whatif_router(
    store: Store, settings: Settings, clock: Callable[[], float]
) -> Callable[[list[Any], list[Any]], APIRouter]:
    """The route, built with the collector's (reader, writer) token checks."""

    def make(reader: list[Any], writer: list[Any]) -> APIRouter:
        del writer
        router = APIRouter(tags=["analytics"])

        @router.get("/api/v1/whatif/idle", dependencies=list(reader))
        def whatif_idle(
            week: Annotated[str | None, Query(max_length=16)] = None,
            start: Annotated[str | None, Query(alias="from", max_length=64)] = None,
            end: Annotated[str | None, Query(alias="to", max_length=64)] = None,
            idle_minutes: Annotated[list[Minutes] | None, Query()] = None,
            time_limit_hours: Annotated[list[Hours] | None, Query()] = None,
            warning_minutes: Annotated[float, Query(ge=0, le=24 * 60)] = 0.0,
            namespace: Annotated[list[str] | None, Query()] = None,
            max_comeback_share: Annotated[float | None, Query(ge=0, le=1)] = None,
            all_workloads: bool = False,
        ) -> dict[str, Any]:
            """Idle thresholds (default ladder 15..1440 minutes) and time limits (8..168
            hours) replayed over the week (default: the last complete one) or [from, to),
            besides the configured policies: per point the sessions stopped, those busy
            again later, GPU-hours freed and busy GPU-hours cut off, per namespace and
            owner; and the recommendation with its rule."""
            if len(idle_minutes or ()) + len(time_limit_hours or ()) > MAX_POINTS:
                raise HTTPException(400, f"at most {MAX_POINTS} thresholds and time limits")
            now = datetime.fromtimestamp(clock(), UTC)
            try:
                lo, hi, label = replay_range(week, start, end, now)
                cur = store.cursor()
                try:
                    out = idle_whatif(
                        cur,
                        lo,
                        hi,
                        settings,
                        idle_minutes=idle_minutes,
                        time_limit_hours=time_limit_hours,
                        warning_minutes=warning_minutes,
                        namespaces=namespace,
                        max_comeback_share=max_comeback_share,
                        every=all_workloads,
                    )
                finally:
                    cur.close()
            except UserError as exc:
                raise HTTPException(400, str(exc).splitlines()[0]) from None
            if label is not None:
                out["range"]["week"] = label
            return out

        return router

    return make

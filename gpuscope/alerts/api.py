"""The alerts' HTTP API: alerts, the delivery log, receivers, and silences with an expiry.

A router the assembled service mounts on the collector's app (the collector imports no
alerts code); reads and writes are guarded by the collector's own token checks. Receivers
are listed by name and type only: URLs, tokens and routing keys never leave the process.
"""

from __future__ import annotations

import secrets as _secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from gpuscope.alerts.config import parse_duration
from gpuscope.alerts.engine import AlertsEngine, engine_status
from gpuscope.alerts.matchers import MAX_MATCHER_LENGTH, parse_matchers
from gpuscope.collector.http_api.api import Limit, Offset
from gpuscope.collector.storage.store import Store

#: The longest a silence may last: a forgotten silence must not hide alerts for ever.
MAX_SILENCE = timedelta(days=90)
#: The most matchers one silence may have.
MAX_MATCHERS = 64


class SilenceIn(BaseModel):
    """``matchers`` in Alertmanager syntax; ``duration`` (e.g. ``2h``) or ``ends_at``."""

    matchers: list[Annotated[str, Field(max_length=MAX_MATCHER_LENGTH)]] = Field(
        min_length=1, max_length=MAX_MATCHERS
    )
    duration: str | None = None
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    created_by: str = Field(default="", max_length=200)
    comment: str = Field(default="", max_length=2000)


def _naive(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts


def new_silence(body: SilenceIn, now: datetime) -> dict[str, Any]:
    """Validate a silence request (ValueError with the reason) into the stored record."""
    parse_matchers(body.matchers)
    starts = _naive(body.starts_at) if body.starts_at else now
    if body.ends_at is not None and body.duration is not None:
        raise ValueError("give duration or ends_at, not both")
    if body.ends_at is not None:
        ends = _naive(body.ends_at)
    elif body.duration is not None:
        seconds = parse_duration(body.duration)
        if not seconds <= MAX_SILENCE.total_seconds():  # also NaN; before timedelta overflows
            raise ValueError(f"a silence may last at most {MAX_SILENCE.days} days")
        try:
            ends = starts + timedelta(seconds=seconds)
        except OverflowError:
            raise ValueError("the silence would end after the year 9999") from None
    else:
        raise ValueError("a silence needs an expiry: duration or ends_at")
    if ends <= max(starts, now):
        raise ValueError("the silence would end before it starts or in the past")
    if ends - starts > MAX_SILENCE:
        raise ValueError(f"a silence may last at most {MAX_SILENCE.days} days")
    return {"id": _secrets.token_hex(8), "matchers": list(body.matchers),
            "starts_at": starts, "ends_at": ends, "created_by": body.created_by,
            "comment": body.comment}  # fmt: skip


def alerts_router(
    store: Store,
    engine: AlertsEngine | None,
    clock: Callable[[], float],
    reader: Sequence[Any],
    writer: Sequence[Any],
) -> APIRouter:
    router = APIRouter(tags=["alerts"])

    def now() -> datetime:
        return datetime.fromtimestamp(clock(), UTC).replace(tzinfo=None)

    @router.get("/api/v1/alerts", dependencies=list(reader))
    def list_alerts(state: str | None = None, limit: Limit = 100, offset: Offset = 0) -> Any:
        items = [rec for rec in store.alert_states().values()
                 if state is None or rec.get("state") == state]  # fmt: skip
        items.sort(key=lambda r: (r.get("state") != "firing", str(r.get("since"))))
        return {"items": items[offset : offset + limit], "total": len(items),
                "limit": limit, "offset": offset}  # fmt: skip

    @router.get("/api/v1/alerts/receivers", dependencies=list(reader))
    def receivers() -> Any:
        return engine_status(engine)

    @router.get("/api/v1/alerts/deliveries", dependencies=list(reader))
    def deliveries(receiver: str | None = None, limit: Limit = 100, offset: Offset = 0) -> Any:
        items, total = store.deliveries(receiver=receiver, limit=limit, offset=offset)
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    @router.get("/api/v1/silences", dependencies=list(reader))
    def list_silences(all: bool = False, limit: Limit = 100, offset: Offset = 0) -> Any:
        items = store.silences(now(), include_expired=all)  # a few: paged here
        return {"items": items[offset : offset + limit], "total": len(items),
                "limit": limit, "offset": offset}  # fmt: skip

    @router.post("/api/v1/silences", dependencies=list(writer), status_code=201)
    def add_silence(body: SilenceIn) -> Any:
        at = now()
        try:
            silence = new_silence(body, at)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        store.add_silence(silence, at)
        return {**silence, "created_at": at}

    @router.delete("/api/v1/silences/{silence_id}", dependencies=list(writer))
    def expire_silence(silence_id: str) -> Any:
        done = store.expire_silence(silence_id, now())
        if done is None:
            raise HTTPException(404, f"no silence {silence_id}")
        return {"id": silence_id, "expired": True, "was_active": done}

    return router

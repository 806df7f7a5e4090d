"""Checks on what callers send the HTTP API, so that bad input is a 4xx, never a 500.

Every bound here is stated in docs/api.md. A caller may send any bytes: a header that is
not ASCII, a time past the year 9999, ``inf`` for a step, a body of gigabytes. Each is
refused with a JSON ``{"detail": ...}`` before it reaches Python's datetime arithmetic,
DuckDB's integer parameters or the process's memory.
"""

from __future__ import annotations

import hmac
import json
import math
from datetime import UTC, datetime

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The largest request body accepted (a silence is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024
#: The largest ``offset`` of a paginated list (DuckDB binds it as a 64-bit integer).
MAX_OFFSET = 1_000_000_000
#: Times the API accepts: the Unix epoch up to the last second of the year 9999.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


def token_matches(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>``, in constant time.

    Compared as bytes: ``hmac.compare_digest`` raises TypeError on a ``str`` that is not
    ASCII, and any caller can send such a header (HTTP headers arrive as Latin-1).
    """
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8"), token.encode("utf-8"))


def parse_time(value: str | None, default: float) -> datetime:
    """RFC 3339 or Unix seconds (``default`` when absent) within [EARLIEST, LATEST]."""
    if value is None or value == "":
        return _in_window(default, "default")
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return _in_window(seconds, value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise HTTPException(400, f"bad time {value!r}: use RFC 3339 or Unix seconds") from None
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    if not EARLIEST <= parsed <= LATEST:
        raise HTTPException(400, _window_error(value))
    return parsed


def _in_window(seconds: float, given: str) -> datetime:
    if not (math.isfinite(seconds) and EARLIEST.timestamp() <= seconds <= LATEST.timestamp()):
        raise HTTPException(400, _window_error(given))
    return datetime.fromtimestamp(seconds, UTC)


def _window_error(given: str) -> str:
    return (
        f"time {given!r} is outside {EARLIEST.isoformat()} .. {LATEST.isoformat()}"
        if given != "default"
        else "the default start (end minus one hour) is before 1970; give start"
    )


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413, declared or streamed.

    A ``Content-Length`` over the limit is refused before any byte is read; a chunked body
    is counted as it arrives and refused at the first chunk past the limit, so memory
    never holds more than the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                await _reply(send, 400, "Content-Length is not a number")
                return
            if length > self.max_bytes:
                await _reply(send, 413, self._too_large())
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI passes an HTTPException from reading the body through as is.
                    raise HTTPException(413, self._too_large())
            return message

        await self.app(scope, counted, send)

    def _too_large(self) -> str:
        return f"request body larger than {self.max_bytes} bytes"


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

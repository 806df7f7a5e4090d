"""The API's JSON answers, with every time in one form (RFC 3339, UTC, ``Z``).

The store and the records hand times over as naive datetimes, ISO text with ``+00:00`` or
Unix seconds; a client should not need three parsers. This response class is the API's
default, so every route (the layers' routers included) answers alike.

An answer is never a 500 for what a client sent: a request body may hold what JSON allows
Python but not an answer (``NaN``, ``Infinity``, a lone surrogate such as ``"\\ud800"``),
and the 422 that refuses it echoes the input. Such values are rendered as ``null`` and as
backslash escapes, and the validation error handler answers with this class.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gpuscope.core.timefmt import api_times


def printable(value: Any) -> Any:
    """``value`` with non-finite floats as None and strings made encodable as UTF-8."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable(v) for v in value]
    return value


class TimesJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        content = api_times(content)
        try:
            return super().render(content)
        except (ValueError, UnicodeEncodeError):
            return super().render(printable(content))


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 for a request that fails validation, rendered safely (module
    docstring): FastAPI's own handler answered 500 for a body with ``NaN`` in it."""
    assert isinstance(exc, RequestValidationError)
    return TimesJSONResponse({"detail": jsonable_encoder(exc.errors())}, status_code=422)

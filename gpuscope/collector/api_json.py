"""The API's JSON answers, with every time in one form (RFC 3339, UTC, ``Z``).

The store and the records hand times over as naive datetimes, ISO text with ``+00:00`` or
Unix seconds; a client should not need three parsers. This response class is the API's
default, so every route (the layers' routers included) answers alike.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from gpuscope.core.timefmt import api_times


class TimesJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return super().render(api_times(content))

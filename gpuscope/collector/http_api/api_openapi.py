"""The OpenAPI document declares every status code the API answers.

FastAPI documents each operation's success code and, where it has parameters, 422. The
API also answers, from its dependencies and middleware, codes FastAPI cannot see: 401 and
403 (the bearer token checks), 400 (a value out of range), 404 (no such object), 413 (a body
over the limit), 429 (an expensive read while others run: api_expensive.py) and 503 (not
ready, or a feature this collector does not serve). A client
generated from the document, or a fuzzer checking answers against it (schemathesis, in
tests/integration/test_api_schema.py), must find each of them declared, with the one body
shape they share: ``{"detail": ...}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

#: The error codes and what each means, declared on every operation.
ERRORS: dict[str, str] = {
    "400": "Bad request: a value the API cannot use (out of range, contradictory)",
    "401": "A valid bearer token is needed",
    "403": "No API token is configured on this collector, so nothing may change",
    "404": "No such object",
    "413": "The request body is over the limit",
    "422": "Validation error",
    "429": "Too many expensive requests running at once; retry after Retry-After seconds",
    "503": "Not ready, or not served by this collector",
}
_ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "properties": {"detail": {"title": "Detail"}},
    "required": ["detail"],
}
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def with_errors(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with :data:`ERRORS` added to every operation that lacks them."""
    for item in (document.get("paths") or {}).values():
        for method, op in item.items():
            if method not in _METHODS:
                continue
            responses = op.setdefault("responses", {})
            for code, text in ERRORS.items():
                responses.setdefault(
                    code,
                    {
                        "description": text,
                        "content": {"application/json": {"schema": dict(_ERROR_SCHEMA)}},
                    },
                )
    return document


def declare_errors(app: FastAPI) -> None:
    """Make ``app``'s OpenAPI document declare :data:`ERRORS` (generated once, cached)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_errors(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

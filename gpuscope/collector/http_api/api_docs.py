"""``/docs``: the API's reference in Swagger UI, served offline from the collector itself.

FastAPI's own ``/docs`` loads Swagger UI from a public CDN (blank in an air-gapped cluster, a
third-party fetch from an operator's browser), so it stays off; this page takes Swagger UI's
files from the ``swagger-ui-bundle`` package (``/docs/assets/...``) and points it at
``/openapi.json``. Nothing on the page loads from another host. The page and its files are
static and carry no data, so they need no token; the API calls made from the page send the
token the reader enters under "Authorize".
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

DOCS = "/docs"
ASSETS = "/docs/assets"


def add_docs(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Serve Swagger UI at ``/docs`` (its files under ``/docs/assets``)."""
    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="swagger-ui")
    redirect = f"{DOCS}/oauth2-redirect"

    @app.get(DOCS, include_in_schema=False, response_class=HTMLResponse)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            oauth2_redirect_url=redirect,
        )

    @app.get(redirect, include_in_schema=False, response_class=HTMLResponse)
    def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

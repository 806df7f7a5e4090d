"""The collector's API serves nothing that loads from a public CDN (issue 24: /docs was
FastAPI's Swagger UI from cdn.jsdelivr.net, blank without internet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store

pytestmark = pytest.mark.integration


def test_no_page_loads_a_cdn_and_the_openapi_document_is_served(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    try:
        client = TestClient(create_app(ApiState(store, TargetRegistry([]), CollectorMetrics())))
        answer = client.get("/redoc")
        assert answer.status_code == 404
        for page in ("/docs", "/docs/oauth2-redirect"):
            answer = client.get(page)
            assert answer.status_code == 200, page
            assert "cdn" not in answer.text.lower() and "https://" not in answer.text, page
        spec = client.get("/openapi.json")
        assert spec.status_code == 200
        assert "/api/v1/findings" in spec.json()["paths"]
    finally:
        store.close()


def test_docs_is_swagger_ui_served_offline_on_the_openapi_document(tmp_path: Path) -> None:
    """Issue 38: /docs answered a bare 404 JSON with no pointer to /openapi.json. Now it is
    Swagger UI, every script, style sheet and image of it served by the collector itself."""
    import re

    store = Store.open(tmp_path / "s.duckdb")
    try:
        client = TestClient(create_app(ApiState(store, TargetRegistry([]), CollectorMetrics())))
        page = client.get("/docs")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "SwaggerUIBundle" in page.text and "'/openapi.json'" in page.text
        refs = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert len(refs) >= 3, refs  # the script, the style sheet, the icon
        for ref in refs:
            assert ref.startswith("/docs/assets/"), ref
            asset = client.get(ref)
            assert asset.status_code == 200 and len(asset.content) > 100, ref
        assert "/docs" not in client.get("/openapi.json").json()["paths"]
    finally:
        store.close()

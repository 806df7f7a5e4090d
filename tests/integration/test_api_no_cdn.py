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
        for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            answer = client.get(page)
            assert answer.status_code == 404, page
            assert "cdn" not in answer.text.lower()
        spec = client.get("/openapi.json")
        assert spec.status_code == 200
        assert "/api/v1/findings" in spec.json()["paths"]
    finally:
        store.close()

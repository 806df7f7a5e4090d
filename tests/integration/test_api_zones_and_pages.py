"""Issue 24: `/api/v1/actions` gave `record.at` without a zone, and `/api/v1/silences` took
no `limit`/`offset` where every other list does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuscope.alerts.api import alerts_router
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store

pytestmark = pytest.mark.integration
NOW = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, Store]]:
    store = Store.open(tmp_path / "s.duckdb")
    state = ApiState(
        store, TargetRegistry([]), CollectorMetrics(), token="t" * 40,
        clock=NOW.timestamp,
        routers=[lambda r, w: alerts_router(store, None, NOW.timestamp, r, w)],
    )  # fmt: skip
    try:
        yield TestClient(create_app(state)), store
    finally:
        store.close()


def test_an_actions_record_time_carries_its_zone(served: tuple[TestClient, Store]) -> None:
    client, store = served
    at = NOW - timedelta(minutes=5)
    store.record_actions([{"id": "a1", "kind": "annotate", "at": at, "dry_run": True}], NOW)
    (item,) = client.get("/api/v1/actions").json()["items"]
    assert item["record"]["at"] == "2026-11-23T08:55:00Z"
    assert datetime.fromisoformat(item["record"]["at"]) == at


def test_silences_page_like_every_other_list(served: tuple[TestClient, Store]) -> None:
    client, store = served
    for i in range(5):
        store.add_silence(
            {"id": f"s{i}", "matchers": [f"pod=nb-{i}"], "starts_at": NOW.replace(tzinfo=None),
             "ends_at": (NOW + timedelta(hours=i + 1)).replace(tzinfo=None),
             "created_by": "ops", "comment": ""},
            NOW.replace(tzinfo=None),
        )  # fmt: skip
    everything = client.get("/api/v1/silences").json()
    assert everything["total"] == 5 and len(everything["items"]) == 5
    page = client.get("/api/v1/silences", params={"limit": 2, "offset": 1}).json()
    assert (page["total"], page["limit"], page["offset"]) == (5, 2, 1)
    assert page["items"] == everything["items"][1:3]
    assert client.get("/api/v1/silences", params={"limit": 0}).status_code == 422

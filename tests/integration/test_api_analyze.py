"""``GET /api/v1/analyze``, ``GET /api/v1/report/weekly`` and ``GET /api/v1/whatif``'s
``seeds``/``drop``: what the CLI runs inside a collector that holds the database
(gpuscope/analytics/api.py). Each answers what the CLI computes on the same store, and bad
input is one 400 (or 422), never a 500.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuscope.analytics.api import analytics_router
from gpuscope.analytics.runner import as_json, run_on_store
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from gpuscope.service_whatif import whatif_on_store
from tests.integration import report_week

pytestmark = pytest.mark.integration
NOW = report_week.NOW
AT = datetime(2025, 3, 7, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path = report_week.build(tmp_path_factory.mktemp("api-analyze") / "w.duckdb")
    with Store.open(path, read_only=True) as s:
        yield s


@pytest.fixture
def client(store: Store) -> TestClient:
    state = ApiState(
        store=store,
        targets=TargetRegistry(),
        metrics=CollectorMetrics(),
        clock=NOW.timestamp,
        routers=[analytics_router(store, Settings(), NOW.timestamp)],
        whatif=whatif_on_store(store, Settings(), NOW.timestamp),
    )
    return TestClient(create_app(state))


@pytest.mark.parametrize("what", ["quota", "fragmentation", "bandwidth", "consolidation"])
def test_analyze_answers_the_analysis_the_cli_computes(
    client: TestClient, store: Store, what: str
) -> None:
    got = client.get("/api/v1/analyze", params={"what": what, "at": "2025-03-07T12:00:00Z"})
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["at"] == "2025-03-07T12:00:00Z" and body["note"] is None
    local = run_on_store(store, AT, Settings(), [what], persist=False)
    assert body["analyses"] == {what: as_json(local)}


def test_analyze_without_at_follows_the_data_age_rule(client: TestClient) -> None:
    """The data ends on 2025-03-10 00:00, hours before the collector's now: analysed as
    of then, with the note the CLI prints."""
    body = client.get("/api/v1/analyze", params={"what": "quota"}).json()
    assert body["at"] == "2025-03-10T00:00:00Z"
    assert "analysing as of then" in body["note"]


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"what": "quota", "at": "yesterday"}, 400),
        ({"what": "quota", "at": "0001-01-01T00:00:00Z"}, 400),
        ({"what": "everything"}, 422),
    ],
)
def test_analyze_refuses_bad_input_in_one_line(
    client: TestClient, params: dict[str, str], status: int
) -> None:
    got = client.get("/api/v1/analyze", params=params)
    assert got.status_code == status, got.text
    assert "detail" in got.json()


def test_the_report_answers_the_weeks_files_and_names_the_callers_link(
    client: TestClient,
) -> None:
    got = client.get(
        "/api/v1/report/weekly", params={"week": "2025-W10", "link": "/srv/r/2025-W10/report.html"}
    )
    assert got.status_code == 200, got.text
    body = got.json()
    files = {k: base64.b64decode(v) for k, v in body["files"].items()}
    assert {"report.html", "summary.md", "tables/cluster.csv", "tables/cluster.parquet"} <= set(
        files
    )
    assert files["summary.md"].decode() == body["summary"]
    assert body["summary"].rstrip().endswith("Report: /srv/r/2025-W10/report.html")
    assert body["week"] == "2025-W10"
    assert body["cluster"]["allocated_gpu_hours"]["this_week"] == pytest.approx(636)


@pytest.mark.parametrize("week", ["2025-W11", "0001-W01", "2025-W54", "W10"])
def test_the_report_refuses_a_week_not_over_or_not_a_week(client: TestClient, week: str) -> None:
    got = client.get("/api/v1/report/weekly", params={"week": week})
    assert got.status_code == 400, got.text


def test_whatif_takes_the_clis_seeds_and_drop(client: TestClient) -> None:
    got = client.get(
        "/api/v1/whatif",
        params={"week": "2025-W10", "policy": "bestfit", "seeds": 2, "drop": "true"},
    )
    assert got.status_code == 200, got.text
    summary = got.json()["summary"]
    assert summary["seeds"] == 2 and summary["dropped_when_unplaceable"] is True
    assert client.get("/api/v1/whatif", params={"seeds": 0}).status_code == 422
    assert client.get("/api/v1/whatif", params={"seeds": 101}).status_code == 422


def test_status_names_the_database_the_collector_holds(tmp_path: Path) -> None:
    from gpuscope.collector.service import CollectorService
    from gpuscope.core.settings import load_settings

    (tmp_path / "c.yaml").write_text(f"collector:\n  db: {tmp_path / 'x.duckdb'}\n")
    service = CollectorService(load_settings(tmp_path / "c.yaml", env={}))
    try:
        body = TestClient(create_app(service.api_state())).get("/api/v1/status").json()
    finally:
        service.stop()
    assert body["database"] == str((tmp_path / "x.duckdb").resolve())

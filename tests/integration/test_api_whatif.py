"""``GET /api/v1/whatif`` through the real app: the figures of ``gpuscope whatif --db``
for the same week, bad input answered 400 (never 500), a week with nothing stored 404, and
503 on a collector that was given no replay."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from gpuscope.service_whatif import whatif_on_store
from tests.integration.helpers import ENV
from tests.integration.test_report_whatif import NOW, write_history

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("api-whatif") / "w.duckdb"
    write_history(path)
    return path


def _app(store: Store, *, configured: bool = True, token: str = "") -> TestClient:
    state = ApiState(
        store=store,
        targets=TargetRegistry(),
        metrics=CollectorMetrics(),
        token=token,
        read_requires_token=bool(token),
        clock=NOW.timestamp,
        whatif=whatif_on_store(store, Settings(), NOW.timestamp) if configured else None,
    )
    return TestClient(create_app(state))


@pytest.fixture
def client(db: Path) -> Iterator[TestClient]:
    with Store.open(db, read_only=True) as store:
        yield _app(store)


def test_the_api_answers_what_the_cli_prints(db: Path) -> None:
    """Same week, same policies: the same JSON as ``gpuscope whatif --db --json``."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "whatif", "--db", str(db), "--week",
         "2025-W10", "--json"],
        capture_output=True, text=True, timeout=120, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(proc.stdout)
    with Store.open(db, read_only=True) as store:
        r = _app(store).get("/api/v1/whatif", params={"week": "2025-W10"})
    assert r.status_code == 200, r.text
    api = r.json()
    assert api == cli
    assert api["summary"]["most_jobs_policy"] == "mostallocated"
    assert api["policies"]["mostallocated"]["gpus_recovered"] == 4
    assert api["summary"]["what_happened"]["allocated_gpus"] == 4


def test_policies_can_be_chosen_and_the_week_defaults_to_the_last(client: TestClient) -> None:
    r = client.get("/api/v1/whatif", params=[("policy", "bestfit"), ("policy", "leastallocated")])
    assert r.status_code == 200, r.text
    out = r.json()
    assert set(out["policies"]) == {"bestfit", "leastallocated"}
    assert out["summary"]["week"] == "2025-W10"  # NOW is in W11: W10 is the last complete
    assert out["policies"]["bestfit"]["queued_gpu_hours"] == 2


@pytest.mark.parametrize(
    ("params", "status", "detail"),
    [
        ({"week": "2025-10"}, 400, "expected YYYY-Www"),
        ({"week": "2025-W54"}, 400, "not an ISO week"),
        ({"week": "0000-W01"}, 400, "not an ISO week"),
        ({"week": "x" * 400}, 400, "expected YYYY-Www"),
        ({"week": "2025-W11"}, 400, "is not over"),
        ({"week": "2025-W09"}, 404, "nothing to replay"),
        ({"week": "2025-W10", "policy": "firstfit"}, 400, "unknown policy 'firstfit'"),
    ],
)
def test_bad_input_is_refused_with_a_clear_detail(
    client: TestClient, params: dict[str, str], status: int, detail: str
) -> None:
    r = client.get("/api/v1/whatif", params=params)
    assert r.status_code == status, r.text
    assert detail in json.dumps(r.json()["detail"])


def test_too_many_policies_are_refused(client: TestClient) -> None:
    r = client.get("/api/v1/whatif", params=[("policy", "fgd")] * 17)
    assert r.status_code == 400 and "at most 16" in r.json()["detail"]


def test_a_collector_without_the_replay_says_so(db: Path) -> None:
    with Store.open(db, read_only=True) as store:
        r = _app(store, configured=False).get("/api/v1/whatif", params={"week": "2025-W10"})
    assert r.status_code == 503
    assert "not configured" in r.json()["detail"]


def test_the_route_needs_the_token_when_reads_do(db: Path) -> None:
    with Store.open(db, read_only=True) as store:
        app = _app(store, token="tok")
        assert app.get("/api/v1/whatif").status_code == 401
        ok = app.get("/api/v1/whatif", headers={"Authorization": "Bearer tok"})
    assert ok.status_code == 200, ok.text


def test_the_assembled_service_serves_the_replay(db: Path, tmp_path: Path) -> None:
    """``gpuscope collector`` (extend_service) hands the API its replay: the route answers
    from the live store, where a bare collector answers 503."""
    from gpuscope.collector.service import CollectorService
    from gpuscope.core.settings import load_settings
    from gpuscope.service import extend_service

    live = tmp_path / "live.duckdb"
    live.write_bytes(db.read_bytes())
    settings = load_settings(env={}, overrides={
        "collector": {"db": live, "kubernetes": "none"},
        "report": {"out_dir": tmp_path / "reports"},
    })  # fmt: skip
    svc = CollectorService(settings, clock=NOW.timestamp)
    try:
        bare = TestClient(create_app(svc.api_state())).get("/api/v1/whatif")
        extend_service(svc)
        r = TestClient(create_app(svc.api_state())).get("/api/v1/whatif", params={"policy": "fgd"})
    finally:
        svc.stop()
    assert bare.status_code == 503
    assert r.status_code == 200, r.text
    assert r.json()["policies"]["fgd"]["gpus_recovered"] == 4

"""``GET /api/v1/whatif/idle`` through the real app: the object ``gpuscope whatif idle
--json`` prints for the same range, and bad input answered 400 in one line (never 500)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuscope.analytics.idle_whatif.api import idle_whatif_router
from gpuscope.cli.whatif_idle import _through
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from tests.integration.helpers import ENV
from tests.integration.test_whatif_idle import FROM, NOTEBOOKS, TO, busy_at, store_history

pytestmark = pytest.mark.integration

NOW = datetime(2025, 3, 20, 12, 0)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("api-idle") / "four.duckdb"
    store_history(path, lambda n, ts: 0.6 if busy_at(NOTEBOOKS[n], ts) else 0.01, list(NOTEBOOKS))
    return path


@pytest.fixture
def client(db: Path) -> Iterator[TestClient]:
    with Store.open(db, read_only=True) as store:
        state = ApiState(
            store=store,
            targets=TargetRegistry(),
            metrics=CollectorMetrics(),
            token="",
            read_requires_token=False,
            clock=NOW.timestamp,
            routers=[idle_whatif_router(store, Settings(), NOW.timestamp)],
        )
        yield TestClient(create_app(state))


ARGS = ["--from", FROM, "--to", TO, "--idle-minutes", "30", "--idle-minutes", "180",
        "--time-limit-hours", "4", "--namespace", "research"]  # fmt: skip


def test_the_api_answers_what_the_cli_prints(db: Path, client: TestClient) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "whatif", "idle", "--db", str(db), *ARGS,
         "--json"],
        capture_output=True, text=True, timeout=300, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(proc.stdout)

    class Through:
        """What the CLI beside a collector would ask: its own parameters, sent here."""

        def get(self, path: str, params: list[tuple[str, str]]) -> dict[str, Any]:
            r = client.get(path, params=params)
            assert r.status_code == 200, r.text
            out: dict[str, Any] = r.json()
            return out

    import argparse

    args = argparse.Namespace(week=None, start=FROM, end=TO, idle_minutes=[30.0, 180.0],
                              time_limit_hours=[4.0], namespace=["research"],
                              warning_minutes=0.0, max_comeback_share=None,
                              all_workloads=False)  # fmt: skip
    api = _through(Through(), args)
    assert api == cli
    assert {e["idle_minutes"] for e in api["thresholds"]} == {30, 180}
    assert api["recommendation"]["idle_minutes"] == 180


def test_the_last_complete_week_by_default(client: TestClient) -> None:
    r = client.get("/api/v1/whatif/idle")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["range"]["week"] == "2025-W11"  # NOW is in W12
    assert out["sessions"] == 0  # the notebooks were in W10
    assert out["recommendation"]["idle_minutes"] is None


@pytest.mark.parametrize(
    ("params", "status", "text"),
    [
        ({"week": "2025-W99"}, 400, "not an ISO week"),
        ({"week": "2025-W12"}, 400, "is not over"),
        ({"from": FROM}, 400, "go together"),
        ({"from": "soon", "to": TO}, 400, "expected a time like"),
        ({"from": FROM, "to": TO, "idle_minutes": "0"}, 422, ""),
        ({"from": FROM, "to": TO, "max_comeback_share": "2"}, 422, ""),
    ],
)
def test_bad_input(client: TestClient, params: dict[str, str], status: int, text: str) -> None:
    r = client.get("/api/v1/whatif/idle", params=params)
    assert r.status_code == status, r.text
    assert text in str(r.json()["detail"])

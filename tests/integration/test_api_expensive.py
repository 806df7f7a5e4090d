"""The expensive read routes: user errors are 4xx before any work, and the routes are
bounded (issue 38).

Seen: ``GET /api/v1/whatif?week=...&topology_level=nope`` ran the whole replay, then
answered 500 with a traceback; the open route took ``seeds`` up to 100 over six policies,
and two concurrent ``seeds=30`` requests took 79 s each and left the collector at 1.35 GB.
Now the level is checked against the week's nodes before the replay (400), the seeds are
bounded by ``collector.whatif_max_seeds`` (10), at most
``collector.expensive_reads_concurrency`` (1) expensive requests run at once (one more is
429), ``collector.expensive_reads_require_token`` puts them behind the token, and the
memory a request freed is handed back after it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuscope.analytics.whatif import week as whatif_week
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api import api_expensive
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from gpuscope.service_whatif import whatif_on_store
from tests.integration.test_report_whatif import NOW, write_history

pytestmark = pytest.mark.integration
TOKEN = "a-test-token-that-is-long-enough-0123456789"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("api-expensive") / "w.duckdb"
    write_history(path)
    return path


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    with Store.open(db, read_only=True) as s:
        yield s


def _client(store: Store, **state: Any) -> TestClient:
    state.setdefault("whatif", whatif_on_store(store, Settings(), NOW.timestamp))
    api = ApiState(
        store=store, targets=TargetRegistry(), metrics=CollectorMetrics(), clock=NOW.timestamp,
        **state,
    )  # fmt: skip
    return TestClient(create_app(api), raise_server_exceptions=False)


def test_an_unknown_topology_level_is_a_400_before_the_replay(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    replays: list[object] = []
    real = whatif_week.replay_history

    def counted(*args: Any, **kwargs: Any) -> Any:
        replays.append(args)
        return real(*args, **kwargs)

    # replay_window reads the week and calls replay_history: every replay is counted
    monkeypatch.setattr(whatif_week, "replay_history", counted)
    client = _client(store)
    r = client.get("/api/v1/whatif", params={"week": "2025-W10", "topology_level": "nope"})
    assert r.status_code == 400, r.text
    assert "nope" in r.json()["detail"] and "level" in r.json()["detail"]
    assert replays == []  # refused before any replay
    ok = client.get("/api/v1/whatif", params={"week": "2025-W10", "policy": "bestfit"})
    assert ok.status_code == 200, ok.text
    assert len(replays) == 1


def test_seeds_are_bounded_by_the_collector(store: Store) -> None:
    client = _client(store, whatif_max_seeds=2)
    r = client.get("/api/v1/whatif", params={"week": "2025-W10", "seeds": 3})
    assert r.status_code == 400 and "whatif_max_seeds" in r.json()["detail"], r.text
    r = client.get("/api/v1/whatif", params={"week": "2025-W10", "seeds": 2, "policy": "bestfit"})
    assert r.status_code == 200, r.text
    assert r.json()["summary"]["seeds"] == 2
    # the default bound: 10, not the CLI's 100
    r = _client(store).get("/api/v1/whatif", params={"week": "2025-W10", "seeds": 30})
    assert r.status_code == 400, r.text


def test_one_expensive_request_at_a_time_the_next_is_a_429(store: Store) -> None:
    inside, release = threading.Event(), threading.Event()
    calls = [0]

    def slow(week: str | None, policies: list[str] | None, /, *a: Any, **k: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:  # the first request holds its place until the test lets it go
            inside.set()
            release.wait(60)
        return {"summary": {}, "policies": {}}

    client = _client(store, whatif=slow)
    first: list[int] = []
    t = threading.Thread(target=lambda: first.append(client.get("/api/v1/whatif").status_code))
    t.start()
    try:
        assert inside.wait(60)
        second = client.get("/api/v1/whatif")
        analyze = client.get("/api/v1/status")  # a cheap route is not gated
    finally:
        release.set()
        t.join(60)
    assert second.status_code == 429, second.text
    assert second.headers["retry-after"] == str(api_expensive.RETRY_AFTER_SECONDS)
    assert analyze.status_code == 200
    assert first == [200]
    assert client.get("/api/v1/whatif").status_code == 200  # the place is free again


def test_the_expensive_routes_can_require_the_token_while_reads_are_open(store: Store) -> None:
    client = _client(store, token=TOKEN, expensive_reads_require_token=True)
    assert client.get("/api/v1/status").status_code == 200
    r = client.get("/api/v1/whatif", params={"week": "2025-W10", "policy": "bestfit"})
    assert r.status_code == 401, r.text
    r = client.get(
        "/api/v1/whatif",
        params={"week": "2025-W10", "policy": "bestfit"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 200, r.text


def test_the_memory_a_request_freed_is_handed_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    released: list[int] = []
    monkeypatch.setattr(api_expensive, "release_memory", lambda: released.append(1))
    client = _client(store)
    assert client.get("/api/v1/whatif", params={"week": "2025-W10", "policy": "bestfit"}).is_success
    assert released == [1]
    assert client.get("/api/v1/whatif", params={"week": "1999-W99"}).status_code == 400
    assert released == [1, 1]  # refused requests too


def test_settings_reach_the_api(tmp_path: Path) -> None:
    from gpuscope.core.settings import load_settings

    (tmp_path / "c.yaml").write_text(
        "collector:\n  expensive_reads_require_token: true\n  expensive_reads_concurrency: 2\n"
        "  whatif_max_seeds: 5\n"
    )
    cs = load_settings(tmp_path / "c.yaml", env={}).collector
    assert (cs.expensive_reads_require_token, cs.expensive_reads_concurrency,
            cs.whatif_max_seeds) == (True, 2, 5)  # fmt: skip

"""Every time the API answers with is RFC 3339 in UTC ending in ``Z``.

Before, one answer could hold naive ISO text (findings, alerts, silences), ISO text with
``+00:00`` (utilization, the culler arbiter) and Unix seconds (target status, pods' start
times). Every route is asked over a store holding findings, alerts, a silence, inventory and
scrapes; each value under a time key, and every string that looks like a time, must be of
the one form (the utilization points stay ``[unix_seconds, value, n]`` pairs, as
Prometheus's API gives them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dashboards.stack import collector_service, start_agents
from gpuscope.collector.http_api.api import create_app
from gpuscope.core.timefmt import TIME_KEYS
from gpuscope.service import add_alerts, alerts_job, analytics_job
from gpuscope.sim import SimulatedCluster, default_scenario

pytestmark = pytest.mark.integration
RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$")
LOOKS_LIKE_TIME = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
TOKEN = "t" * 40
PATHS = [
    "/api/v1/status",
    "/api/v1/findings?open_only=false",
    "/api/v1/recommendations",
    "/api/v1/actions",
    "/api/v1/inventory/nodes?limit=2",
    "/api/v1/inventory/pods?limit=50",
    "/api/v1/inventory/quotas",
    "/api/v1/alerts",
    "/api/v1/alerts/deliveries",
    "/api/v1/silences?all=true",
    "/api/v1/utilization?by=node&limit=2",
    "/api/v1/arbiter/idle?namespace=research&pod=nb-alice-0",
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    now = [1_795_000_000.5]
    cluster = SimulatedCluster(default_scenario(nodes=6))
    with ExitStack() as stack:
        agents = start_agents(cluster, stack, lambda: now[0])
        service = collector_service(
            tmp_path_factory.mktemp("times"), cluster, agents, clock=lambda: now[0]
        )
        stack.callback(service.stop)
        for _ in range(4):
            now[0] += 5.0
            service.scrape_cycle()
        engine = add_alerts(service)
        analytics_job(service)
        alerts_job(service, engine)
        service.token = TOKEN
        yield TestClient(create_app(service.api_state()))


def bad_times(obj: Any, path: str = "", key: str = "") -> list[str]:
    """Where ``obj`` holds a time that is not RFC 3339 with Z."""
    if isinstance(obj, dict):
        return [b for k, v in obj.items() if k != "points" for b in bad_times(v, f"{path}.{k}", k)]
    if isinstance(obj, list):
        return [b for i, v in enumerate(obj) for b in bad_times(v, f"{path}[{i}]", key)]
    if key in TIME_KEYS and obj is not None and not (isinstance(obj, str) and RFC3339_Z.match(obj)):
        return [f"{path}={obj!r}"]
    if isinstance(obj, str) and LOOKS_LIKE_TIME.match(obj) and not RFC3339_Z.match(obj):
        return [f"{path}={obj!r}"]
    return []


def test_every_answer_writes_times_one_way(client: TestClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    added = client.post(
        "/api/v1/silences", json={"matchers": ["namespace=ml"], "duration": "2h"}, headers=auth
    )
    assert added.status_code == 201
    assert bad_times(added.json()) == []
    seen: set[str] = set()
    for path in PATHS:
        r = client.get(path)
        assert r.status_code == 200, (path, r.text)
        body = r.json()
        assert bad_times(body, path) == []
        seen |= _time_keys(body)
    # the answers did hold times of each former kind: naive text, +00:00 and Unix seconds
    assert {"since", "observed_at", "starts_at", "start", "last_scrape", "start_time"} <= seen
    status = client.get("/api/v1/status").json()
    last = status["targets"][0]["last_scrape"]
    assert datetime.fromisoformat(last).timestamp() == pytest.approx(1_795_000_020.5)


def _time_keys(obj: Any) -> set[str]:
    if isinstance(obj, dict):
        keys = {k for k, v in obj.items() if k in TIME_KEYS and v is not None}
        return keys.union(*(_time_keys(v) for v in obj.values()))
    if isinstance(obj, list):
        return set().union(*(_time_keys(v) for v in obj))
    return set()

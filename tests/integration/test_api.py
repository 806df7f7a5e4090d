"""The HTTP API on a constructed history: numbers checked by hand, roll-ups equal raw."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store

T0 = datetime(2026, 11, 16, 0, 0, tzinfo=UTC)  # a Monday
STEP = 15


def gpu_labels(node: str, gpu: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted({"node": node, "gpu": gpu, "uuid": f"GPU-{node}-{gpu}", "mig_instance": ""}.items())
    )


def workload_labels(node: str, gpu: str, ns: str, pod: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted(
            {
                **dict(gpu_labels(node, gpu)),
                "namespace": ns,
                "pod": pod,
                "container": "main",
            }.items()
        )
    )


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    """Two hours at 15 s: n1/0 busy at 0.8 then 0.4, n2/0 idle (0.0); a workload on n1/0."""
    store = Store.open(tmp_path / "api.duckdb")
    for i in range(2 * 3600 // STEP):
        ts = T0 + timedelta(seconds=i * STEP)
        busy = 0.8 if i * STEP < 3600 else 0.4
        info = dict(workload_labels("n1", "0", "nlp", "train-0"))
        info.update(workload_kind="training", interactive="false", project="llm")
        store.append_scrape(
            Batch(
                "t",
                int(ts.timestamp() * 1000),
                names=[
                    "gpuscope_gpu_utilization_ratio",
                    "gpuscope_gpu_utilization_ratio",
                    "gpuscope_gpu_workload_utilization_ratio",
                    "gpuscope_gpu_workload_info",
                ],
                labels=[
                    gpu_labels("n1", "0"),
                    gpu_labels("n2", "0"),
                    workload_labels("n1", "0", "nlp", "train-0"),
                    tuple(sorted(info.items())),
                ],
                values=[busy, 0.0, busy, 1.0],
                types={"gpuscope_gpu_utilization_ratio": "gauge"},
            )
        )
    store.apply_retention(T0 + timedelta(hours=2, minutes=10))
    state = ApiState(
        store=store,
        targets=TargetRegistry(),
        metrics=CollectorMetrics(),
        token="tok",
        clock=(T0 + timedelta(hours=2)).timestamp,
        retention_now=lambda: store.apply_retention(T0 + timedelta(hours=3)),
    )
    return TestClient(create_app(state))


def util(client: TestClient, **params: object) -> dict[str, list[float]]:
    r = client.get(
        "/api/v1/utilization",
        params={"start": T0.isoformat(), "end": (T0 + timedelta(hours=2)).isoformat(), **params},
    )
    assert r.status_code == 200, r.text
    return {s["key"]: [round(p[1], 6) for p in s["points"]] for s in r.json()["series"]}


def test_hourly_values_by_hand(client: TestClient) -> None:
    """By node per hour: n1 0.8 then 0.4, n2 0; the cluster averages both GPUs."""
    assert util(client, by="node", step=3600) == {"n1": [0.8, 0.4], "n2": [0.0, 0.0]}
    assert util(client, by="cluster", step=3600) == {"cluster": [0.4, 0.2]}
    assert util(client, by="project", step=3600) == {"llm": [0.8, 0.4]}
    assert util(client, by="workload", step=7200) == {"nlp/train-0": [0.6]}


def test_rollups_answer_as_raw_does(client: TestClient) -> None:
    """Hourly and 5-minute roll-ups give the numbers the raw samples give."""
    r = client.get(
        "/api/v1/utilization", params={"by": "gpu", "step": 3600, "start": T0.isoformat()}
    )
    assert r.json()["resolution"] == "1h"
    raw_15m = util(client, by="node", step=900 + 0.001)  # no resolution divides it: raw
    rolled_15m = util(client, by="node", step=900)  # 5-minute roll-ups
    assert [round(v, 4) for v in raw_15m["n1"][:4]] == [round(v, 4) for v in rolled_15m["n1"][:4]]


def test_filters_pagination_and_limits(client: TestClient) -> None:
    """Filter by node; page through GPUs; refuse too many points and bad times."""
    assert set(util(client, by="gpu", step=3600, node="n2")) == {"n2/0"}
    page = client.get(
        "/api/v1/utilization",
        params={"by": "gpu", "limit": 1, "offset": 1, "start": T0.isoformat()},
    ).json()
    assert page["total"] == 2 and [s["key"] for s in page["series"]] == ["n2/0"]
    too_many = client.get("/api/v1/utilization", params={"step": 0.1, "start": T0.isoformat()})
    assert too_many.status_code == 400
    assert client.get("/api/v1/utilization", params={"start": "yesterday"}).status_code == 400


def test_status_and_auth(client: TestClient) -> None:
    """Status counts the stored rows; writes need the bearer token."""
    st = client.get("/api/v1/status").json()
    assert st["samples_stored"] == 4 * 480 and st["series"] == 4
    assert client.post("/api/v1/retention").status_code == 401
    ok = client.post("/api/v1/retention", headers={"Authorization": "Bearer tok"})
    assert ok.status_code == 200


def test_reads_can_require_the_token(tmp_path: Path) -> None:
    """With read_requires_token, reads need the bearer token too; health stays open."""
    store = Store.open(tmp_path / "r.duckdb")
    state = ApiState(
        store=store,
        targets=TargetRegistry(),
        metrics=CollectorMetrics(),
        token="tok",
        read_requires_token=True,
    )
    client = TestClient(create_app(state))
    try:
        assert client.get("/api/v1/status").status_code == 401
        assert client.get("/api/v1/findings").status_code == 401
        ok = client.get("/api/v1/status", headers={"Authorization": "Bearer tok"})
        assert ok.status_code == 200
        assert client.get("/healthz").status_code == 200
    finally:
        store.close()

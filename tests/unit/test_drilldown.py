"""A finding's drill-down (issue 40): the PromQL that shows an idle workload's GPUs or a hot
port's traffic, and ``GET /api/v1/findings/{id}/series`` asking it of the engine over the
finding's window, nothing stored."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpuscope.collector.http_api.api_drilldown import drilldown_router
from gpuscope.collector.querying.drilldown import drilldown_queries, drilldown_step
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import SourceError
from gpuscope.core.records import Finding, finding_id

AT = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
WHO = {"namespace": "research", "pod": "nb-0", "container": "main"}


def test_an_idle_workloads_gpus_are_asked_by_its_holder_on_its_node() -> None:
    qs = drilldown_queries("idle_session", WHO, {"node": "gpu-7"}, 60)
    assert [q.name for q in qs] == ["utilization", "sm_active", "memory_used_bytes"]
    util = qs[0].query
    assert util.startswith('max_over_time(gpuscope_gpu_utilization_ratio{node="gpu-7"}[60s])')
    assert "on (node, uuid) group_left ()" in util
    assert (
        'gpuscope_gpu_workload_info{node="gpu-7",namespace="research",pod="nb-0",'
        'container="main"}' in util
    )


def test_a_hot_ports_traffic_is_asked_against_its_line_rate() -> None:
    port = {"node": "n1", "device": "mlx5_0", "port": "1"}
    qs = drilldown_queries("bandwidth_hotspot", port, {}, 300)
    sel = 'node="n1",device="mlx5_0",port="1"'
    assert qs[0].query == (
        f"rate(gpuscope_ib_transmit_bytes_total{{{sel}}}[300s]) / "
        f"on (node, device, port) gpuscope_ib_port_rate_bytes_per_second{{{sel}}}"
    )
    assert {q.name for q in qs} == {"transmit_ratio", "receive_ratio", "errors"}


def test_label_values_are_escaped_and_kinds_without_samples_ask_nothing() -> None:
    qs = drilldown_queries("workload_idle", {**WHO, "pod": 'a"b\\c'}, {"node": "n"}, 60)
    assert 'pod="a\\"b\\\\c"' in qs[0].query
    assert drilldown_queries("node_fragmentation", {"pool": "h100"}, {}, 60) == []
    assert drilldown_queries("idle_session", {}, {}, 60) == []


def test_the_step_keeps_a_series_under_a_thousand_points() -> None:
    assert drilldown_step(0, 3600) == 60
    week = drilldown_step(0, 7 * 86400)
    assert week % 60 == 0 and 7 * 86400 / week <= 1000


class Engine:
    shown_url = "http://engine"

    def __init__(self, fail: bool = False) -> None:
        self.asked: list[dict[str, str]] = []
        self.fail = fail

    def query(self, path: str, params: dict[str, str], **_: object) -> dict[str, Any]:
        if self.fail:
            raise SourceError("query API http://engine: no answer within 20s")
        self.asked.append(params)
        metric = {"__name__": "x", "instance": "i", "node": "gpu-7", "uuid": "GPU-1"}
        return {"resultType": "matrix", "result": [{"metric": metric, "values": [[1, "0.5"]]}]}


def _app(tmp_path: Path, engine: Engine) -> tuple[TestClient, Store]:
    store = Store.open(tmp_path / "d.duckdb")
    app = FastAPI()
    app.include_router(drilldown_router(store, lambda: engine, [], []))  # type: ignore[arg-type,return-value]
    return TestClient(app), store


def test_the_route_asks_the_engine_over_the_findings_window(tmp_path: Path) -> None:
    engine = Engine()
    c, store = _app(tmp_path, engine)
    f = Finding(finding_id("idle_session", WHO), "idle_session", "warning", WHO, AT, AT,
                {"node": "gpu-7", "gpus_held": 1}, None)  # fmt: skip
    store.record_findings([f], AT, kinds=["idle_session"])
    body = c.get(f"/api/v1/findings/{f.id}/series", params={"minutes": 90}).json()
    assert body["end"] == AT.timestamp() and body["start"] == AT.timestamp() - 5400
    assert [p["start"] for p in engine.asked] == [f"{AT.timestamp() - 5400:.0f}"] * 3
    first = body["series"][0]
    assert first["name"] == "utilization"
    assert first["labels"] == {"node": "gpu-7", "uuid": "GPU-1"}  # engine labels dropped
    assert first["points"] == [[1.0, 0.5]]
    assert c.get("/api/v1/findings/nope/series").status_code == 404
    store.close()


def test_an_engine_failure_is_a_bad_gateway(tmp_path: Path) -> None:
    c, store = _app(tmp_path, Engine(fail=True))
    f = Finding(finding_id("idle_session", WHO), "idle_session", "warning", WHO, AT, AT,
                {"node": "gpu-7"}, None)  # fmt: skip
    store.record_findings([f], AT, kinds=["idle_session"])
    r = c.get(f"/api/v1/findings/{f.id}/series")
    assert r.status_code == 502 and "no answer" in r.json()["detail"]
    store.close()

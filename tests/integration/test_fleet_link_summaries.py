"""Fleet summaries' hot GPU links on both engines (issue 40): each stored link row carries
its GPU's ``model`` (``group_left`` from ``gpuscope_gpu_info``, which is not stored for
them), and the planted hot NVLink's finding and evidence are direct scraping's, on
VictoriaMetrics and on Prometheus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.fleet_sim import push_to_victoriametrics, write_openmetrics
from gpuscope.collector.storage.store import Store
from tests.integration.engines import prometheus_on_blocks, victoria_metrics, vm_flush
from tests.integration.fleet_cluster import scrape_directly, sim_run
from tests.integration.test_fleet_mode import SETTINGS, run_fleet
from tests.integration.test_fleet_summaries import HOT_GPU, HOT_NODE, SUMMARIES, LinkRun

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def run() -> LinkRun:
    base = sim_run(nodes=8, minutes=20)
    return LinkRun(base.cluster, base.origin, base.start, base.minutes)


@pytest.fixture(scope="module")
def direct(run: LinkRun, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    store = scrape_directly(run, tmp_path_factory.mktemp("direct") / "d.duckdb", SETTINGS)
    yield store
    store.close()


def _summed(engine: str, run: LinkRun, tmp_path: Path) -> Store:
    """The run read through ``engine`` by fleet mode with summaries."""
    if engine == "victoriametrics":
        with victoria_metrics(tmp_path, "-search.disableCache") as vm:
            assert push_to_victoriametrics(vm, run.pages(), run.times()) > 0
            vm_flush(vm)
            return run_fleet(vm, run, tmp_path / "s.duckdb", SETTINGS, SUMMARIES)
    om = tmp_path / "fleet.om"
    write_openmetrics(run.pages(), run.times(), om)
    with prometheus_on_blocks(tmp_path, om) as prom:
        return run_fleet(prom, run, tmp_path / "s.duckdb", SETTINGS, SUMMARIES)


def _link_findings(store: Store, at: float) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The GPU-link findings: (kind, node, gpu) -> evidence (model, capacity, tx and rx)."""
    from datetime import UTC, datetime

    from gpuscope.analytics.runner import DETECTORS, run_on_store

    out = run_on_store(store, datetime.fromtimestamp(at, UTC), SETTINGS, DETECTORS, persist=False)
    return {
        (f.kind, f.subject["node"], f.subject["gpu"]): dict(f.evidence)
        for f in out["bandwidth"].findings
        if f.kind in ("nvlink_hotspot", "pcie_hotspot")
    }


def _rows(store: Store, sql: str) -> list[tuple[Any, ...]]:
    cur = store.cursor()
    try:
        return cur.execute(sql).fetchall()
    finally:
        cur.close()


@pytest.mark.parametrize("engine", ["victoriametrics", "prometheus"])
def test_hot_link_rows_carry_the_model_and_find_what_direct_finds(
    engine: str, run: LinkRun, direct: Store, tmp_path: Path
) -> None:
    summed = _summed(engine, run, tmp_path)
    try:
        want = _link_findings(direct, run.end)
        assert list(want) == [("nvlink_hotspot", HOT_NODE, HOT_GPU)]  # the test has teeth
        got = _link_findings(summed, run.end)
        assert got.keys() == want.keys()
        for key, evidence in want.items():
            # a summary's workload rows name no GPU index (as before): all else is equal
            assert {k: v for k, v in got[key].items() if k != "workloads"} == {
                k: v for k, v in evidence.items() if k != "workloads"
            }
        [(model,)] = _rows(direct, "SELECT DISTINCT labels['model'] FROM series "
                                   f"WHERE metric = 'gpuscope_gpu_info' AND node = '{HOT_NODE}' "
                                   f"AND gpu = '{HOT_GPU}'")  # fmt: skip
        links = _rows(summed, "SELECT labels['direction'], labels['model'] FROM series "
                              "WHERE metric = 'gpuscope_gpu_nvlink_bytes_total' ORDER BY 1")  # fmt: skip
        assert links == [("rx", model), ("tx", model)]  # both directions, each with its model
        assert _rows(summed, "SELECT count(*) FROM series WHERE metric = 'gpuscope_gpu_info'") == [
            (0,)
        ]
    finally:
        summed.close()


def _two_model_gpu(t0: int) -> dict[str, list[tuple[float, int]]]:
    """A GPU whose NVLink carries 400 GB/s each way and that has two ``gpuscope_gpu_info``
    series of different models (a driver that renamed its model within the look-back):
    series text -> (value, Unix second) samples over one bucket."""
    nv = "gpuscope_gpu_nvlink_bytes_total"
    gpu = 'node="n1",gpu="0",uuid="GPU-A"'
    out: dict[str, list[tuple[float, int]]] = {}
    for k in range(0, 301, 30):
        for d in ("rx", "tx"):
            out.setdefault(f'{nv}{{{gpu},direction="{d}"}}', []).append((k * 400e9, t0 + k))
        for model in ("H100 80GB", "H100 80GB v2"):
            info = f'gpuscope_gpu_info{{{gpu},model="{model}",mig_instance=""}}'
            out.setdefault(info, []).append((1.0, t0 + k))
    return out


@pytest.mark.parametrize("engine", ["victoriametrics", "prometheus"])
def test_a_gpu_with_two_info_series_of_two_models_gets_one_link_row_a_direction(
    engine: str, tmp_path: Path
) -> None:
    """The link question joins one model a GPU: with two info series of two models,
    Prometheus refused the join (many-to-many: the shard's question failed) and
    VictoriaMetrics answered each direction twice, which the detector would add up."""
    import time

    from gpuscope.collector.querying.fleet_summaries import gpu_link_floors, summary_questions
    from gpuscope.core.settings import AnalyticsSettings

    nv = "gpuscope_gpu_nvlink_bytes_total"
    floors = gpu_link_floors(AnalyticsSettings())
    question = {q.name: q.query for q in summary_questions('node=~"n1"', link_floors=floors)}[nv]
    t0 = (int(time.time()) // 300 - 30) * 300
    result = _ask_engine(engine, tmp_path, _two_model_gpu(t0), question, t0 + 299)
    rows = sorted((r["metric"]["direction"], r["metric"].get("model")) for r in result)
    assert [d for d, _ in rows] == ["rx", "tx"], rows  # one row a direction
    assert {m for _, m in rows} <= {"H100 80GB", "H100 80GB v2"} and len({m for _, m in rows}) == 1


@pytest.mark.parametrize("engine", ["victoriametrics", "prometheus"])
def test_a_port_with_two_line_rate_series_is_still_asked(engine: str, tmp_path: Path) -> None:
    """The hot-port filter compares a port's increase with one line rate a port: with two
    rate series for one port (relabelled, or renamed within the look-back), Prometheus
    refused the one-to-one comparison and the shard's question failed."""
    import time

    from gpuscope.collector.querying.fleet_summaries import summary_questions

    tx = "gpuscope_ib_transmit_bytes_total"
    question = {q.name: q.query for q in summary_questions('node=~"n1"')}[tx]
    t0 = (int(time.time()) // 300 - 30) * 300
    port = 'node="n1",device="mlx5_0",port="1"'
    series: dict[str, list[tuple[float, int]]] = {}
    for k in range(0, 301, 30):
        for name in (tx, "gpuscope_ib_receive_bytes_total"):  # 45 of 50 GB/s one way
            series.setdefault(f"{name}{{{port}}}", []).append((k * 45e9, t0 + k))
        for extra in ("", ',link_layer="InfiniBand"'):
            rate = f"gpuscope_ib_port_rate_bytes_per_second{{{port}{extra}}}"
            series.setdefault(rate, []).append((50e9, t0 + k))
    result = _ask_engine(engine, tmp_path, series, question, t0 + 299)
    assert [r["metric"].get("device") for r in result] == ["mlx5_0"], result


def _ask_engine(
    engine: str,
    tmp_path: Path,
    series: dict[str, list[tuple[float, int]]],
    question: str,
    at: int,
) -> Any:
    """``question``'s answer at ``at`` from a real ``engine`` holding ``series``."""
    from tests import loopback

    def ask(base: str) -> Any:
        got = loopback.post(
            base + "/api/v1/query", data={"query": question, "time": str(at)}, timeout=60
        )
        assert got.status_code == 200, got.text[:300]
        return got.json()["data"]["result"]

    if engine == "victoriametrics":
        lines = [f"{name} {v:.0f} {ts * 1000}" for name, vs in series.items() for v, ts in vs]
        with victoria_metrics(tmp_path) as vm:
            loopback.post(
                vm + "/api/v1/import/prometheus", content="\n".join(lines), timeout=60
            ).raise_for_status()
            vm_flush(vm)
            return ask(vm)
    text = ""
    for family in sorted({name.split("{")[0] for name in series}):
        counter = family.endswith("_total")
        text += f"# TYPE {family.removesuffix('_total')} {'counter' if counter else 'gauge'}\n"
        text += "".join(
            f"{name} {v:.0f} {ts}\n"
            for name, vs in series.items()
            if name.startswith(family + "{")
            for v, ts in vs
        )
    om = tmp_path / "series.om"
    om.write_text(text + "# EOF\n")
    with prometheus_on_blocks(tmp_path, om) as prom:
        return ask(prom)

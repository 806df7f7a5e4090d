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

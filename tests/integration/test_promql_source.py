"""Ingest through a real Prometheus's query API (docs/design.md, Scale)."""

import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from collector.promql import PrometheusQuerySource
from collector.store import Store
from gpuscope.errors import SourceError
from tests.integration.helpers import agent_process, prometheus_server

pytestmark = pytest.mark.integration


def test_query_range_batches_are_the_agents_series(tmp_path: Path) -> None:
    """Series pulled from Prometheus carry the agent's labels (not instance/job), per step."""
    with agent_process("gpu-node-08") as url, prometheus_server(tmp_path, [url]) as prom:
        deadline = time.monotonic() + 60
        while True:
            r = httpx.get(prom + "/api/v1/query", params={"query": "gpuscope_gpu_up"}, timeout=5)
            if r.json()["data"]["result"]:
                break
            assert time.monotonic() < deadline, "Prometheus never scraped the agent"
            time.sleep(0.5)
        time.sleep(2.5)
        now = time.time()
        source = PrometheusQuerySource(prom, step_seconds=1)
        batches = source.fetch(now - 3, now)
        assert len(batches) >= 2
        batch = batches[-1]
        rows = list(zip(batch.names, batch.labels, batch.values, strict=True))
        util = [dict(lbl) for n, lbl, _ in rows if n == "gpuscope_gpu_utilization_ratio"]
        assert len(util) == 8
        assert all(
            lbl["node"] == "gpu-node-08" and "instance" not in lbl and "job" not in lbl
            for lbl in util
        )
        assert batch.types["gpuscope_gpu_energy_joules"] == "counter"
        with Store.open(tmp_path / "q.duckdb") as store:
            stored = sum(store.append_scrape(b) for b in batches)
            assert stored == store.samples_stored() > 0
            when = store.cursor().execute("SELECT max(ts) FROM samples").fetchone()[0]
        assert (
            abs(
                when.replace(tzinfo=UTC) - datetime.fromtimestamp(batch.ts_ms / 1000, UTC)
            ).total_seconds()
            < 1
        )


def test_query_api_errors_are_one_line(tmp_path: Path) -> None:
    """A bad query and an unreachable server raise SourceError with one line."""
    with agent_process("gpu-node-08") as url, prometheus_server(tmp_path, [url]) as prom:
        bad = PrometheusQuerySource(prom, selector="gpuscope_gpu_up{", step_seconds=1)
        with pytest.raises(SourceError, match="bad_data") as err:
            bad.fetch(time.time() - 5, time.time())
        assert "\n" not in str(err.value)
    with pytest.raises(SourceError, match="unreachable"):
        PrometheusQuerySource("http://127.0.0.1:9", step_seconds=1).fetch(0, 10)

"""Ingest through a real Prometheus's query API (docs/design.md, Scale)."""

import base64
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from gpuscope.collector.querying.promql import PrometheusQuerySource
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import SourceError
from tests import loopback
from tests.integration.helpers import agent_process, http_server, prometheus_server, send

pytestmark = pytest.mark.integration


def test_query_range_batches_are_the_agents_series(tmp_path: Path) -> None:
    """Series pulled from Prometheus carry the agent's labels (not instance/job), per step."""
    with agent_process("gpu-node-08") as url, prometheus_server(tmp_path, [url]) as prom:
        deadline = time.monotonic() + 60
        while True:
            r = loopback.get(prom + "/api/v1/query", params={"query": "gpuscope_gpu_up"}, timeout=5)
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


PASSWORD = "hunter2-very-secret"


@contextmanager
def query_api_behind_basic_auth(fail: bool = False) -> Iterator[str]:
    """A loopback query API (as Prometheus behind a proxy with basic auth) answering
    ``query_range`` with one series of two points; ``fail``: HTTP 502 and an HTML page."""
    want = "Basic " + base64.b64encode(f"scraper:{PASSWORD}".encode()).decode()

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        if fail or handler.headers.get("Authorization") != want:
            send(handler, b"<html>bad gateway</html>", "text/html", 502)
            return
        series = {"metric": {"__name__": "gpuscope_gpu_up", "node": "n1", "gpu": "0",
                             "instance": "n1:9835"},
                  "values": [[1000, "1"], [1001, "1"]]}  # fmt: skip
        body = json.dumps({"status": "success", "data": {
            "resultType": "matrix", "result": [series]}}).encode()  # fmt: skip
        send(handler, body, "application/json")

    with http_server(respond) as base:
        yield base.replace("http://", f"http://scraper:{PASSWORD}@", 1)


def test_a_password_in_the_query_api_url_is_used_but_never_shown(tmp_path: Path) -> None:
    """Regression (issue 13, secrets in URLs): ``--prometheus-url http://user:pw@host``
    put the password into every batch's target (stored in the scrapes table) and into the
    error lines the collector logs. It is sent to the query API and shown nowhere."""
    with query_api_behind_basic_auth() as url:
        batches = PrometheusQuerySource(url, step_seconds=1).fetch(1000, 1001)
    assert [len(b) for b in batches] == [1, 1]  # the credentials reached the server
    shown = url.replace(PASSWORD, "xxxxx")
    assert {b.target for b in batches} == {shown}
    with Store.open(tmp_path / "q.duckdb") as store:
        for b in batches:
            store.append_scrape(b)
        rows = store.cursor().execute("SELECT DISTINCT target FROM scrapes").fetchall()
    assert rows == [(shown,)]
    with query_api_behind_basic_auth(fail=True) as url, pytest.raises(SourceError) as failed:
        PrometheusQuerySource(url, step_seconds=1).fetch(1000, 1001)
    assert PASSWORD not in str(failed.value) and "xxxxx" in str(failed.value)
    unreachable = f"http://scraper:{PASSWORD}@127.0.0.1:9"
    with pytest.raises(SourceError, match="unreachable") as failed:
        PrometheusQuerySource(unreachable, step_seconds=1).fetch(0, 10)
    assert PASSWORD not in str(failed.value)

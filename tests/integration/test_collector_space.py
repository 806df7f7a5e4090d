"""A running collector gives its file's free space back itself, while scrapes go on.

The collector service scrapes simulated agents on loopback on a stepped clock (samples one
interval apart, however loaded the machine), then its maintenance is triggered through its
API (``POST /api/v1/retention``, what the hourly job runs): the closed segments of the day
being written are compacted and the file is rewritten without its free blocks. A scrape
cycle that comes during the rewrite waits and is committed after it; a reader that comes
while the file is swapped waits and gets its answer from the new file. Nothing committed is
lost, and the file is smaller after.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuscope.agent.devices.sim import scenario_clock
from gpuscope.collector.http_api.api import create_app
from gpuscope.collector.service import CollectorService
from gpuscope.core.settings import load_settings
from gpuscope.demo.parts import start_agents
from gpuscope.sim import SimulatedCluster, default_scenario

pytestmark = pytest.mark.integration
NODES = ["gpu-node-08", "gpu-node-10"]
TOKEN = "space-test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class SteppedClock:
    """Unix time that moves only when the test says: a whole minute to start with."""

    def __init__(self) -> None:
        self.now = float(int(time.time()) // 60 * 60)

    def __call__(self) -> float:
        return self.now


@contextmanager
def agents(clock: SteppedClock) -> Iterator[list[str]]:
    cluster = SimulatedCluster(default_scenario())
    servers = start_agents(cluster, NODES, scenario_clock(cluster.scenario, now=clock))
    try:
        yield [url for url, _ in servers]
    finally:
        for _, server in servers:
            server.shutdown()
            server.server_close()
            server.collector.close()


def wait_for(condition: Callable[[], bool], limit: float = 120.0) -> None:
    """Poll what another thread makes true (a bound on liveness, not a timing)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("the other thread never got there")
        time.sleep(0.01)


def count(service: CollectorService) -> int:
    cur = service.store.cursor()
    try:
        row = cur.execute("SELECT count(*) FROM samples").fetchone()
    finally:
        cur.close()
    assert row is not None
    return int(row[0])


def test_maintenance_gives_space_back_while_scrapes_and_reads_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = SteppedClock()
    with agents(clock) as urls:
        settings = load_settings(
            env={},
            overrides={
                "collector": {
                    "db": tmp_path / "c.duckdb",
                    "kubernetes": "none",
                    "targets": [{"url": u} for u in urls],
                    "api_token": TOKEN,
                    "compact_segment_seconds": 60,
                    "compact_recent_seconds": 0,  # the closed segments, not the last hour
                    "db_reclaim_free_ratio": 0.01,
                }
            },
        )
        service = CollectorService(settings, clock=clock)
        store = service.store
        try:
            for _ in range(20):  # five minutes at 15 s: four closed one-minute segments
                service.scrape_cycle()
                clock.now += 15
            store.checkpoint()  # as DuckDB does by itself once its WAL passes 16 MB
            rows0, stored0 = count(service), store.samples_stored()
            outcome: dict[str, Any] = {}
            threads: list[threading.Thread] = []
            copy_to, replace = store._copy_to, os.replace

            def scrape_meanwhile() -> None:
                clock.now += 15
                outcome["scraped"] = service.scrape_cycle()

            def read_meanwhile() -> None:
                with TestClient(create_app(service.api_state())) as reader:
                    outcome["read"] = reader.get("/api/v1/status").json()

            def copy_then_scrape(partial: Path) -> None:
                outcome["size_at_copy"] = store.path.stat().st_size  # checkpointed
                copy_to(partial)  # the copy is made: a scrape cycle comes now
                threads.append(threading.Thread(target=scrape_meanwhile))
                threads[-1].start()
                wait_for(lambda: store.writes_waited == 1)

            def read_then_replace(src: Any, dst: Any) -> None:
                if str(dst) == str(store.path):  # the swap: a reader comes now
                    threads.append(threading.Thread(target=read_meanwhile))
                    threads[-1].start()
                    wait_for(lambda: store.readers_waited == 1)
                replace(src, dst)

            monkeypatch.setattr(store, "_copy_to", copy_then_scrape)
            monkeypatch.setattr(os, "replace", read_then_replace)
            with TestClient(create_app(service.api_state())) as client:
                done = client.post("/api/v1/retention", headers=AUTH)
            monkeypatch.undo()
            for t in threads:
                t.join(timeout=120)
            assert done.status_code == 200, done.text
            assert done.json()["compacted"] > 0
            reclaimed = done.json()["reclaimed_bytes"]
            # the file as the maintenance left it, before its rewrite, and after
            assert outcome["size_at_copy"] - store.path.stat().st_size == reclaimed > 0
            assert outcome["scraped"] > 0
            # nothing committed is lost: what was there, and the cycle that waited
            assert count(service) == rows0 + outcome["scraped"]
            assert store.samples_stored() == stored0 + outcome["scraped"]
            read = outcome["read"]  # an answer from the new file, not an error
            assert read["samples_stored"] in (stored0, stored0 + outcome["scraped"])
            with TestClient(create_app(service.api_state())) as client:
                database = client.get("/api/v1/status").json()["ingest"]["database"]
                metrics = client.get("/metrics").text
            assert "gpuscope_collector_db_rewrites_total 1.0" in metrics
            assert 'gpuscope_collector_db_rewrite_waits_total{what="write"} 1.0' in metrics
            assert 'gpuscope_collector_db_rewrite_waits_total{what="read"} 1.0' in metrics
            assert database["rewrites"] == 1
            assert database["writes_waited_for_rewrite"] == 1
            assert database["readers_waited_for_rewrite"] == 1
            service.scrape_cycle()  # and it goes on writing to the new file
            assert count(service) > rows0 + outcome["scraped"]
        finally:
            service.stop()

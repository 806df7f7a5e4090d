"""Issue 40, "A hung engine holds one cycle for up to 40 minutes, unseen": an engine that
answers the node list but accepts the shards' queries and never answers them.

Was: the shards were asked one after the other, each up to ``(retries + 1) x timeout``, so
a cycle took shards x (retries + 1) x timeout (40 x 3 x 20 s with the defaults) while
``/api/v1/status`` said ``failed_cycles 0`` and ``last_error null``. Now shards are asked
``concurrency`` at a time under one deadline for the whole cycle; a shard that fails is
shown at once (``last_error``, its own state); the shards the deadline left are asked first
by the next cycle. Small timeouts; what is asserted is what was asked and shown, never how
long anything took.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from fastapi.testclient import TestClient

from gpuscope.collector.http_api.api import create_app
from gpuscope.collector.querying.fleet_questions import shard_of
from gpuscope.collector.service import CollectorService
from gpuscope.core.settings import Settings
from tests.integration.helpers import http_server, send

pytestmark = pytest.mark.integration

NODES = [f"gpu-node-{i:03d}" for i in range(120)]
SHARDS = 40
NOW = 1_800_000_000.0


@dataclass
class Hung:
    """Answers ``count by (node)`` with :data:`NODES`; holds every other query open."""

    asked: list[int] = field(default_factory=list)  # the shard of each shard query, in order
    open_now: int = 0
    most_open: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0))).decode()
        form = {k: v[0] for k, v in parse_qs(body).items()}
        query = form.get("query", "")
        if query.startswith("count by (node)"):
            at = form["start"]
            result = [{"metric": {"node": n}, "values": [[float(at), "1"]]} for n in NODES]
            send(handler, _json({"status": "success",
                                 "data": {"resultType": "matrix", "result": result}}),
                 "application/json")  # fmt: skip
            return
        # the shard's first node: its nodes' common prefix (if written once) and the
        # first alternative after it
        first = re.search(r'node=~"([^"(|]*)\(?([^"|)]*)', query)
        assert first is not None, query
        node = (first.group(1) + first.group(2)).replace("\\", "")
        with self.lock:
            self.asked.append(shard_of(node, SHARDS))
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
        try:
            self.release.wait(120)  # accepted, never answered (until the test ends)
        finally:
            with self.lock:
                self.open_now -= 1


def _json(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@contextmanager
def hung_engine() -> Iterator[tuple[str, Hung]]:
    hung = Hung()
    with http_server(hung.respond) as base:
        try:
            yield base, hung
        finally:
            hung.release.set()


def service(tmp: Path, url: str, **query: object) -> CollectorService:
    settings = Settings.model_validate({"collector": {
        "db": str(tmp / "c.duckdb"), "kubernetes": "none", "prometheus_url": url,
        "query": {"mode": "fleet", "shards": SHARDS, "backoff_seconds": 0.05, **query},
    }})  # fmt: skip
    svc = CollectorService(settings, clock=lambda: NOW)
    assert svc.query_source is not None
    for w in svc.query_source.fleet.windows.values():
        w.cursor = NOW - 3 * 300 - 300  # a few buckets due
    return svc


def test_a_hung_shard_is_shown_at_once_while_the_cycle_runs(tmp_path: Path) -> None:
    """The first shard that times out is in ``/api/v1/status`` (``last_error``, its state
    ``timed_out``) while the cycle is still in flight, not when it ends."""
    with hung_engine() as (base, _hung):
        svc = service(tmp_path, base, timeout_seconds=0.3, retries=0, concurrency=1,
                      cycle_deadline_seconds=600)  # fmt: skip
        app = TestClient(create_app(svc.api_state()))
        cycle = threading.Thread(target=svc.query_cycle)
        cycle.start()
        try:
            seen: dict[str, Any] = {}
            for _ in range(3000):  # until a shard has failed (each times out in 0.3 s)
                q = app.get("/api/v1/status").json()["ingest"]["query_source"]
                if q["last_error"]:
                    seen = q
                    break
                time.sleep(0.01)
            assert seen, "no failure shown"
            # 40 shards one at a time, 0.3 s each: the cycle is far from over
            assert seen["cycle_in_flight_since"] is not None
            assert "no answer within" in seen["last_error"]
            states = {s["state"] for s in seen["shards"]}
            assert "timed_out" in states
            assert all(s["error"] for s in seen["shards"] if s["state"] == "timed_out")
        finally:
            svc.query_source.cancel()  # type: ignore[union-attr]
            cycle.join(timeout=120)
            svc.stop()
    assert not cycle.is_alive()
    assert svc.query_source is not None and svc.query_source.errors == 1  # failed_cycles


def test_a_hung_engine_bounds_the_cycle_and_the_next_asks_the_left_first(tmp_path: Path) -> None:
    """A cycle ends at its deadline however many shards hang (asked ``concurrency`` at
    once), counts as failed, shows each shard's state; the next cycle begins with the
    shards the last one never asked."""
    with hung_engine() as (base, hung):
        svc = service(tmp_path, base, timeout_seconds=1.0, retries=2, concurrency=4,
                      cycle_deadline_seconds=2.5)  # fmt: skip
        try:
            svc.query_cycle()
            first = svc.ingest_status()["query_source"]
            metrics = TestClient(create_app(svc.api_state())).get("/metrics").text
            asked_first = list(hung.asked)
            svc.query_cycle()
            second = svc.ingest_status()["query_source"]
            asked_second = hung.asked[len(asked_first) :]
        finally:
            svc.stop()
    assert first["failed_cycles"] == 1 and first["cycle_in_flight_since"] is None
    assert "deadline" in first["last_cycle"]["error"]
    by_state: dict[str, set[int]] = {}
    for s in first["shards"]:
        by_state.setdefault(s["state"], set()).add(s["shard"])
    # one (retries + 1) x timeout per shard, four at a time, 2.5 s in all: most never asked
    assert by_state.get("not_asked"), by_state.keys()
    assert set(asked_first) == by_state.get("timed_out", set())
    assert hung.most_open >= 2  # asked concurrently
    assert len(asked_first) < SHARDS * 3  # before: every shard, every retry
    # the next cycle starts with the shards the deadline left
    assert asked_second and set(asked_second[:4]) <= by_state["not_asked"]
    assert second["failed_cycles"] == 2
    shown = {line.split('state="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
             for line in metrics.splitlines()
             if line.startswith("gpuscope_collector_query_shards{")}  # fmt: skip
    assert shown == {k: len(v) for k, v in by_state.items()}

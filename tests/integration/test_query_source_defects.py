"""Regressions of issue 26's "What was seen" on the query-API path, against a real
VictoriaMetrics and a real Prometheus on loopback (data loaded with timestamps through
VictoriaMetrics' import API and promtool's blocks): zero-width windows, the engine's latency
offset, a refused query asked again bigger, timeouts and cancellation, tenant header and
bearer token."""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from bench.fleet_sim import push_to_victoriametrics, write_openmetrics
from gpuscope.collector.querying.query_client import QueryCancelled, QueryClient, QueryRefused
from gpuscope.collector.querying.query_ingest import QueryIngest
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import SourceError
from gpuscope.core.query_settings import QuerySettings
from tests.integration.engines import prometheus_on_blocks, victoria_metrics, vm_flush
from tests.integration.fleet_cluster import SimRun, sim_run
from tests.integration.helpers import http_server, send

pytestmark = pytest.mark.integration

STEP = 15.0
PULL = QuerySettings(mode="pull", retries=0, timeout_seconds=60)


def stored_times(store: Store) -> list[float]:
    cur = store.cursor()
    try:
        dup = cur.execute(
            "SELECT count(*) FROM (SELECT series_id, ts FROM samples GROUP BY ALL "
            "HAVING count(*) > 1)"
        ).fetchone()
        assert dup == (0,), "a step stored twice"
        rows = cur.execute("SELECT DISTINCT ts FROM samples ORDER BY 1").fetchall()
    finally:
        cur.close()
    return [r[0].replace(tzinfo=UTC).timestamp() for r in rows]


def pull_ingest(base: str, store: Store, q: QuerySettings = PULL) -> QueryIngest:
    return QueryIngest(base, q, STEP, store, store.append_scrape)


def test_zero_width_windows_lose_no_step(tmp_path: Path) -> None:
    """Was: each cycle asked ``[last end + step, now - interval]``, nominally zero wide;
    scheduler jitter made it empty about half the time and the cursor moved on: over 20
    minutes direct scraping stored 80 timestamps and the pull path 38. Now every step of
    the 20 minutes is stored, once, whatever the jitter."""
    run = sim_run(nodes=6, minutes=21, hours_ago=2)
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        push_to_victoriametrics(vm, run.pages(), run.times())
        vm_flush(vm)
        with Store.open(tmp_path / "p.duckdb") as store:
            ingest = pull_ingest(vm, store)
            ingest.pull_window.cursor = run.start  # the collector started with the data
            first = run.start + ingest.settings.latency_offset_seconds
            k = 0
            while (now := first + k * STEP + (k * 7919 % 29) / 10) < run.start + 20 * 60 + 30:
                ingest.cycle(now)  # scheduler jitter of 0 to 2.8 s, some cycles late
                assert ingest.last is not None and not ingest.last.error
                k += 1
            got = stored_times(store)
    want = [run.start + i * STEP for i in range(80)]
    assert got[:80] == want  # 80 timestamps in 20 minutes, no hole
    assert ingest.skipped() == 0


def test_latency_offset_of_victoriametrics_is_respected(tmp_path: Path) -> None:
    """Was: at the default 15 s interval the window ended 15 s ago, inside the newest 30 s
    VictoriaMetrics hides (``-search.latencyOffset``): 0 samples after 5 cycles, no error.
    Now steps inside the offset are not asked, and one the engine does not answer yet is
    asked again, not skipped."""
    # data up to the next whole step (up to 15 s ahead): the newest stays hidden for the
    # next 30 s of real time at least, whatever the load
    newest = math.ceil(time.time() / STEP) * STEP
    run = SimRun(sim_run(nodes=6).cluster, newest - 6 * 3600, newest - 600, 10)
    with victoria_metrics(tmp_path) as vm:  # VictoriaMetrics' defaults: offset 30 s
        push_to_victoriametrics(vm, run.pages(), [*run.times(), newest])
        vm_flush(vm)
        with Store.open(tmp_path / "p.duckdb") as store:
            # without the offset the newest step is asked and not answered: it waits
            hidden = pull_ingest(vm, store, PULL.model_copy(update={"latency_offset_seconds": 0}))
            hidden.pull_window.cursor = newest
            hidden.cycle(newest)
            assert hidden.last is not None and hidden.last.samples == 0
            assert hidden.pull_window.cursor == newest  # not moved past, not lost
            ingest = pull_ingest(vm, store)  # the default: 30 s
            for k in range(5):
                ingest.cycle(newest + k * STEP)
            got = stored_times(store)
    assert got, "nothing stored against VictoriaMetrics' defaults"
    assert max(got) <= newest - 30 + 4 * STEP
    assert got == [got[0] + i * STEP for i in range(len(got))]  # no hole


@contextmanager
def recording(prom: str) -> Iterator[list[tuple[int, str]]]:
    """Every query_range the pull path sends: (steps asked, outcome)."""
    seen: list[tuple[int, str]] = []
    original = QueryClient.query

    def spy(self: QueryClient, path: str, params: dict[str, str], **kw: Any) -> dict[str, Any]:
        steps = round((float(params["end"]) - float(params["start"])) / STEP) + 1
        try:
            out = original(self, path, params, **kw)
        except QueryRefused:
            seen.append((steps, "refused"))
            raise
        seen.append((steps, "ok"))
        return out

    QueryClient.query = spy  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        QueryClient.query = original  # type: ignore[method-assign]


def test_a_refused_query_is_never_asked_again_bigger(tmp_path: Path) -> None:
    """Was: a failed cycle did not advance, so the next asked more: with Prometheus'
    ``--query.max-samples=10000``, 28 failures and 0 samples in 7 minutes although one step
    fits. Now a refusal halves the window, and everything is stored."""
    run = sim_run(nodes=6, minutes=10, hours_ago=2)
    om = tmp_path / "f.om"
    write_openmetrics(run.pages(), run.times(), om)
    per_step = 6 * 300  # about 300 series a node: one step fits, eight do not
    limit = f"--query.max-samples={per_step * 3}"
    with (
        prometheus_on_blocks(tmp_path, om, limit) as prom,
        Store.open(tmp_path / "p.duckdb") as store,
        recording(prom) as seen,
    ):
        ingest = pull_ingest(prom, store)
        ingest.pull_window.cursor = run.start  # 40 steps behind: a catch-up
        now = run.start + 10 * 60 + 30
        for _ in range(40):
            ingest.cycle(now)
            if ingest.pull_window.cursor == now - 30 + STEP:
                break
        got = stored_times(store)
    # every step, once (and the next, where Prometheus' look-back still finds the last)
    assert got[: len(run.times())] == run.times() and len(got) <= len(run.times()) + 1
    assert any(o == "refused" for _, o in seen)
    assert len(seen) < 40  # it settled on a size that passes
    for (size, outcome), (after, _) in itertools.pairwise(seen):
        if outcome == "refused":
            assert after < size, seen  # never asked again as big, let alone bigger


@contextmanager
def hanging_engine() -> Iterator[tuple[str, list[dict[str, str]], threading.Event]]:
    """A query API that reads each request and never answers until released."""
    requests: list[dict[str, str]] = []
    release = threading.Event()

    def respond(handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0))).decode()
        requests.append({**dict(handler.headers.items()), "body": body})
        release.wait(60)
        send(handler, b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
             "application/json")  # fmt: skip

    with http_server(respond) as base:
        try:
            yield base, requests, release
        finally:
            release.set()


def test_timeouts_are_told_to_the_engine_and_one_line() -> None:
    """Was: a fixed 30 s client timeout; the engine kept running abandoned queries (one ran
    766 s). Now each query carries its timeout to the engine too (``timeout=``), retries
    with back-off, and fails with one line."""
    with hanging_engine() as (base, requests, _):
        client = QueryClient(base, timeout_seconds=0.5, retries=1, backoff_seconds=0.1)
        with pytest.raises(SourceError) as failed:
            client.query("/api/v1/query_range", {"query": "up"})
    assert "no answer within 0.5s" in str(failed.value) and "\n" not in str(failed.value)
    assert len(requests) == 2  # the first try and one retry
    # whole milliseconds: Prometheus refuses "0.5s" (bad_data), every engine takes "500ms"
    assert all("timeout=500ms" in r["body"] for r in requests)


def test_cancel_ends_a_query_in_flight() -> None:
    """Was: SIGTERM waited minutes for an in-flight pull. ``cancel()`` (called on shutdown)
    abandons it at once."""
    with hanging_engine() as (base, requests, _):
        client = QueryClient(base, timeout_seconds=120, retries=3)
        outcome: list[BaseException] = []

        def ask() -> None:
            try:
                client.query("/api/v1/query_range", {"query": "up"})
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=ask)
        thread.start()
        deadline = time.monotonic() + 30
        while not requests:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        client.cancel()
        thread.join(30)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], QueryCancelled)


def test_tenant_header_and_bearer_token_file_are_sent(tmp_path: Path) -> None:
    """Was: no tenant header (``X-Scope-OrgID``) or bearer token could be sent. Now both
    are, the token read from its file at each query (a rotated token is picked up)."""
    seen: list[dict[str, str]] = []

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        seen.append(dict(handler.headers.items()))
        send(handler, b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
             "application/json")  # fmt: skip

    token = tmp_path / "token"
    token.write_text("first-token\n")
    q = PULL.model_copy(update={"tenant": "team-a", "bearer_token_file": token})
    with http_server(respond) as base, Store.open(tmp_path / "p.duckdb") as store:
        ingest = pull_ingest(base, store, q)
        ingest.cycle(1_800_000_000)
        token.write_text("rotated-token\n")
        ingest.cycle(1_800_000_060)
    assert [h.get("X-Scope-OrgID") for h in seen] == ["team-a", "team-a"]
    assert [h.get("Authorization") for h in seen] == [
        "Bearer first-token",
        "Bearer rotated-token",
    ]

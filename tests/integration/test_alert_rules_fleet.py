"""Issue 40, "The shipped GpuNodeDown rule fires for every node in fleet mode": the shipped
metric rules (gpuscope/alerts/default_rules.yaml) judged minute by minute on one simulated
cluster two ways, scraped directly (every 15 s) and in fleet mode (5-minute buckets from a
real VictoriaMetrics, a cycle a minute), while one node's agent stops half way.

Was: fleet mode stores ``gpuscope_agent_info`` once a bucket, at its last second, and the
newest bucket stored ends 1.5 to 6.5 minutes before now; judged at now over 3 minutes,
every node was "down" at most minutes, depending only on the phase of the cycle within the
5-minute grid. Now rules are judged at the newest time the store is complete up to, over
whole buckets (gpuscope/alerts/conditions.py, ``DataView``): in both modes no node is down
while all report, and exactly the stopped one is once it has stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.fleet_sim import FleetPages, push_to_victoriametrics
from gpuscope.alerts.config import AlertsConfig
from gpuscope.alerts.engine import AlertsEngine
from gpuscope.collector.querying.query_ingest import QueryIngest
from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.page_outcome import page_to_outcome
from gpuscope.collector.storage.store import Store
from gpuscope.core.query_settings import QuerySettings
from tests.integration.engines import victoria_metrics, vm_flush
from tests.integration.fleet_cluster import BUCKET_S, SimRun, sim_run

pytestmark = pytest.mark.integration

FLEET = QuerySettings(mode="fleet", shards=3, retries=0, timeout_seconds=60)
Fired = dict[float, set[tuple[str, str]]]


class Stopping(FleetPages):
    """The agents' pages, but ``dead``'s agent stops at ``at`` (its node gone). Each time's
    pages are rendered once (``keep``): direct mode scrapes them and VictoriaMetrics is
    pushed them."""

    def __init__(self, run: SimRun, dead: str, at: float) -> None:
        super().__init__(run.cluster, run.cluster.node_names, run.origin, keep=True)
        self.dead, self.at = dead, at

    def pages(self, unix_t: float, *, openmetrics: bool = False) -> Iterator[tuple[str, bytes]]:
        for node, page in super().pages(unix_t, openmetrics=openmetrics):
            if node != self.dead or unix_t < self.at:
                yield node, page


def fired(engine: AlertsEngine, t: float) -> set[tuple[str, str]]:
    candidates, failed = engine.evaluate(datetime.fromtimestamp(t, UTC))
    assert not failed
    return {(c.rule, c.labels.get("node", "")) for c in candidates if c.value is not None}


def direct_mode(run: SimRun, pages: FleetPages, db: Path, minutes: list[float]) -> Fired:
    out: Fired = {}
    with Store.open(db) as store:
        engine = AlertsEngine(store, AlertsConfig(), notifiers={})
        times = iter(run.times())
        t = next(times)
        for minute in minutes:
            while t <= minute:
                outcomes = [
                    page_to_outcome(Target(f"http://{n}:9835/metrics", "agent", n), page, t)
                    for n, page in pages.pages(t)
                ]
                store.append_cycle([(o.batch, 0.0) for o in outcomes if o.batch is not None])
                t = next(times, float("inf"))
            out[minute] = fired(engine, minute)
        engine.close()
    return out


def fleet_mode(vm: str, run: SimRun, db: Path, minutes: list[float]) -> Fired:
    out: Fired = {}
    with Store.open(db) as store:
        engine = AlertsEngine(store, AlertsConfig(), notifiers={})
        ingest = QueryIngest(vm, FLEET, 15.0, store, store.append_scrape)
        for w in ingest.fleet.windows.values():
            w.cursor = run.start
        for minute in minutes:  # a cycle a minute, as the collector runs them
            ingest.cycle(minute)
            last = ingest.last
            assert last is not None and not last.error, last
            out[minute] = fired(engine, minute)
        ingest.client.close()
        engine.close()
    return out


def node_down(seen: Fired, minute: float) -> set[str]:
    return {node for rule, node in seen[minute] if rule == "GpuNodeDown"}


def test_shipped_metric_rules_judge_right_in_direct_and_fleet_mode(tmp_path: Path) -> None:
    run = sim_run(nodes=8, minutes=40)
    dead = run.cluster.node_names[3]
    death = run.start + 20 * 60  # on the 5-minute grid
    # every minute from 10 minutes in: every phase of a cycle within the 5-minute grid
    minutes = [run.start + m * 60 + 7 for m in range(10, 46)]
    # direct mode while the cluster runs (past its end every node is down, rightly)
    live = [m for m in minutes if m < run.end]
    pages = Stopping(run, dead, death)
    direct = direct_mode(run, pages, tmp_path / "d.duckdb", live)
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        assert push_to_victoriametrics(vm, pages, run.times()) > 0
        vm_flush(vm)
        fleet = fleet_mode(vm, run, tmp_path / "f.duckdb", minutes)
    for mode, seen in (("direct", direct), ("fleet", fleet)):
        for minute in sorted(seen):
            down = node_down(seen, minute)
            where = f"{mode} mode, {round(minute - run.start)} s in"
            if minute < death:
                assert not down, f"{where}: nodes called down while all report: {sorted(down)}"
            elif minute >= death + 2 * BUCKET_S:
                assert down == {dead}, f"{where}: {sorted(down)}, want only {dead}"
            else:  # stopped, not yet in a stored bucket (fleet): never another node
                assert down <= {dead}, f"{where}: {sorted(down)}"
    # past the death's buckets, every other shipped metric rule fires on the same nodes
    # in both modes
    others = {(r, n) for r, n in direct[live[-1]] if r != "GpuNodeDown" and n != dead}
    assert {(r, n) for r, n in fleet[minutes[-1]] if r != "GpuNodeDown" and n != dead} == others

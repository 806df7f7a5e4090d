"""Fleet mode against a real VictoriaMetrics and a real Prometheus (issue 26, "Done means"):
over 30 simulated minutes it stores every 5-minute bucket once (none lost, none twice),
and the detectors' findings on what it stored equal their findings on the same simulated
cluster scraped directly."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.fleet_sim import FleetPages, push_to_victoriametrics, write_openmetrics
from gpuscope.analytics.runner import DETECTORS, run_on_store
from gpuscope.collector.querying.query_client import QueryClient
from gpuscope.collector.querying.query_ingest import QueryIngest
from gpuscope.collector.storage.store import Store
from gpuscope.core.query_settings import QuerySettings
from gpuscope.core.settings import Settings
from tests import loopback
from tests.integration.engines import prometheus_on_blocks, victoria_metrics, vm_flush
from tests.integration.fleet_cluster import (
    BUCKET_S,
    SimRun,
    record_inventory,
    scrape_directly,
    sim_run,
)
from tests.integration.helpers import installed

pytestmark = pytest.mark.integration

FLEET = QuerySettings(mode="fleet", shards=3, retries=0, timeout_seconds=60)
#: The same settings for both modes. The idle window is 20 of the 30 minutes: fleet mode's
#: data begin at the end of its first bucket (docs/scale.md), direct mode's at its first
#: scrape, so a 30-minute window would be covered by one and not the other.
SETTINGS = Settings.model_validate({"analytics": {"idle_window_minutes": 20}})


def findings(store: Store, at: float, settings: Settings) -> dict[str, set[tuple[str, str]]]:
    out = run_on_store(store, datetime.fromtimestamp(at, UTC), settings, DETECTORS, persist=False)
    return {
        name: {(f.kind, repr(sorted(f.subject.items()))) for f in a.findings}
        for name, a in out.items()
    }


def run_fleet(
    base: str,
    run: SimRun,
    db: Path,
    settings: Settings,
    q: QuerySettings,
    status: dict[str, Any] | None = None,
) -> Store:
    """Fleet mode's cycles every simulated minute until the last bucket is past the
    engine's latency offset; returns the store they wrote (``status``: filled with the
    source's status at the end)."""
    store = Store.open(db)
    record_inventory(store, run, run.start, settings.workloads)
    ingest = QueryIngest(base, q, 15.0, store, store.append_scrape)
    # the first cycle starts where the data does (a fresh collector starts at "now")
    for w in ingest.fleet.windows.values():
        w.cursor = run.start
    now = run.start + 60
    while now <= run.end + BUCKET_S + q.latency_offset_seconds + 60:
        ingest.cycle(now)
        last = ingest.last
        assert last is not None and not last.error, last
        now += 60
    shown = ingest.status(now)
    assert shown["steps_skipped"] == 0 and shown["last_error"] is None
    if status is not None:
        status.update(shown)
    ingest.client.close()
    return store


def assert_every_bucket_once(store: Store, run: SimRun) -> None:
    cur = store.cursor()
    twice = cur.execute(
        "SELECT count(*) FROM (SELECT series_id, ts FROM samples GROUP BY ALL HAVING count(*) > 1)"
    ).fetchone()
    assert twice == (0,), "a bucket stored twice"
    got = [
        r[0].replace(tzinfo=UTC).timestamp()
        for r in cur.execute("SELECT DISTINCT ts FROM samples ORDER BY 1").fetchall()
    ]
    # each bucket's summary at its last second, where the engine evaluated it
    assert got == [b + BUCKET_S - 1 for b in run.buckets()], "buckets lost or out of place"
    # every GPU's busy signal has every bucket
    per_series = cur.execute(
        """SELECT count(*) FROM samples JOIN series USING (series_id)
           WHERE metric = 'gpuscope_gpu_utilization_ratio' GROUP BY series_id"""
    ).fetchall()
    assert per_series and {n for (n,) in per_series} == {len(run.buckets())}
    cur.close()


def compare(direct: Store, fleet: Store, run: SimRun, settings: Settings) -> None:
    want = findings(direct, run.end, settings)
    got = findings(fleet, run.end, settings)
    assert want["idle"] and want["bandwidth"] and want["fragmentation"]  # the test has teeth
    assert got == want


@pytest.fixture(scope="module")
def run() -> SimRun:
    return sim_run(nodes=8, minutes=30)


@pytest.fixture(scope="module")
def direct(run: SimRun, tmp_path_factory: Any) -> Store:
    return scrape_directly(run, tmp_path_factory.mktemp("direct") / "d.duckdb", Settings())


def test_fleet_mode_on_victoriametrics_equals_direct(
    run: SimRun, direct: Store, tmp_path: Path
) -> None:
    settings = SETTINGS
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        pushed = push_to_victoriametrics(vm, run.pages(), run.times())
        vm_flush(vm)
        assert pushed > 0
        fleet = run_fleet(vm, run, tmp_path / "f.duckdb", settings, FLEET)
    assert_every_bucket_once(fleet, run)
    compare(direct, fleet, run, settings)


def test_fleet_mode_on_prometheus_equals_direct(run: SimRun, direct: Store, tmp_path: Path) -> None:
    settings = SETTINGS
    om = tmp_path / "fleet.om"
    write_openmetrics(run.pages(), run.times(), om)
    with prometheus_on_blocks(tmp_path, om) as prom:
        up = loopback.get(prom + "/api/v1/query", params={
            "query": "count(gpuscope_agent_info)", "time": run.end - 60}).json()  # fmt: skip
        assert up["data"]["result"], "the blocks hold no data"
        fleet = run_fleet(prom, run, tmp_path / "f.duckdb", settings, FLEET)
    assert_every_bucket_once(fleet, run)
    compare(direct, fleet, run, settings)


def evaluate_rules_into(
    vm: str,
    rules: Path,
    start: float,
    end: float,
    missed: Callable[[str, float], bool] = lambda node, t: False,
) -> int:
    """Do what vmalert (or Prometheus' rule manager) does with the shipped recording rules:
    evaluate each every 30 s over ``[start, end]`` and write the result under its name,
    but for the evaluations ``missed(node, t)`` says it never made."""
    groups = yaml.safe_load(rules.read_text())["groups"]
    lines: list[str] = []
    for group in groups:
        step = group.get("interval", "30s")
        for rule in group["rules"]:
            r = loopback.post(vm + "/api/v1/query_range", data={
                "query": rule["expr"], "start": start, "end": end, "step": step}, timeout=120)  # fmt: skip
            for series in r.json()["data"]["result"]:
                node = series["metric"].get("node", "")
                made = [(float(t), float(v)) for t, v in series["values"]
                        if not missed(node, float(t))]  # fmt: skip
                if not made:
                    continue
                lines.append(json.dumps({
                    "metric": {**series["metric"], "__name__": rule["record"]},
                    "values": [v for _, v in made],
                    "timestamps": [round(t * 1000) for t, _ in made],
                }))  # fmt: skip
    loopback.post(vm + "/api/v1/import", content="\n".join(lines), timeout=300).raise_for_status()
    return len(lines)


def test_fleet_mode_reads_the_shipped_recording_rules_and_asks_what_they_missed(
    run: SimRun, direct: Store, tmp_path: Path
) -> None:
    """With ``recording_rules: true`` fleet mode reads the engine's ``gpuscope:*`` series
    (dashboards/rules/gpuscope-fleet-rules.yaml) instead of asking ``*_over_time``, in every
    bucket the rules reached. A rule evaluator never makes up an evaluation it missed
    (vmalert restarted, behind the latency offset, down) and fleet mode asks each bucket
    once, so a node's bucket the rules did not reach is asked as ``*_over_time`` instead.
    Here the evaluator is down for buckets 2 and 3 and misses one node in bucket 1: raw
    questions for buckets 1-3 only, every GPU still has every bucket's busy peak, those 17
    node buckets (8 nodes twice, and one) are counted, and the findings are direct
    scraping's. Before, those buckets were stored without them (each GPU had 3 or 4 of its
    6 buckets: no data to the idle detector), with every cycle answered."""
    settings = SETTINGS
    rules = Path(__file__).resolve().parents[2] / "dashboards/rules/gpuscope-fleet-rules.yaml"
    b = run.buckets()
    lone = run.cluster.node_names[1]

    def missed(node: str, t: float) -> bool:
        return b[2] <= t < b[4] or (node == lone and b[1] <= t < b[2])

    # pages rendered afresh, not the run's kept ones: with those (pushed at once, no render
    # between steps) the rules test failed once in 21 runs (2026-12-07: every GPU's
    # gpuscope_gpu_utilization_ratio in 4 of the 6 buckets, the raw samples in all 6, no
    # cycle in error); not seen again in 88 runs of the same flow with kept pages, so the
    # cause is not known; fleet mode now fills a node's bucket only when every rule family
    # of it is missing, not one family alone (docs/scale.md, "Recording rules")
    fresh = FleetPages(run.cluster, run.cluster.node_names, run.origin)
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        push_to_victoriametrics(vm, fresh, run.times())
        vm_flush(vm)
        assert evaluate_rules_into(vm, rules, run.start, run.end + BUCKET_S, missed) > 0
        vm_flush(vm)
        q = FLEET.model_copy(update={"recording_rules": True})
        spy: list[dict[str, str]] = []
        original = QueryClient.query

        def recorded(
            self: QueryClient, path: str, params: dict[str, str], **kw: Any
        ) -> dict[str, Any]:
            spy.append(params)
            return original(self, path, params, **kw)

        status: dict[str, Any] = {}
        QueryClient.query = recorded  # type: ignore[method-assign]
        try:
            fleet = run_fleet(vm, run, tmp_path / "f.duckdb", settings, q, status)
        finally:
            QueryClient.query = original  # type: ignore[method-assign]
    assert any("gpuscope:gpu_utilization_ratio:max5m" in p["query"] for p in spy)
    raw = [p for p in spy if "_over_time(" in p["query"] and "agent_info" not in p["query"]]
    # asked of the raw series only where the rules missed: buckets 1 to 3 (each evaluated
    # at its last second)
    assert raw and all(
        b[1] + BUCKET_S - 1 <= float(p["start"]) <= float(p["end"]) <= b[3] + BUCKET_S - 1
        for p in raw
    ), sorted({(p["start"], p["end"]) for p in raw})
    assert_every_bucket_once(fleet, run)
    compare(direct, fleet, run, settings)
    assert status["rule_gaps_filled"] == 2 * len(run.cluster.node_names) + 1


def test_the_shipped_recording_rules_are_valid_and_complete() -> None:
    """promtool accepts them, and they record exactly the series fleet mode reads."""
    import subprocess

    from gpuscope.collector.querying.fleet_questions import RULE_NAMES

    rules = Path(__file__).resolve().parents[2] / "dashboards/rules/gpuscope-fleet-rules.yaml"
    records = {r["record"] for g in yaml.safe_load(rules.read_text())["groups"] for r in g["rules"]}
    assert records == set(RULE_NAMES)
    promtool = installed("promtool")
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_restart_neither_repeats_nor_loses_a_bucket(run: SimRun, tmp_path: Path) -> None:
    """Where each shard's window stands is kept in the store: a collector restarted half
    way (same settings) goes on from there; one restarted with another shard count goes on
    from the newest shard's bucket (never storing a node's bucket twice)."""
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        push_to_victoriametrics(vm, run.pages(), run.times())
        vm_flush(vm)
        db = tmp_path / "f.duckdb"
        with Store.open(db) as store:
            first = QueryIngest(vm, FLEET, 15.0, store, store.append_scrape)
            for w in first.fleet.windows.values():
                w.cursor = run.start
            first.cycle(run.start + 900 + 60)  # three buckets closed
            first.client.close()
        with Store.open(db) as store:
            again = QueryIngest(vm, FLEET, 15.0, store, store.append_scrape)
            assert {w.cursor for w in again.fleet.windows.values()} == {run.start + 900}
            again.cycle(run.end + BUCKET_S + 60)
            again.client.close()
            assert_every_bucket_once(store, run)
            resharded = QueryIngest(vm, FLEET.model_copy(update={"shards": 5}), 15.0, store,
                                    store.append_scrape)  # fmt: skip
            assert {w.cursor for w in resharded.fleet.windows.values()} == {run.end}
            resharded.client.close()

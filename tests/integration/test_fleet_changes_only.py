"""Fleet summaries stored only where they change (``collector.query.changes_only``) against
a real VictoriaMetrics: on the same simulated fleet, with a node that goes down for ten
minutes, an agent source that fails for ten, and a training job that starts, goes idle,
comes back and ends, the detectors' findings and every metric
alert rule's answer at every bucket (judged as the alert engine judges fleet data: at the
bucket's end, over whole buckets) equal those of the store that holds every summary in
every bucket, while the change-only store holds fewer samples.

The workloads' summaries are stored in every bucket either way (the idle detector reads
a missing bucket as missing data); the node summaries follow the job (GPUs held 0, 8, 0)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.fleet_sim import FleetPages, import_lines
from gpuscope.alerts.conditions import DataView, evaluate_metric
from gpuscope.alerts.config import MetricRule, default_config
from gpuscope.collector.storage.store import Store
from gpuscope.collector.storage.store_sql import utc
from tests.integration.engines import victoria_metrics, vm_flush
from tests.integration.fleet_cluster import BUCKET_S, SimRun, node_summaries, sim_run
from tests.integration.test_fleet_mode import FLEET, SETTINGS, findings, run_fleet

pytestmark = pytest.mark.integration

SUMMARIES = FLEET.model_copy(update={"summaries": True})
DOWN_NODE = 2  # index in the cluster's nodes: its agent is gone for minutes 10-20
FAILING_NODE = 5  # its InfiniBand source reports 0 for minutes 5-15
#: A training job on all 8 GPUs of a node: it starts at minute 5, is idle for minutes
#: 10-15, busy again until it ends at minute 25.
CYCLED_NODE, CYCLED_POD = 1, "llm-pretrain-worker-1"
BUSY_SIGNALS = ("gpuscope_gpu_utilization_ratio{", "gpuscope_gpu_sm_active_ratio{")


def _lines(run: SimRun, pages: FleetPages, t: float) -> Iterable[str]:
    """Every node's page at ``t`` as import lines, less the node that is down, with the
    failing source's ``up`` at 0 while it fails and the cycled job's lifecycle."""
    down = run.cluster.node_names[DOWN_NODE]
    failing = run.cluster.node_names[FAILING_NODE]
    cycled = run.cluster.node_names[CYCLED_NODE]
    minute = (t - run.start) / 60
    alive = ((n, p) for n, p in pages.pages(t) if not (n == down and 10 <= minute < 20))
    for line in import_lines(alive, round(t * 1000)):
        if f'node="{cycled}"' in line:
            # not started, busy, idle, busy again, ended
            running, busy = 5 <= minute < 25, 5 <= minute < 10 or 15 <= minute < 25
            if f'pod="{CYCLED_POD}"' in line and not running:
                continue
            if line.startswith(BUSY_SIGNALS) and not busy:
                head, _, stamp = line.rsplit(" ", 2)
                yield f"{head} 0 {stamp}"
                continue
        if (
            5 <= minute < 15
            and line.startswith("gpuscope_agent_source_up{")
            and f'node="{failing}"' in line
            and 'source="infiniband"' in line
        ):
            head, _, stamp = line.rsplit(" ", 2)
            yield f"{head} 0 {stamp}"
        else:
            yield line


def _push(base: str, run: SimRun) -> None:
    import gzip

    import httpx

    pages = run.pages()
    with httpx.Client(timeout=120) as http:
        for t in run.times():
            body = gzip.compress(("\n".join(_lines(run, pages, t)) + "\n").encode())
            r = http.post(
                base + "/api/v1/import/prometheus",
                content=body,
                headers={"Content-Encoding": "gzip"},
            )
            r.raise_for_status()
    vm_flush(base)


def _alerts(store: Store, at: float) -> set[tuple[str, str, float | None]]:
    """Every metric rule's candidates judged at the bucket ending at ``at``."""
    when = datetime.fromtimestamp(at, UTC)
    view = DataView(utc(when), float(BUCKET_S))
    out: set[tuple[str, str, float | None]] = set()
    cur = store.cursor()
    try:
        for rule in default_config().rules:
            if isinstance(rule, MetricRule):
                for c in evaluate_metric(cur, rule, when, view):
                    out.add((c.rule, repr(sorted(c.labels.items())), c.value))
    finally:
        cur.close()
    return out


def _alive(store: Store, node: str) -> list[float]:
    """The bucket ends where ``node``'s agent was seen."""
    cur = store.cursor()
    rows = cur.execute(
        "SELECT DISTINCT epoch(ts) FROM samples JOIN series USING (series_id) "
        "WHERE metric = 'gpuscope_agent_info' AND node = ? ORDER BY 1",
        [node],
    ).fetchall()
    cur.close()
    return [float(r[0]) for r in rows]


def _busy_peaks(store: Store, key: str) -> list[tuple[float, float]]:
    """A workload's stored busy peak, bucket by bucket."""
    cur = store.cursor()
    rows = cur.execute(
        "SELECT epoch(ts), value FROM samples JOIN series USING (series_id) "
        "WHERE metric = 'gpuscope_gpu_utilization_ratio' AND uuid = ? ORDER BY 1",
        [key],
    ).fetchall()
    cur.close()
    return [(float(t), float(v)) for t, v in rows]


def _samples(store: Store, metric_like: str) -> int:
    cur = store.cursor()
    row = cur.execute(
        "SELECT count(*) FROM samples JOIN series USING (series_id) WHERE metric LIKE ?",
        [metric_like],
    ).fetchone()
    cur.close()
    return int(row[0]) if row else 0


def _utilization(store: Store, by: str, run: SimRun) -> dict[str, list[list[float]]]:
    """GET /api/v1/utilization over the run at a 5-minute step: {key: points}."""
    from fastapi.testclient import TestClient

    from gpuscope.collector.gauges.metrics import CollectorMetrics
    from gpuscope.collector.http_api.api import ApiState, create_app
    from gpuscope.collector.http_api.api_node_summaries import NOTE
    from gpuscope.collector.scraping.targets import TargetRegistry

    state = ApiState(store=store, targets=TargetRegistry([]), metrics=CollectorMetrics())
    params = {"by": by, "step": BUCKET_S,
              "start": datetime.fromtimestamp(run.start, UTC).isoformat(),
              "end": datetime.fromtimestamp(run.end, UTC).isoformat()}  # fmt: skip
    body = TestClient(create_app(state)).get("/api/v1/utilization", params=params).json()
    assert body["note"] == NOTE
    return {s["key"]: s["points"] for s in body["series"]}


def test_change_only_summaries_give_the_every_bucket_answers(tmp_path: Path) -> None:
    run = sim_run(nodes=8, minutes=30)
    with victoria_metrics(tmp_path) as vm:
        _push(vm, run)
        every = run_fleet(
            vm, run, tmp_path / "every.duckdb", SETTINGS,
            SUMMARIES.model_copy(update={"changes_only": False}),
        )  # fmt: skip
        changes = run_fleet(
            vm, run, tmp_path / "changes.duckdb", SETTINGS,
            SUMMARIES.model_copy(update={"changes_only": True}),
        )  # fmt: skip
    try:
        ends = [b + BUCKET_S - 1 for b in run.buckets()]
        # the job's lifecycle is in both stores: held in buckets 1-4, idle in bucket 2
        key = ("gpuscope:node_gpus_held", run.cluster.node_names[CYCLED_NODE])
        held = [v for _, v in node_summaries(every)[key]]
        assert held == [0, 8, 8, 8, 8, 0], held
        peaks = _busy_peaks(every, f"workload:nlp/{CYCLED_POD}/main")
        assert [ts for ts, _ in peaks] == ends[1:5]
        assert [v > 0.5 for _, v in peaks] == [True, False, True, True], peaks
        # the failing source is alerted on, and the node down is missing from both stores
        fired = set().union(*(_alerts(every, at) for at in ends))
        assert "AgentSourceDown" in {r for r, _, _ in fired}, fired
        for store in (every, changes):
            assert _alive(store, run.cluster.node_names[DOWN_NODE]) == ends[:2] + ends[4:]
        for at in ends:
            assert _alerts(changes, at) == _alerts(every, at), at
        for at in ends[2:]:
            assert findings(changes, at, SETTINGS) == findings(every, at, SETTINGS), at
        # a node summary's last value at or before each bucket is its value there (a node
        # down has none in the every-bucket store: presence is gpuscope_agent_info's)
        every_nodes, changed_nodes = node_summaries(every), node_summaries(changes)
        for key, points in every_nodes.items():
            for ts, value in points:
                carried = [v for t, v in changed_nodes.get(key, []) if t <= ts]
                # the engine's averages differ in the last bit between evaluations
                assert carried and math.isclose(carried[-1], value, rel_tol=1e-12), (key, ts)
        # the API's utilization by node and cluster reads the same from both stores (the
        # down node counted only where its agent is)
        down = run.cluster.node_names[DOWN_NODE]
        for by in ("node", "cluster"):
            want, got = _utilization(every, by, run), _utilization(changes, by, run)
            assert want and got.keys() == want.keys(), by
            for key, points in want.items():
                assert got[key] == [pytest.approx(p, rel=1e-9) for p in points], (by, key)
        assert [p[0] for p in want["cluster"]] == run.buckets()
        nodes = _utilization(changes, "node", run)
        assert [p[0] + BUCKET_S - 1 for p in nodes[down]] == ends[:2] + ends[4:]
        # node summaries stored where they change: fewer samples ...
        assert _samples(changes, "gpuscope:node_gpus%") < _samples(every, "gpuscope:node_gpus%")
        # ... and the rest in every bucket either way
        for kept in ("gpuscope_gpu_%", "gpuscope_agent_%", "gpuscope_ib_%"):
            assert _samples(changes, kept) == _samples(every, kept), kept
    finally:
        every.close()
        changes.close()

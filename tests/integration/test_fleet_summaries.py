"""Fleet summaries against a real VictoriaMetrics (issue 40): with
``collector.query.summaries`` the collector stores per-workload, per-node and hot-port
aggregates the engine computes, not every GPU's series, and the detectors still find what
direct scraping of the same simulated cluster finds: the idle workloads (with the GPUs they
hold), the hot InfiniBand ports, the link with errors, the blocked job and a planted hot
NVLink (a cool PCIe link beside it stores nothing); and the weekly report's GPU-hours and
the API's utilization view count each workload's GPUs as direct scraping does."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.fleet_sim import FleetPages, push_to_victoriametrics
from gpuscope.collector.storage.store import Store
from tests.integration.engines import victoria_metrics, vm_flush
from tests.integration.fleet_cluster import (
    BUCKET_S,
    SimRun,
    node_summaries,
    scrape_directly,
    sim_run,
)
from tests.integration.test_fleet_mode import FLEET, SETTINGS, findings, run_fleet

pytestmark = pytest.mark.integration

SUMMARIES = FLEET.model_copy(update={"summaries": True})
#: The planted GPU links, on one H100 node: GPU 0's NVLink transmits at 0.9 of 450 GB/s
#: for the whole run (hot), GPU 1's PCIe at 12 GB/s (under the floor, half the smallest
#: PCIe capacity configured: 16 GB/s).
HOT_NODE, HOT_GPU, COOL_GPU = "gpu-node-00", "0", "1"
NVLINK_RATE, PCIE_RATE = 0.9 * 450e9, 12e9


class LinkPages(FleetPages):
    """The agents' pages with the planted links' transmit counters in place of the
    simulator's (the same pages for direct scraping and for the engine)."""

    def __init__(self, run: SimRun) -> None:
        super().__init__(run.cluster, run.cluster.node_names, run.origin, keep=True)
        self.start = run.start

    def pages(self, unix_t: float, *, openmetrics: bool = False) -> Iterator[tuple[str, bytes]]:
        dt = unix_t - self.start
        planted = {
            f'gpuscope_gpu_nvlink_bytes_total{{direction="tx",gpu="{HOT_GPU}",': NVLINK_RATE,
            f'gpuscope_gpu_pcie_bytes_total{{direction="tx",gpu="{COOL_GPU}",': PCIE_RATE,
        }
        for node, text in super().pages(unix_t, openmetrics=openmetrics):
            page = text
            if node == HOT_NODE:
                lines = page.decode().split("\n")
                for i, line in enumerate(lines):
                    rate = next((r for p, r in planted.items() if line.startswith(p)), None)
                    if rate is not None:
                        lines[i] = f"{line[: line.index('} ') + 1]} {1e15 + rate * dt!r}"
                page = "\n".join(lines).encode()
            yield node, page


@dataclass
class LinkRun(SimRun):
    def render(self) -> FleetPages:
        return LinkPages(self)


@pytest.fixture(scope="module")
def run() -> SimRun:
    base = sim_run(nodes=8, minutes=30)
    return LinkRun(base.cluster, base.origin, base.start, base.minutes)


@pytest.fixture(scope="module")
def stores(run: SimRun, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, ...]]:
    """The cluster scraped directly, and read through VictoriaMetrics by fleet mode with
    per-GPU series and with summaries: (direct, per_gpu, summed)."""
    tmp_path = tmp_path_factory.mktemp("fleet_summaries")
    direct = scrape_directly(run, tmp_path / "d.duckdb", SETTINGS)
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        assert push_to_victoriametrics(vm, run.pages(), run.times()) > 0
        vm_flush(vm)
        per_gpu = run_fleet(vm, run, tmp_path / "f.duckdb", SETTINGS, FLEET)
        summed = run_fleet(vm, run, tmp_path / "s.duckdb", SETTINGS, SUMMARIES)
    yield direct, per_gpu, summed
    for store in (direct, per_gpu, summed):
        store.close()


def _series(store: Store) -> int:
    cur = store.cursor()
    row = cur.execute("SELECT count(DISTINCT series_id) FROM samples").fetchone()
    cur.close()
    return int(row[0]) if row else 0


def _idle_gpus(store: Store, at: float) -> dict[str, float]:
    from datetime import UTC, datetime

    from gpuscope.analytics.runner import DETECTORS, run_on_store

    out = run_on_store(store, datetime.fromtimestamp(at, UTC), SETTINGS, DETECTORS, persist=False)
    return {
        f"{f.kind} {f.subject.get('namespace')}/{f.subject.get('pod')}": float(
            f.evidence["gpus_held"]
        )
        for f in out["idle"].findings
        if f.evidence and "gpus_held" in f.evidence
    }


def _workloads(store: Store, at: float) -> dict[str, tuple[float, str]]:
    """Every workload the idle detector judged: the GPUs it holds and its status."""
    from datetime import UTC, datetime

    from gpuscope.analytics.detectors.idle import judged_workloads

    when = datetime.fromtimestamp(at, UTC)
    rows = judged_workloads(store, when, SETTINGS.analytics, SETTINGS.workloads)
    return {f"{r['namespace']}/{r['pod']}": (float(r["gpus"]), r["status"]) for r in rows}


def _drill(vm: str, store: Store, at: float) -> dict[str, dict[str, int]]:
    """Per finding kind, the first finding's drill-down asked of the engine: series by name
    (each with points over the last 30 minutes)."""
    from datetime import UTC, datetime

    from gpuscope.analytics.runner import DETECTORS, run_on_store
    from gpuscope.collector.querying.drilldown import drilldown, drilldown_queries
    from gpuscope.collector.querying.query_client import QueryClient

    out = run_on_store(store, datetime.fromtimestamp(at, UTC), SETTINGS, DETECTORS, persist=False)
    client = QueryClient(vm, timeout_seconds=30)
    got: dict[str, dict[str, int]] = {}
    try:
        for kind in ("idle_session", "bandwidth_hotspot"):
            f = next(f for a in out.values() for f in a.findings if f.kind == kind)
            queries = drilldown_queries(kind, f.subject, f.evidence or {}, 60)
            series = drilldown(client, queries, at - 1800, at, 60)
            assert all(s["points"] for s in series), kind
            names: dict[str, int] = {}
            for s in series:
                names[s["name"]] = names.get(s["name"], 0) + 1
            got[kind] = names
    finally:
        client.close()
    return got


def test_summaries_find_what_direct_scraping_finds(run: SimRun, stores: tuple[Store, ...]) -> None:
    direct, per_gpu, summed = stores
    want = findings(direct, run.end, SETTINGS)
    got = findings(summed, run.end, SETTINGS)
    assert want["idle"] and want["bandwidth"] and want["fragmentation"]  # the test has teeth
    for name in ("idle", "bandwidth", "fragmentation"):
        assert got[name] == want[name], name
    # an idle workload's GPUs are counted from its summary's `gpu` label
    held = _idle_gpus(direct, run.end)
    assert held and _idle_gpus(summed, run.end) == held
    # every workload's GPUs, multi-GPU training pods among them, and its status
    every = _workloads(direct, run.end)
    assert max(every.values())[0] > 1 and _workloads(summed, run.end) == every
    # fewer series than one a GPU per signal: the summaries grow with workloads and nodes
    gpus = 8 * len(run.cluster.node_names)
    assert _series(summed) < 0.3 * _series(per_gpu), (_series(summed), _series(per_gpu), gpus)


def test_hot_ports_are_found_in_the_runs_first_bucket_as_directly(
    run: SimRun, stores: tuple[Store, ...]
) -> None:
    """The window of the run's first bucket: no bucket before it was stored (there were no
    data), so each hot port's first stored bucket is the whole window; it counts as that
    bucket (detectors/sample_steps.py) and the hot ports are direct scraping's."""
    direct, _per_gpu, summed = stores
    first = run.start + BUCKET_S
    want = findings(direct, first, SETTINGS)["bandwidth"]
    assert any(kind == "bandwidth_hotspot" for kind, _ in want)  # the test has teeth
    assert findings(summed, first, SETTINGS)["bandwidth"] == want


def _links(store: Store) -> dict[tuple[str, str, str, str], int]:
    """Stored GPU link series: (metric, node, gpu, direction) -> samples."""
    cur = store.cursor()
    rows = cur.execute(
        "SELECT metric, node, gpu, labels['direction'], count(*) FROM series JOIN samples "
        "USING (series_id) WHERE metric IN ('gpuscope_gpu_nvlink_bytes_total', "
        "'gpuscope_gpu_pcie_bytes_total') GROUP BY ALL"
    ).fetchall()
    cur.close()
    return {(m, n, g, d): int(c) for m, n, g, d, c in rows}


def _link_findings(store: Store, at: float) -> dict[tuple[str, str, str, str], float]:
    """The GPU-link findings: (kind, node, gpu, uuid) -> ratio."""
    from gpuscope.analytics.runner import DETECTORS, run_on_store

    out = run_on_store(store, datetime.fromtimestamp(at, UTC), SETTINGS, DETECTORS, persist=False)
    return {
        (f.kind, f.subject["node"], f.subject["gpu"], f.subject["uuid"]): float(f.evidence["ratio"])
        for f in out["bandwidth"].findings
        if f.kind in ("nvlink_hotspot", "pcie_hotspot") and f.evidence
    }


def test_a_hot_nvlink_is_found_under_summaries_as_directly(
    run: SimRun, stores: tuple[Store, ...]
) -> None:
    """The planted hot NVLink: under summaries its bucket increases (both directions) are
    stored in every bucket and the finding (kind, GPU, ratio) is direct scraping's; the
    cool PCIe link beside it, and every other GPU's links (the simulator's NVLink stays
    under 0.3 of capacity), store nothing."""
    direct, _per_gpu, summed = stores
    want = _link_findings(direct, run.end)
    [(kind, node, gpu, _uuid)] = want  # the test has teeth: direct scraping finds it
    assert (kind, node, gpu) == ("nvlink_hotspot", HOT_NODE, HOT_GPU)
    assert want[kind, node, gpu, _uuid] == pytest.approx(0.9, abs=1e-3)
    got = _link_findings(summed, run.end)
    assert got.keys() == want.keys()
    assert got[kind, node, gpu, _uuid] == pytest.approx(0.9, abs=1e-3)
    buckets = len(run.buckets())
    nvlink = "gpuscope_gpu_nvlink_bytes_total"
    assert _links(summed) == {
        (nvlink, HOT_NODE, HOT_GPU, "tx"): buckets,
        (nvlink, HOT_NODE, HOT_GPU, "rx"): buckets,
    }
    # directly, the cool PCIe link is there (at its planted rate), and every GPU's links
    assert ("gpuscope_gpu_pcie_bytes_total", HOT_NODE, COOL_GPU, "tx") in _links(direct)


def _report_use(store: Store, lo: float, hi: float) -> dict[tuple[str, str], dict[str, float]]:
    """The weekly report's GPU-hours per pod over [lo, hi) (its own definitions)."""
    from gpuscope.analytics.report.data import pod_usage

    cur = store.cursor()
    try:
        frame = pod_usage(cur, datetime.fromtimestamp(lo, UTC), datetime.fromtimestamp(hi, UTC),
                          SETTINGS)  # fmt: skip
    finally:
        cur.close()
    return {(r["namespace"], r["pod"]): r for r in frame.to_dicts()}


def _per_namespace(use: dict[tuple[str, str], dict[str, float]], column: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (namespace, _), row in use.items():
        out[namespace] = out.get(namespace, 0.0) + row[column]
    return out


def _namespace_view(store: Store, lo: float, hi: float, by: str = "namespace") -> dict[str, Any]:
    """The API's utilization view by namespace (or ``by``), a point every bucket (through
    the route)."""
    from fastapi.testclient import TestClient

    from gpuscope.collector.gauges.metrics import CollectorMetrics
    from gpuscope.collector.http_api.api import ApiState, create_app
    from gpuscope.collector.scraping.targets import TargetRegistry

    state = ApiState(store=store, targets=TargetRegistry([]), metrics=CollectorMetrics())
    params = {"by": by, "step": BUCKET_S,
              "start": datetime.fromtimestamp(lo, UTC).isoformat(),
              "end": datetime.fromtimestamp(hi, UTC).isoformat()}  # fmt: skip
    body = TestClient(create_app(state)).get("/api/v1/utilization", params=params).json()
    return {"note": body["note"], **{s["key"]: s["points"] for s in body["series"]}}


def test_the_report_counts_a_workloads_gpus_as_direct_scraping_does(
    run: SimRun, stores: tuple[Store, ...]
) -> None:
    """Allocated GPU-hours per pod and namespace equal; idle equal for the pods wholly idle
    or wholly busy (all of this cluster's: a workload idle in part of a bucket while busy
    in another part, or on some of its GPUs only, is busy under summaries, whose peak
    stands for the bucket and for every GPU); used equal too (each GPU at its workload's
    GPUs' mean utilization over the bucket, which the engine takes over the same samples
    direct scraping stored). Fleet mode's data begin at the end of its first bucket
    (docs/scale.md), so the window starts after it."""
    direct, _, summed = stores
    lo, hi = run.start + BUCKET_S, run.end
    want, got = _report_use(direct, lo, hi), _report_use(summed, lo, hi)
    assert got.keys() == want.keys()
    gpus = max(row["allocated"] for row in want.values()) * 3600 / (hi - lo)
    assert gpus > 1  # multi-GPU pods among them: the test has teeth
    for column in ("allocated", "no_data", "used"):
        assert _per_namespace(got, column) == pytest.approx(_per_namespace(want, column)), column
    wholly = 0
    for key, w in want.items():
        g = got[key]
        assert g["allocated"] == pytest.approx(w["allocated"]), key
        assert g["used"] == pytest.approx(w["used"], rel=1e-6), key
        if w["idle"] < 1e-9 or math.isclose(w["idle"], w["allocated"]):
            wholly += w["idle"] > 0
            assert g["idle"] == pytest.approx(w["idle"], abs=1e-9), key
    assert wholly  # wholly idle pods among them
    # the API's view by namespace: each workload's GPUs counted, its peak at least the mean
    view_want, view_got = _namespace_view(direct, lo, hi), _namespace_view(summed, lo, hi)
    assert view_got.keys() == view_want.keys()
    assert view_want.pop("note") == "" and "upper bound" in view_got.pop("note")
    for namespace, points in view_want.items():
        by_time = {p[0]: p for p in view_got[namespace]}
        assert by_time.keys() == {p[0] for p in points}, namespace
        for t, value, series in points:
            assert by_time[t][2] == series, (namespace, t)
            assert by_time[t][1] >= value - 1e-9, (namespace, t)


def test_the_api_utilization_by_cluster_and_node_equals_direct_scrapings(
    run: SimRun, stores: tuple[Store, ...]
) -> None:
    """By node each node's GPUs' mean utilization over the bucket, by cluster the GPU-weighted
    mean over the nodes, read from the node summaries, equal to what direct scraping's
    GPU series give at a 5-minute step (every GPU scraped alike), with the same GPUs."""
    from gpuscope.collector.http_api.api_node_summaries import NOTE

    direct, _, summed = stores
    lo, hi = run.start + BUCKET_S, run.end
    for by in ("node", "cluster"):
        want, got = _namespace_view(direct, lo, hi, by), _namespace_view(summed, lo, hi, by)
        assert want.pop("note") == "" and got.pop("note") == NOTE
        assert len(want) == (len(run.cluster.node_names) if by == "node" else 1)
        assert got.keys() == want.keys(), by
        for key, points in want.items():
            assert len(points) == (hi - lo) / BUCKET_S, (by, key)
            assert got[key] == [pytest.approx(p, rel=1e-9) for p in points], (by, key)


def test_summaries_store_no_per_gpu_series(run: SimRun, tmp_path: Path) -> None:
    """Every stored GPU-level series is a workload's summary (its key is the workload's)
    but the hot NVLink's GPU's, and only hot ports' and hot links' traffic is kept."""
    with victoria_metrics(tmp_path, "-search.disableCache") as vm:
        push_to_victoriametrics(vm, run.pages(), run.times())
        vm_flush(vm)
        store = run_fleet(vm, run, tmp_path / "s.duckdb", SETTINGS, SUMMARIES)
        drilled = _drill(vm, store, run.end)
    # an idle notebook's one GPU, and a hot port's traffic over its line rate, from the engine
    assert drilled["idle_session"] == {"utilization": 1, "sm_active": 1, "memory_used_bytes": 1}
    assert drilled["bandwidth_hotspot"]["transmit_ratio"] == 1
    cur = store.cursor()
    gpus: list[Any] = cur.execute(
        "SELECT DISTINCT uuid, node, gpu FROM series WHERE metric LIKE 'gpuscope_gpu_%' "
        "AND metric NOT IN ('gpuscope_gpu_up', 'gpuscope_gpu_ecc_errors_total')"
    ).fetchall()
    hot = {(n, g) for u, n, g in gpus if not str(u).startswith("workload:")}
    assert len(gpus) > 1 and hot == {(HOT_NODE, HOT_GPU)}
    ports = cur.execute(
        "SELECT count(DISTINCT (node, device, port)) FROM series "
        "WHERE metric = 'gpuscope_ib_transmit_bytes_total'"
    ).fetchone()
    all_ports = 8 * len(run.cluster.node_names)
    assert ports is not None and 0 < ports[0] < all_ports
    cur.close()


def test_summaries_on_prometheus_find_what_direct_scraping_finds(
    run: SimRun, stores: tuple[Store, ...], tmp_path: Path
) -> None:
    """The same questions are plain PromQL: Prometheus answers them as VictoriaMetrics does,
    the change-only node summaries' too. Against the module's direct store (the same run
    scraped directly: read here, never written)."""
    from bench.fleet_sim import write_openmetrics
    from tests.integration.engines import prometheus_on_blocks

    direct = stores[0]
    om = tmp_path / "fleet.om"
    write_openmetrics(run.pages(), run.times(), om)
    changes_only = SUMMARIES.model_copy(update={"changes_only": True})
    with prometheus_on_blocks(tmp_path, om) as prom:
        summed = run_fleet(prom, run, tmp_path / "s.duckdb", SETTINGS, SUMMARIES)
        changed = run_fleet(prom, run, tmp_path / "c.duckdb", SETTINGS, changes_only)
    want = findings(direct, run.end, SETTINGS)
    got = findings(summed, run.end, SETTINGS)
    for name in ("idle", "bandwidth", "fragmentation"):
        assert want[name] and got[name] == want[name], name
    # the change-only questions (offset, vector(time())) too: each node summary's last
    # value at or before every bucket is its every-bucket value
    assert findings(changed, run.end, SETTINGS) == got
    every, carried = node_summaries(summed), node_summaries(changed)
    assert every and sum(map(len, carried.values())) < sum(map(len, every.values()))
    for key, points in every.items():
        for ts, value in points:
            last = [v for t, v in carried.get(key, []) if t <= ts]
            assert last and math.isclose(last[-1], value, rel_tol=1e-12), (key, ts)

"""A benchmark database made the way users get one: agent series, the ingest path, maintenance.

The analytics benchmarks (idle, quota and bandwidth, the weekly report) all read a store's
history; a history written into the tables by SQL measures a database no user has. This
builder makes it as a collector does:

- the simulated cluster (``sim``, the demo's default scenario at ``nodes`` 8-GPU
  nodes with 8 InfiniBand rails each) is read at every scrape instant, ``step_s`` apart
  (15 s, the collector's default interval; the IB counters are read on the same scrape, as
  the agent's InfiniBand source is), and mapped to series by ``gpuscope.core.series.node_series``,
  the mapping the agent's exposition uses: the same names, labels and target per node;
- each instant's pages go into :meth:`gpuscope.collector.storage.store.Store.append_cycle` as
  :class:`~gpuscope.collector.scraping.batch.Batch` objects, one transaction per cycle, as the
  collector's writer stores a scrape cycle (rendering and parsing the text are measured by
  bench/parse.py, bench/ingest.py and bench/agent_scrape.py, not here);
- the inventory (nodes, pods, quotas) is recorded every 6 hours, as the API server lists it;
- the product's own maintenance, :meth:`~gpuscope.collector.storage.store.Store.apply_retention`
  (roll-ups, retention, compaction of segments and days as a collector as shipped does
  it: :data:`SHIPPED`, the last 65 minutes left as scraped), runs every simulated hour as
  the service's retention job does, and once more at the end; its time is summed apart
  from the ingest's and reported as a row of its own. No roll-up table is ever written here.

Which series: ``families="analysis"`` (the default) keeps the families the detectors and
the report read (:data:`ANALYSED`: :data:`gpuscope.demo.history.KEPT` and the IB error
counters, 184 of the 296 series per node, 23 per GPU); ``families="agent"`` keeps every
series ``node_series`` yields (296 per node, 37 per GPU: clocks, energy, ECC, NVLink/PCIe,
IB packets too; the agent's page adds its own process and per-source series and the
sysfs vendor counters, 541 in all on the sim node).

Sizes: :data:`DEFAULT` (1 day of 104 GPUs) keeps each benchmark's default run within a few
minutes on 2 cores; :data:`QUICK` is a smoke test; ``=NODESxDAYS`` picks another size through
the same path.

10,000 GPUs x 7 days (``GPUSCOPE_BENCH_HISTORY=large``, :data:`LARGE`) would take about 8
hours that way (simulator and ingest ~0.6 ms per node per 15 s cycle), so all but its last
hour is written by bench/history_fast.py (``tail_s``; ``=NODESxDAYS+fastHOURS`` for any
size): the values of the series the benchmarked analytics read (GPU utilization, memory
utilization and SM activity, the workloads' utilization, the IB byte, wait and link-rate
series) computed for every 15 s instant with numpy by the simulator's own formulas, stored
as the ingest path stores them (counters as increases; series rows with their first/last
seen and last raw value; ``workload_intervals`` as the workload-info presence opens and
closes them) and rolled up and compacted by the store's own ``apply_retention`` every 3
hours of it; then the last hour through ``CycleMaker`` and ``append_cycle`` as above.
tests/unit/test_bench_history_fast.py builds a small history both ways and finds the rows
of those families equal. What differs from a collector's store of that size: before the
last hour the ``samples`` table and the roll-ups hold only those families (the agent's
other ~150 series a node, the IB error counters, NVLink/PCIe counters and the GPU info
series are absent there, so the file is far smaller than a real one, and a query that scans
the raw samples without skipping other series' row groups would read less than on a real
store), and ``scrapes`` has no rows for it. Every table the analytics read for those
families holds the rows a real store would.
A built history is kept under ``$GPUSCOPE_BENCH_CACHE`` (default: the temp dir), keyed by
its size and a digest of the code that writes it, with the ingest and maintenance times of
the build that made it; each benchmark reads a copy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.history_fast import SpanWriter
from gpuscope.collector.cluster.inventory_records import (
    node_from_json,
    pod_from_json,
)
from gpuscope.collector.cluster.queue_records import quota_from_clusterqueue
from gpuscope.collector.scraping.batch import Batch, Labels
from gpuscope.collector.service import retention_of
from gpuscope.collector.storage.store import Store
from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.series import node_series
from gpuscope.core.settings import load_settings
from gpuscope.demo.history import KEPT
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.kube import nodes_json, quotas_json
from gpuscope.sim.kube_pods import pods_json

REPO = Path(__file__).resolve().parents[1]
#: The history ends here: 00:00 UTC on a Monday, so the ISO week 2025-W10 has just closed
#: (the weekly report's week) and every day before is closed (compacted).
END = datetime(2025, 3, 10, tzinfo=UTC)
INVENTORY_EVERY_S = 6 * 3600
#: DuckDB's memory limit while building (a collector runs with collector.db_memory_limit,
#: 1 GB by default): DuckDB's own default, 80 % of RAM, took 18 GB compacting a day of
#: 10,000 GPUs on a machine other work shares
BUILD_MEMORY = "3GB"
#: The retention and compaction of a collector as shipped (segments of two hours, the last
#: 65 minutes left as scraped): a history's layout is then what a running collector's file
#: holds at its end, so a benchmark's windowed reads skip what a collector's skip.
SHIPPED = retention_of(load_settings(env={}).collector)
MAINTENANCE_EVERY_S = 3600
#: the families the analytics read: the demo history's, and the IB error counters the
#: bandwidth detector's link_errors rule reads
ANALYSED = KEPT | {"gpuscope_ib_errors"}
_SPECS = {m.name: m for m in AGENT_METRICS}
_TYPES: dict[str, str] = {m.name: m.type for m in AGENT_METRICS}
#: the code that decides what a history holds: a change to any of it rebuilds the cache
_SOURCES = (
    "bench/history.py",
    "bench/history_fast.py",
    "gpuscope/collector/storage/store.py",
    "gpuscope/collector/storage/store_sql.py",
    "gpuscope/collector/storage/store_maintenance.py",
    "gpuscope/collector/storage/schema.py",
    "gpuscope/core/series.py",
    "gpuscope/demo/history.py",
)


@dataclass(frozen=True)
class HistorySize:
    """How much history: ``nodes`` 8-GPU nodes, ``days`` ending at :data:`END`."""

    nodes: int
    days: float
    step_s: int = 15
    families: str = "analysis"  # or "agent"
    #: seconds at the end written through the ingest path; the span before it is written
    #: by bench/history_fast.py (None: all of it through the ingest path)
    tail_s: int | None = None

    @property
    def gpus(self) -> int:
        return self.nodes * 8

    def label(self) -> str:
        days = f"{self.days:g} d" if self.days >= 1 else f"{self.days * 24:g} h"
        which = "analysed series" if self.families == "analysis" else "every agent series"
        how = "" if self.tail_s is None else f"; vectorised but the last {self.tail_s // 60} min"
        return f"{days} of {self.gpus:,} GPUs at {self.step_s} s ({which}{how})"

    def key(self) -> str:
        fast = "" if self.tail_s is None else f"-fast{self.tail_s}"
        return f"{self.nodes}n-{self.days:g}d-{self.step_s}s-{self.families}{fast}"


QUICK = HistorySize(nodes=6, days=0.125)
DEFAULT = HistorySize(nodes=13, days=1.0)
#: 10,000 GPUs x 7 days: the span before the last hour vectorised (bench/history_fast.py)
LARGE = HistorySize(nodes=1250, days=7.0, tail_s=3600)


def chosen_size(quick: bool) -> HistorySize:
    """:data:`QUICK` for ``--quick``, else ``$GPUSCOPE_BENCH_HISTORY`` (``large`` or
    ``NODESxDAYS``), else :data:`DEFAULT`."""
    if quick:
        return QUICK
    wanted = os.environ.get("GPUSCOPE_BENCH_HISTORY", "").strip().lower()
    if not wanted:
        return DEFAULT
    if wanted == "large":
        return LARGE
    try:
        size, _, tail = wanted.partition("+fast")
        nodes, days = size.split("x")
        return HistorySize(
            nodes=int(nodes), days=float(days), tail_s=int(float(tail) * 3600) if tail else None
        )
    except ValueError:
        raise ValueError(
            f"GPUSCOPE_BENCH_HISTORY={wanted!r}: expected 'large', NODESxDAYS (e.g. 125x7) "
            "or NODESxDAYS+fastHOURS (the last HOURS through ingest, the rest vectorised)"
        ) from None


@dataclass(frozen=True)
class History:
    """A built history: its file, what it holds, and what building it cost."""

    path: Path
    size: HistorySize
    samples: int  # raw sample rows stored (the ingest path's and the vectorised span's)
    cycles: int
    simulate_s: float  # the simulator's readings and their series (not the product)
    ingest_s: float  # Store.append_cycle calls alone
    maintenance_s: float  # every apply_retention call and the final checkpoint
    maintenance: dict[str, int]  # apply_retention's row counts, summed
    file_bytes: int
    built_at: str  # when (UTC) the build ran: a cached history says so
    build_s: float = 0.0  # wall seconds of the whole build
    #: rows and seconds of the span bench/history_fast.py wrote (its maintenance included)
    vectorised_samples: int = 0
    vectorised_s: float = 0.0

    @property
    def start(self) -> datetime:
        return END - timedelta(days=self.size.days)

    @property
    def end(self) -> datetime:
        return END

    def copy_to(self, folder: Path) -> Path:
        """A private copy of the database (benchmarks write: saved state, findings)."""
        dest = folder / self.path.name
        shutil.copyfile(self.path, dest)
        return dest


def scenario_cluster(nodes: int) -> tuple[SimulatedCluster, float]:
    """The demo's scenario with its "now" (``live_offset`` into it) at :data:`END`."""
    scenario = default_scenario(nodes=nodes)
    origin = END.timestamp() - scenario.live_offset
    return SimulatedCluster(scenario.model_copy(update={"origin": origin})), origin


def _record_inventory(store: Store, cluster: SimulatedCluster, at: float, origin: float) -> None:
    """What the API server would list at ``at``, parsed as the real lists are."""
    nodes = {
        n["metadata"]["name"]: node_from_json(n)
        for n in nodes_json(cluster, origin=origin)["items"]
    }
    settings = WorkloadSettings()
    pods = [
        pod_from_json(p, node=nodes.get(p["spec"].get("nodeName", "")), settings=settings)
        for p in pods_json(cluster, at - origin, origin=origin)["items"]
    ]
    quotas = [quota_from_clusterqueue(q) for q in quotas_json(cluster)["items"]]
    store.record_inventory(
        datetime.fromtimestamp(at, UTC), nodes=list(nodes.values()), pods=pods, quotas=quotas
    )


class CycleMaker:
    """One scrape cycle of the cluster at a Unix time: a Batch per node, the agent's series."""

    def __init__(self, cluster: SimulatedCluster, origin: float, families: str) -> None:
        self.cluster, self.origin = cluster, origin
        self.keep = None if families == "agent" else ANALYSED
        self.targets = {n: f"http://{n}:9400/metrics" for n in cluster.node_names}
        self._labels: dict[tuple[str, tuple[str, ...]], tuple[str, Labels]] = {}

    def cycle(self, t: float) -> list[tuple[Batch, float]]:
        st, c, out = t - self.origin, self.cluster, []
        for node, url in self.targets.items():
            gpus = c.gpu_readings(node, st)
            batch = Batch(url, int(t * 1000), types=_TYPES)
            series = node_series(
                node, gpus, c.gpu_workloads(node, st, gpus), c.ib_readings(node, st)
            )
            for name, values, value in series:
                if self.keep is not None and name not in self.keep:
                    continue
                key = (name, tuple(values))
                hit = self._labels.get(key)
                if hit is None:
                    spec = _SPECS[name]
                    hit = (spec.sample_name, tuple(sorted(zip(spec.labels, values, strict=True))))
                    self._labels[key] = hit
                batch.names.append(hit[0])
                batch.labels.append(hit[1])
                batch.values.append(value)
            out.append((batch, 0.0))
        return out


def append_cycles(store: Store, maker: CycleMaker, start: float, end: float, step_s: int) -> int:
    """Cycles at ``start``, ``start + step_s``, ... before ``end``; samples stored."""
    stored, t = 0, start
    while t < end:
        stored += sum(store.append_cycle(maker.cycle(t)))
        t += step_s
    return stored


def build(size: HistorySize, path: Path) -> History:
    """Write ``size``'s history into a new database at ``path`` through the ingest path."""
    began = time.perf_counter()
    cluster, origin = scenario_cluster(size.nodes)
    maker = CycleMaker(cluster, origin, size.families)
    end = END.timestamp()
    start = end - size.days * 86_400
    simulate = ingest = maintenance = vectorised_s = 0.0
    counts: dict[str, int] = {}
    stored = cycles = vectorised = 0
    t = start
    store = Store.open(path, memory_limit=BUILD_MEMORY, retention=SHIPPED)
    if size.tail_s is not None:  # the span before the tail: bench/history_fast.py
        split = max(start, end - size.tail_s)
        a = time.perf_counter()
        while t < split:
            if (t - start) % INVENTORY_EVERY_S == 0:
                _record_inventory(store, cluster, t, origin)
            t += size.step_s
        writer = SpanWriter(store, cluster, origin, start, split, size.step_s)
        writer.write()
        vectorised, cycles = writer.rows, len(writer.t)
        vectorised_s = time.perf_counter() - a
        store.close()
        # series ids and open intervals read back, as at a restart
        store = Store.open(path, memory_limit=BUILD_MEMORY, retention=SHIPPED)
    try:
        last_report = time.monotonic()
        while t < end:
            if (t - start) % INVENTORY_EVERY_S == 0:
                _record_inventory(store, cluster, t, origin)
            a = time.perf_counter()
            pages = maker.cycle(t)
            b = time.perf_counter()
            stored += sum(store.append_cycle(pages))
            simulate += b - a
            ingest += time.perf_counter() - b
            cycles += 1
            t += size.step_s
            if (t - start) % MAINTENANCE_EVERY_S == 0:  # the service's hourly retention job
                a = time.perf_counter()
                for k, v in store.apply_retention(datetime.fromtimestamp(t, UTC)).items():
                    counts[k] = counts.get(k, 0) + int(v)
                maintenance += time.perf_counter() - a
            if time.monotonic() - last_report > 30:
                last_report = time.monotonic()
                print(f"  history {size.key()}: {(t - start) / (end - start):.0%}", file=sys.stderr)
        _record_inventory(store, cluster, end, origin)
        a = time.perf_counter()
        # ten minutes past the end: every 5-minute bucket and hour closed, the last day too
        for k, v in store.apply_retention(END + timedelta(minutes=10)).items():
            counts[k] = counts.get(k, 0) + int(v)
        store.checkpoint()
        maintenance += time.perf_counter() - a
    finally:
        store.close()
    return History(
        path=path,
        size=size,
        samples=stored + vectorised,
        cycles=cycles,
        simulate_s=simulate,
        ingest_s=ingest,
        maintenance_s=maintenance,
        maintenance=counts,
        file_bytes=path.stat().st_size,
        built_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        build_s=time.perf_counter() - began,
        vectorised_samples=vectorised,
        vectorised_s=vectorised_s,
    )


@functools.cache
def _digest() -> str:
    """Of the code as this process first saw it: an edit during a run rebuilds nothing."""
    h = hashlib.sha256()
    for name in _SOURCES:
        p = REPO / name
        h.update(p.read_bytes() if p.is_file() else b"-")
    return h.hexdigest()[:12]


def cache_dir() -> Path:
    return Path(os.environ.get("GPUSCOPE_BENCH_CACHE") or tempfile.gettempdir()) / (
        "gpuscope-bench-history"
    )


def history(size: HistorySize, *, cache: bool = True) -> History:
    """``size``'s history, built now or (``cache``) earlier by the same code."""
    folder = cache_dir() / f"{size.key()}-{_digest()}"
    meta = folder / "history.json"
    if cache and meta.is_file():
        saved = json.loads(meta.read_text())
        saved["path"], saved["size"] = Path(saved["path"]), HistorySize(**saved["size"])
        built = History(**saved)
        if built.path.is_file():
            return built
    folder.mkdir(parents=True, exist_ok=True)
    # built under a name of this process's own, then renamed: two runs building the same
    # size at once never write one file
    work = folder / f"building-{os.getpid()}.duckdb"
    for stale in (work, work.with_name(work.name + ".wal")):
        stale.unlink(missing_ok=True)
    print(f"building history {size.label()} through the ingest path", file=sys.stderr)
    built = build(size, work)
    final = folder / "history.duckdb"
    os.replace(work, final)
    built = replace(built, path=final)
    doc: dict[str, Any] = asdict(built) | {"path": str(final)}
    tmp_meta = meta.with_name(f"history-{os.getpid()}.json")
    tmp_meta.write_text(json.dumps(doc, indent=1))
    os.replace(tmp_meta, meta)
    return built


def rows_between(
    store: Store, table: str, metrics: tuple[str, ...], lo: datetime, hi: datetime
) -> int:
    """Rows of ``table`` (samples, samples_5m, samples_1h) for series of ``metrics`` with
    ``lo <= time < hi``: what a figure says it read."""
    column = {"samples": "ts", "samples_5m": "bucket", "samples_1h": "bucket"}[table]
    sql = (
        f"SELECT count(*) FROM {table} AS s JOIN series USING (series_id) "
        f"WHERE series.metric IN (SELECT unnest($metrics)) AND s.{column} >= $lo "
        f"AND s.{column} < $hi"
    )
    naive = {
        "lo": lo.astimezone(UTC).replace(tzinfo=None),
        "hi": hi.astimezone(UTC).replace(tzinfo=None),
    }
    cur = store.cursor()
    try:
        row = cur.execute(sql, {"metrics": list(metrics)} | naive).fetchone()
    finally:
        cur.close()
    return int(row[0]) if row else 0

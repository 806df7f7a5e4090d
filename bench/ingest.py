"""Benchmark: the collector's ingest as a user runs it, scrape over HTTP to committed rows.

Loopback agents (one port per node, in a process of their own) serve pages rendered by the
agent's own exposition: the simulated source's 8 GPUs and their workloads, and 8
InfiniBand ports read from a generated mlx5 sysfs tree (bench/sysfs_tree.py), ~67 series
per GPU. Values move from one scrape to the next (a few rendered variants per node, served
in turn). The collector side is the product's own parts, assembled as the service does:
the per-target scrape loops (gpuscope/collector/scraping/scrape_loop.py) fetch every page over HTTP,
parse and check it, and the writer thread stores the groups through ``IngestWriter`` into a DuckDB
file.

A cycle is measured from its tick (every target's scrape starts on it) to the commit of its
last sample; samples committed over that wall time is the cycle's throughput. Reported:
min/median/p99 of the cycles after two warm-up cycles (the first creates the series), and,
from the same cycles, the parse (fetched page to checked batch) and store
(``Store.append_cycle``) parts as samples over the wall time spent in each, plus the
collector process's CPU per sample. Sizes: 1,000 GPUs a cycle (125 targets x 8 GPUs) at a
2 s interval by default; ``--gpus 10000 --interval 15`` is the opt-in large size at the
real interval (takes minutes).

Run: .venv/bin/python bench/ingest.py [--quick] [--gpus N] [--interval S] [--cycles N]
(or `python -m bench --only ingest`)
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from asyncio import StreamReader, StreamWriter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.registry import CollectorRegistry

from bench.figure import Figure, print_figures
from bench.sysfs_tree import write_tree
from gpuscope.agent.devices.infiniband import SysfsIbSource
from gpuscope.agent.devices.sim import SimAttributor, SimGpuSource
from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.agent.serving.textformat import generate_text
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.ingest import IngestWriter
from gpuscope.collector.scraping.limits import IngestLimits
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.scrape import Scraper
from gpuscope.collector.scraping.scrape_loop import ScrapeLoop
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.sim import SimulatedCluster, default_scenario

VARIANTS = 3  # pages per node, served in turn, so values change from scrape to scrape
WARMUP = 2  # cycles left out: the first creates the series, the second warms the caches
GPUS_PER_NODE = 8


# -- the agents' side ------------------------------------------------------------------------
def _advance_ib_counters(root: Path, step: int) -> None:
    """Move the tree's traffic counters on, as a busy port's would between scrapes."""
    for path in root.glob("class/infiniband/*/ports/1/counters/*"):
        if "data" in path.name or "packets" in path.name or path.name == "port_xmit_wait":
            path.write_text(f"{int(path.read_text()) + step * 7_919_000_003}\n")


def render_pages(nodes: int, workdir: Path) -> list[list[bytes]]:
    """``VARIANTS`` pages per node, ``[node][variant]``, by the agent's own exposition."""
    cluster = SimulatedCluster(default_scenario(nodes=nodes))
    tree = write_tree(workdir / "sysfs")
    pages: list[list[bytes]] = [[] for _ in cluster.node_names]
    for v in range(VARIANTS):
        _advance_ib_counters(tree, v)
        for i, node in enumerate(cluster.node_names):
            clock = lambda at=3600.0 + 15 * v: at  # noqa: E731
            collector = AgentCollector(
                node,
                SimGpuSource(cluster, node, clock),
                SysfsIbSource(tree),
                SimAttributor(cluster, node, clock),
            )
            registry = CollectorRegistry(auto_describe=False)
            registry.register(collector)
            pages[i].append(generate_text(registry))
            collector.close()
    return pages


async def _serve(pages: list[list[bytes]], conn: Connection) -> None:
    """One loopback port per node; each request gets the node's next page (keep-alive)."""

    def handler(variants: list[bytes]) -> Callable[[StreamReader, StreamWriter], Awaitable[None]]:
        served = 0

        async def handle(reader: StreamReader, writer: StreamWriter) -> None:
            nonlocal served
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    if not head.startswith(b"GET /metrics"):
                        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                        continue
                    body = variants[served % len(variants)]
                    served += 1
                    writer.write(
                        b"HTTP/1.1 200 OK\r\n"
                        b"Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(body) + body
                    )
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                writer.close()

        return handle

    servers = [await asyncio.start_server(handler(p), "127.0.0.1", 0) for p in pages]
    conn.send([s.sockets[0].getsockname()[1] for s in servers])
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # until told to stop


def serve_pages(pages: list[list[bytes]], conn: Connection) -> None:
    asyncio.run(_serve(pages, conn))


# -- the collector's side --------------------------------------------------------------------
@dataclass
class Cycle:
    """What one tick's scrapes came to."""

    samples: int = 0
    targets: int = 0
    down: int = 0
    last_commit: float = 0.0
    parse_s: float = 0.0
    store_s: float = 0.0


@dataclass
class Tally:
    """Per-cycle figures, filled in by the scraper (parse) and writer (store) threads."""

    interval: int
    cycles: dict[int, Cycle] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def cycle(self, started: float) -> Cycle:
        with self.lock:
            return self.cycles.setdefault(self.tick(started), Cycle())

    def tick(self, started: float) -> int:
        """The tick a scrape that started at ``started`` belongs to (late ones included)."""
        return math.floor(started / self.interval) * self.interval


class TimedScraper(Scraper):
    """The product's scraper; the wall time of each page's parse-and-check is tallied."""

    tally: Tally

    def _ingest_locked(
        self, target: Target, body: bytes, started: float
    ) -> tuple[ScrapeOutcome, float, float]:
        # both lanes end here: a small page is parsed in the event loop without _ingest
        t0 = time.perf_counter()
        try:
            return super()._ingest_locked(target, body, started)
        finally:
            self.tally.cycle(started).parse_s += time.perf_counter() - t0


class TimedStore(Store):
    """The product's store; the wall time of each cycle's transaction is tallied."""

    tally: Tally

    def append_cycle(
        self,
        batches: Sequence[tuple[Batch, float]],
        down: Sequence[tuple[str, float, float, str]] = (),
        *,
        meta: Mapping[str, str] | None = None,
    ) -> list[int]:
        t0 = time.perf_counter()
        try:
            return super().append_cycle(batches, down, meta=meta)
        finally:
            if batches:
                self.tally.cycle(batches[0][0].ts_ms / 1000).store_s += time.perf_counter() - t0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def spread(values: Sequence[float], *, rate: bool = False) -> str:
    """Per-cycle values for a figure's notes: ``min / median / p99`` of a time or cost; of a
    rate, where the worst is the lowest, ``p1 / median / max`` (p1: the rate of the p99
    cycle)."""
    med = statistics.median(values)
    if rate:
        return f"p1 {percentile(values, 1):.3g}, median {med:.3g}, max {max(values):.3g}"
    return f"min {min(values):.3g}, median {med:.3g}, p99 {percentile(values, 99):.3g}"


def measure(gpus: int, cycles: int, interval: int, workdir: Path) -> dict[str, object]:
    nodes = gpus // GPUS_PER_NODE
    pages = render_pages(nodes, workdir)
    series = [p[0].count(b"\n") - p[0].count(b"\n#") for p in pages]
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.get_context("fork").Process(
        target=serve_pages, args=(pages, child), daemon=True
    )
    server.start()
    del pages
    ports: list[int] = parent.recv()
    tally = Tally(interval)
    store = TimedStore.open(workdir / f"ingest-{gpus}.duckdb")
    assert isinstance(store, TimedStore)
    store.tally = tally
    limits = IngestLimits()
    scraper = TimedScraper(timeout_seconds=min(interval * 0.8, 10.0), limits=limits)
    scraper.tally = tally
    targets = TargetRegistry([Target(f"http://127.0.0.1:{p}/metrics") for p in ports])
    writer = IngestWriter(store, targets, CollectorMetrics(), limits)
    fatal: list[str] = []
    cpu: dict[int, float] = {}

    def write(outcomes: Sequence[ScrapeOutcome]) -> int:
        stored = writer.write(outcomes)
        done = time.time()
        c = tally.cycle(outcomes[0].started_at)
        with tally.lock:
            c.samples += stored
            c.targets += len(outcomes)
            c.down += sum(not o.up for o in outcomes)
            c.last_commit = max(c.last_commit, done)
            cpu[tally.tick(outcomes[0].started_at)] = time.process_time()
        return stored

    loop = ScrapeLoop(scraper, targets.targets, write, interval, on_fatal=fatal.append)
    try:
        loop.start()
        deadline = time.monotonic() + (cycles + WARMUP + 2) * interval + 60
        while time.monotonic() < deadline and not fatal:
            time.sleep(interval / 4)
            with tally.lock:
                done = [t for t, c in tally.cycles.items() if c.targets >= nodes]
            if len(done) >= cycles + WARMUP + 1:  # one more: its tick closes the last one
                break
    finally:
        loop.stop()
        parent.send("stop")
        server.join(5)
        if server.is_alive():
            server.terminate()
    with store:
        stored_rows = store.samples_stored()
    if fatal:
        raise RuntimeError(fatal[0])
    ticks = sorted(t for t, c in tally.cycles.items() if c.targets >= nodes)
    measured = ticks[WARMUP : WARMUP + cycles]
    if len(measured) < max(cycles // 2, 1):
        raise RuntimeError(f"only {len(measured)} whole cycles in time (of {cycles})")
    rows = [tally.cycles[t] for t in measured]
    down = sum(c.down for c in rows)
    # CPU from the previous cycle's last commit to this one's
    cpu_s = [cpu[t] - cpu[ticks[ticks.index(t) - 1]] for t in measured]
    return {
        "series_per_cycle": sum(series),
        "series_per_gpu": sum(series) / gpus,
        "cycles": len(rows),
        "down": down,
        "stored_rows": stored_rows,
        "samples": [c.samples for c in rows],
        "wall_s": [c.last_commit - t for t, c in zip(measured, rows, strict=True)],
        "rate": [c.samples / (c.last_commit - t) for t, c in zip(measured, rows, strict=True)],
        "parse_rate": [c.samples / c.parse_s for c in rows],
        "store_rate": [c.samples / c.store_s for c in rows],
        "cpu_us_per_sample": [s / c.samples * 1e6 for s, c in zip(cpu_s, rows, strict=True)],
    }


def figures_for(gpus: int, interval: int, r: dict[str, object], key: bool) -> list[Figure]:
    def col(name: str) -> list[float]:
        values = r[name]
        assert isinstance(values, list)
        return [float(v) for v in values]

    rate = [v / 1e6 for v in col("rate")]
    nodes = gpus // GPUS_PER_NODE
    size = f"{gpus:,} GPUs a cycle ({nodes} targets x 8 GPUs, {r['series_per_cycle']:,} series)"
    base = (
        f"{r['cycles']} cycles at a {interval} s interval after {WARMUP} warm-up; "
        f"{r['down']} target scrapes down"
    )
    parse = [v / 1e6 for v in col("parse_rate")]
    store = [v / 1e6 for v in col("store_rate")]
    cpu = col("cpu_us_per_sample")
    return [
        Figure(
            f"ingest end to end, HTTP scrape to committed DuckDB rows, {size}",
            statistics.median(rate),
            "M samples/s",
            aim="≥ 0.5 M samples/s" if key else None,
            notes=f"median of per-cycle samples / (tick to last commit), M samples/s: "
            f"{spread(rate, rate=True)}; {base}",
            key=key,
        ),
        Figure(
            "same: parse alone (page to checked batch, wall time in the parser thread)",
            statistics.median(parse),
            "M samples/s",
            notes=spread(parse, rate=True),
        ),
        Figure(
            "same: store alone (Store.append_cycle, wall time)",
            statistics.median(store),
            "M samples/s",
            notes=spread(store, rate=True),
        ),
        Figure(
            "same: one cycle, tick to last commit",
            statistics.median(col("wall_s")),
            "s",
            notes=spread(col("wall_s")),
        ),
        Figure(
            "same: collector process CPU per sample (all its threads)",
            statistics.median(cpu) if cpu else float("nan"),
            "µs",
            notes=spread(cpu) if cpu else "",
        ),
    ]


def run(
    quick: bool = False,
    gpus: int | None = None,
    interval: int | None = None,
    cycles: int | None = None,
) -> list[Figure]:
    """1,000 GPUs a cycle, 15 cycles at 2 s (quick: 128 GPUs, 4 cycles at 1 s)."""
    gpus = gpus or (128 if quick else 1000)
    interval = interval or (1 if quick else 2)
    cycles = cycles or (4 if quick else 15)
    with tempfile.TemporaryDirectory(prefix="gpuscope-ingest-") as tmp:
        r = measure(gpus, cycles, interval, Path(tmp))
    return figures_for(gpus, interval, r, key=gpus == 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpus", type=int, help="GPUs a cycle, 8 per target (default 1000)")
    ap.add_argument("--interval", type=int, help="scrape interval, whole seconds (default 2)")
    ap.add_argument("--cycles", type=int, help="measured cycles (default 15)")
    a = ap.parse_args()
    if a.gpus is not None and (a.gpus < 48 or a.gpus % GPUS_PER_NODE):
        ap.error("--gpus must be a multiple of 8, at least 48 (the default scenario's 6 nodes)")
    print_figures(run(a.quick, a.gpus, a.interval, a.cycles))


if __name__ == "__main__":
    main()

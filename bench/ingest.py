"""Benchmark: exposition text to committed DuckDB rows, end to end, as the collector does it.

Simulated agents' pages (the real agent exposition of the simulator's nodes, 8 GPUs each,
~300 series a page) go through the collector's own path: the purpose-built parser,
batches with their labels, and one transaction per scrape cycle (``Store.append_cycle``).
Reported for 1,000 and 10,000 GPUs' worth of pages per cycle: samples/s end to end, and
the parse and store shares. No HTTP: that is the agents' cost, measured in agent_scrape.py.

Run: .venv/bin/python bench/ingest.py [--quick]  (or `python -m bench --only ingest`)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client.registry import CollectorRegistry

from agent.exposition import AgentCollector
from agent.sim import SimAttributor, SimGpuSource, SimIbSource
from agent.textformat import generate_text
from bench.figure import Figure, print_figures
from collector.scrape import Target, TargetCache, page_to_outcome
from collector.store import Store
from gpuscope.sim import SimulatedCluster, default_scenario

VARIANTS = 3  # distinct page sets, so values change from cycle to cycle


def pages_for(gpus: int) -> list[list[tuple[Target, bytes]]]:
    nodes = gpus // 8
    cluster = SimulatedCluster(default_scenario(nodes=nodes))
    out: list[list[tuple[Target, bytes]]] = []
    for v in range(VARIANTS):
        at = 3600.0 + 15 * v
        page_set = []
        for i, node in enumerate(cluster.node_names):
            clock = lambda at=at: at  # noqa: E731
            collector = AgentCollector(
                node,
                SimGpuSource(cluster, node, clock),
                SimIbSource(cluster, node, clock),
                SimAttributor(cluster, node, clock),
            )
            registry = CollectorRegistry(auto_describe=False)
            registry.register(collector)
            page_set.append(
                (Target(f"http://10.0.{i // 250}.{i % 250}:9835/metrics"), generate_text(registry))
            )
            collector.close()
        out.append(page_set)
    return out


def measure(gpus: int, cycles: int, workdir: Path) -> dict[str, float]:
    page_sets = pages_for(gpus)
    series = sum(p.count(b"\n") - p.count(b"\n#") for _, p in page_sets[0])
    parse_s = store_s = 0.0
    samples = 0
    t0 = 1_800_000_000.0
    with Store.open(workdir / f"ingest-{gpus}.duckdb") as store:
        # one warm-up cycle creates the series, as a running collector has long done
        caches = {t.url: TargetCache() for t, _ in page_sets[0]}  # the scraper keeps one each
        warm = [page_to_outcome(t, p, t0, cache=caches[t.url]) for t, p in page_sets[0]]
        store.append_cycle([(o.batch, 0.0) for o in warm if o.batch is not None])
        for c in range(1, cycles + 1):
            started = t0 + 15 * c
            a = time.perf_counter()
            outcomes = [
                page_to_outcome(t, p, started, cache=caches[t.url])
                for t, p in page_sets[c % VARIANTS]
            ]
            b = time.perf_counter()
            counts = store.append_cycle([(o.batch, 0.0) for o in outcomes if o.batch is not None])
            d = time.perf_counter()
            parse_s += b - a
            store_s += d - b
            samples += sum(counts)
    total = parse_s + store_s
    return {
        "series_per_cycle": series,
        "samples_per_s": samples / total,
        "parse_samples_per_s": samples / parse_s,
        "store_samples_per_s": samples / store_s,
        "cycle_s": total / cycles,
    }


def run(quick: bool = False) -> list[Figure]:
    """End-to-end ingest at 1,000 and 10,000 GPUs a cycle (quick: 80 GPUs, 2 cycles)."""
    sizes, cycles = ((80,), 2) if quick else ((1000, 10_000), 6)
    figures = []
    with tempfile.TemporaryDirectory(prefix="gpuscope-ingest-") as tmp:
        for gpus in sizes:
            r = measure(gpus, cycles, Path(tmp))
            first = gpus == sizes[0]
            figures += [
                Figure(
                    f"ingest end to end, exposition text to committed rows, {gpus:,} GPUs a cycle",
                    r["samples_per_s"] / 1e6,
                    "M samples/s",
                    aim="≥ 0.5 M samples/s" if first else None,
                    notes=f"{r['series_per_cycle']:,.0f} series; {cycles} cycles",
                    key=True,
                ),
                Figure("same: parse alone", r["parse_samples_per_s"] / 1e6, "M samples/s"),
                Figure("same: store alone", r["store_samples_per_s"] / 1e6, "M samples/s"),
                Figure("same: one cycle", r["cycle_s"], "s"),
            ]
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    print_figures(run(ap.parse_args().quick))


if __name__ == "__main__":
    main()

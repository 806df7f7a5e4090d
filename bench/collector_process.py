"""Benchmark: `gpuscope collector` beside Prometheus on the same agent processes, as users run.

N separate `gpuscope agent --gpu-source sim` processes (one per simulated node: 8 GPUs with
their workloads; no InfiniBand tree) serve their pages on loopback. A `gpuscope collector`
process and a real Prometheus (the Debian package) scrape the same agents at the same
interval in the same window, twice, each time both fresh: first both as shipped (the
collector's hourly maintenance and Prometheus's 2-hour blocks, which a window of minutes
does not reach, as in most minutes of a real hour), then the day scaled down alike (below).
Measured over each window after a warm-up:

- CPU per stored sample: each server process's CPU (utime + stime of every thread, from
  /proc) over the window, divided by the samples it stored in that window (the
  collector's ``samples_stored`` from /api/v1/status; Prometheus's
  ``prometheus_tsdb_head_samples_appended_total``); the aim's row is the first window's,
  the second's (a file of minutes rewritten and compacted every minute) is a row of its
  own;
- bytes per stored sample on disk, as each leaves its files while it runs (no offline
  rewrite, nothing called on the files from here): the collector's DuckDB file (and WAL)
  over its stored samples, after its own maintenance (compaction of the closed segments
  of the day being written, the file rewritten without free blocks), which its schedule
  runs; beside Prometheus's blocks over the samples in them (each block's meta.json), and
  its whole data folder (WAL, head chunks and blocks) over its appended samples. A day
  does not fit in a benchmark, so both are scaled down alike and the figure says so (the
  window is twelve segments, a day at this scale; the UTC day itself does not close): the
  collector's segment (``compact_segment_seconds``, two hours by default) is ``--segment``
  seconds and its maintenance runs twice a segment (``maintenance_interval_seconds``,
  hourly by default), waits a 120th of a segment for late batches
  (``late_batch_seconds``, 60 by default) and leaves the last 39/72 of a segment as
  scraped (``compact_recent_seconds``, 65 minutes by default), and Prometheus cuts
  blocks of the segment's length (its hidden ``--storage.tsdb.min-block-duration``, 2 h
  by default, and ``max-block-duration`` three times it, so it also merges blocks once);
- the ticks each accounted for: the collector's status (scrapes, failures, skipped) per
  target against the ticks of the first window.

With ``--sizes 8,16``, then on the first 8 and the first 16 of the same agents, both
servers fresh and as shipped, a 2-minute window each: the CPU per stored sample at each
size (bench/collector_sizes.py measures 8, 16 and 32 so, as a benchmark of its own).

Run: .venv/bin/python bench/collector_process.py [--quick] [--agents N] [--interval S]
[--seconds S] [--segment S] [--sizes 8,16] (or `python -m bench --only collector_process`).
The default (32 agents, 5 s, a window of 300 s as shipped, then a day scaled down: 120 s
segments and blocks for two hours, so 1,440 s for the day) takes about 35 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import yaml

from bench.figure import Figure, Reference, print_figures
from bench.processes import free_port, process

TICKS = os.sysconf("SC_CLK_TCK")
#: Two-hour segments make a day; the scaled-down window is as many scaled segments.
DAY_SEGMENTS = 12


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (every thread), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def prometheus_appended(base: str) -> float:
    """Samples Prometheus appended to its head, from its own /metrics (not scraped)."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("prometheus_tsdb_head_samples_appended_total")
    )


def ticks_between(first: float, last: float, interval: float) -> int:
    """Ticks from the first scrape (at once, on a whole second) to the last (a multiple of
    the interval), both included."""
    return 1 + round(last / interval) - math.floor(first / interval + 1e-9)


def prometheus_blocks(data: Path) -> tuple[int, int, int]:
    """Prometheus's blocks in its data folder: (bytes, samples, blocks), from each block's
    files and its meta.json (``stats.numSamples``)."""
    size = samples = count = 0
    for meta in data.glob("*/meta.json"):
        block = meta.parent
        if block.name.startswith(("wal", "chunks_head")) or block.name.endswith(".tmp"):
            continue
        size += folder_bytes(block)
        samples += int(json.loads(meta.read_text())["stats"]["numSamples"])
        count += 1
    return size, samples, count


def collector_status(base: str) -> dict[str, Any]:
    return httpx.get(f"{base}/api/v1/status", timeout=30).json()  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Phase:
    """One window of both servers on the same agents, and what each used and left."""

    elapsed: float
    c_cpu: float
    c_samples: int
    p_cpu: float
    p_samples: float
    c_total: int
    p_total: float
    c_file: int
    c_bytes: int
    p_bytes: int
    blocks: tuple[int, int, int]
    status: dict[str, Any]


def phase(root: Path, urls: list[str], step: float, window: float, seg: int | None) -> Phase | None:
    """A fresh collector and a fresh Prometheus scrape ``urls`` for ``window`` seconds after
    a warm-up. ``seg`` None: both as shipped (the collector's hourly maintenance and
    Prometheus's 2-hour blocks, which a window of minutes does not reach); else the day
    scaled down alike (module docstring). None when Prometheus is not installed."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        return None
    root.mkdir()
    with ExitStack() as stack:
        cport, pport = free_port(), free_port()
        cbase, pbase = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{pport}"
        db, pdata = root / "collector.duckdb", root / "prometheus"
        config = root / "collector.yaml"
        settings = {} if seg is None else {
            "compact_segment_seconds": seg, "maintenance_interval_seconds": seg // 2,
            "compact_recent_seconds": seg * 3900 // 7200,
            "late_batch_seconds": max(1, round(seg / 120)),
        }  # fmt: skip
        config.write_text(yaml.safe_dump({"collector": settings}))
        cmd = [sys.executable, "-m", "gpuscope.cli.main", "collector", "--db", str(db),
               "--config", str(config),
               "--listen", f"127.0.0.1:{cport}", "--scrape-interval", f"{step:g}",
               "--kubernetes", "none", "--log-level", "WARNING"]  # fmt: skip
        for url in urls:
            cmd += ["--target", url]
        collector = stack.enter_context(process(cmd, cbase + "/healthz"))
        cfg = root / "prometheus.yml"
        cfg.write_text(
            yaml.safe_dump({
                "global": {"scrape_interval": f"{step:g}s"},
                "scrape_configs": [{
                    "job_name": "agents",
                    "static_configs": [{"targets": [u.split("/")[2] for u in urls]}],
                }],
            })
        )  # fmt: skip
        blocks = (
            []
            if seg is None
            else [
                f"--storage.tsdb.min-block-duration={seg}s",
                f"--storage.tsdb.max-block-duration={3 * seg}s",
            ]
        )
        prom = stack.enter_context(
            process(
                [prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={pdata}",
                 f"--web.listen-address=127.0.0.1:{pport}", *blocks],
                pbase + "/-/ready",
            )
        )  # fmt: skip
        time.sleep(max(4 * step, 10.0))  # warm-up: series created, caches filled
        c_cpu0, c_samples0 = cpu_seconds(collector.pid), collector_status(cbase)["samples_stored"]
        p_cpu0, p_samples0 = cpu_seconds(prom.pid), prometheus_appended(pbase)
        t0 = time.monotonic()
        time.sleep(window)
        elapsed = time.monotonic() - t0
        c_cpu = cpu_seconds(collector.pid) - c_cpu0
        status = collector_status(cbase)
        p_cpu = cpu_seconds(prom.pid) - p_cpu0
        p_total = prometheus_appended(pbase)
        return Phase(
            elapsed=elapsed,
            c_cpu=c_cpu,
            c_samples=status["samples_stored"] - c_samples0,
            p_cpu=p_cpu,
            p_samples=p_total - p_samples0,
            c_total=status["samples_stored"],
            p_total=p_total,
            c_file=db.stat().st_size,
            c_bytes=sum(p.stat().st_size for p in root.glob("collector.duckdb*")),
            p_bytes=folder_bytes(pdata),
            blocks=prometheus_blocks(pdata),
            status=status,
        )


#: Smaller clusters measured too, each in a short window of its own (``--sizes``; none
#: by default: bench/collector_sizes.py measures them).
SIZES: tuple[int, ...] = ()
SIZE_WINDOW_S = 120.0


def run(
    quick: bool = False,
    agents: int | None = None,
    interval: float | None = None,
    seconds: float | None = None,
    segment: int | None = None,
    sizes: tuple[int, ...] | None = None,
) -> list[Figure]:
    n = agents or (4 if quick else 32)
    step = interval or (2.0 if quick else 5.0)
    window = seconds or (20.0 if quick else 300.0)
    seg = segment or (10 if quick else 120)
    small = tuple(s for s in (sizes if sizes is not None else (() if quick else SIZES)) if s < n)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        root = Path(tmp)
        urls = sim_agents(stack, n)
        shipped = phase(root / "shipped", urls, step, window, None)
        scaled = phase(root / "scaled", urls, step, DAY_SEGMENTS * seg, seg)  # a day, scaled
        # the first k of the same agents, both servers fresh, a 2-minute window each
        by_size = {
            k: phase(root / f"agents-{k}", urls[:k], step, 20.0 if quick else SIZE_WINDOW_S, None)
            for k in small
        }
    if shipped is None or scaled is None:
        return [
            Figure(
                "collector process beside Prometheus",
                0.0,
                "",
                reference=Reference.not_installed("Prometheus"),
            )
        ]
    rows = figures(n, step, seg, shipped, scaled)
    return rows + [
        size_figure(k, step, ph, f"the first {k} of the run's agents, as shipped")
        for k, ph in by_size.items()
        if ph is not None
    ]


def sim_agents(stack: ExitStack, n: int) -> list[str]:
    """``n`` `gpuscope agent --gpu-source sim` processes on loopback (simulated nodes
    gpu-node-00..31, 8 GPUs each), kept running until ``stack`` closes; their page URLs."""
    urls = []
    for i in range(n):
        port = free_port()
        url = f"http://127.0.0.1:{port}/metrics"
        stack.enter_context(
            process(
                [sys.executable, "-m", "gpuscope.cli.main", "agent", "--gpu-source", "sim",
                 "--node", f"gpu-node-{i % 32:02d}", "--listen", f"127.0.0.1:{port}",
                 "--log-level", "WARNING"],
                url,
            )
        )  # fmt: skip
        urls.append(url)
    return urls


def size_figure(n: int, step: float, ph: Phase, what: str) -> Figure:
    """CPU per stored sample at ``n`` agents in the window of ``ph``, beside Prometheus on
    the same agents in the same run (``what``: how the window was taken)."""
    return Figure(
        f"collector process, CPU per stored sample at {n} agents, {ph.elapsed:.0f} s window",
        ph.c_cpu / max(ph.c_samples, 1) * 1e6,
        "µs",
        aim="≤ 1.0x Prometheus's",
        reference=Reference(
            f"Prometheus, same {n} agents", ph.p_cpu / max(ph.p_samples, 1) * 1e6, "µs"
        ),
        notes=f"{n} agent processes x 8 simulated GPUs at {step:g} s, both servers fresh, "
        f"{what}, in the same run on "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end; "
        f"collector {ph.c_cpu:.1f} s CPU for {ph.c_samples:,} samples, Prometheus "
        f"{ph.p_cpu:.1f} s for {ph.p_samples:,.0f}",
    )


def figures(n: int, step: float, seg: int, shipped: Phase, scaled: Phase) -> list[Figure]:
    """The rows: CPU and ticks from the settings as shipped, the file (and CPU again) from
    the scaled-down day."""

    def where(ph: Phase) -> str:
        return (
            f"{n} agent processes x 8 simulated GPUs at {step:g} s, {ph.elapsed:.0f} s window; "
            f"both servers in the same run on {os.cpu_count()} cores"
        )

    def cpu_note(ph: Phase) -> str:
        return (
            f"collector {ph.c_cpu:.1f} s CPU for {ph.c_samples:,} samples, "
            f"Prometheus {ph.p_cpu:.1f} s for {ph.p_samples:,.0f}"
        )

    def us(cpu: float, samples: float) -> float:
        return cpu / max(samples, 1) * 1e6

    targets = shipped.status["targets"]
    ticks_ok = sum(
        1
        for t in targets
        if t["first_tick"] is not None
        and ticks_between(t["first_tick"], t["last_tick"], step) == t["scrapes"] + t["skipped"]
    )
    skipped = sum(t["skipped"] for t in targets)
    failures = sum(t["failures"] for t in targets)
    scrapes = sum(t["scrapes"] for t in targets)
    b_bytes, b_samples, b_count = scaled.blocks
    rewrites = scaled.status["ingest"]["database"]
    return [
        Figure(
            "collector process, CPU per stored sample, both servers as shipped",
            us(shipped.c_cpu, shipped.c_samples),
            "µs",
            aim="≤ 1.0x Prometheus's",
            reference=Reference(
                "Prometheus, same agents", us(shipped.p_cpu, shipped.p_samples), "µs"
            ),
            notes=f"{where(shipped)}; neither's maintenance falls in the window (the "
            "collector's is hourly, Prometheus cuts 2-hour blocks): its cost a sample over a "
            f"day is bench/store.py's maintenance row; {cpu_note(shipped)}",
            key=True,
        ),
        Figure(
            "same, the day scaled down (maintenance in the window)",
            us(scaled.c_cpu, scaled.c_samples),
            "µs",
            reference=Reference(
                "Prometheus, same agents, blocks cut in the window",
                us(scaled.p_cpu, scaled.p_samples),
                "µs",
            ),
            notes=f"{where(scaled)}; the collector's roll-ups, compaction and "
            f"{rewrites['rewrites']} file rewrites every {seg // 2} s on a file of minutes, "
            f"Prometheus's blocks at {seg} s; {cpu_note(scaled)}",
        ),
        Figure(
            "collector file, bytes per stored sample as the running collector leaves it",
            scaled.c_file / max(scaled.c_total, 1),
            "B",
            aim="≤ 0.8x Prometheus's",
            reference=Reference(
                f"Prometheus blocks ({b_count}, same scrapes)", b_bytes / max(b_samples, 1), "B"
            ),
            notes=f"a day scaled down ({DAY_SEGMENTS} segments, {scaled.elapsed:.0f} s; the "
            "collector's day prefix compacted as one run every third segment): collector "
            f"segments of {seg} s, its maintenance every "
            f"{seg // 2} s and waits {max(1, round(seg / 120))} s for late batches (the "
            "defaults' ratios: 2 h, hourly, 60 s), "
            f"Prometheus min/max block {seg}/{3 * seg} s; collector file "
            f"{scaled.c_file / 1e6:.1f} MB for {scaled.c_total:,} samples after "
            f"{rewrites['rewrites']} rewrites by itself "
            f"({rewrites['writes_waited_for_rewrite']} writes waited); Prometheus blocks "
            f"{b_bytes / 1e6:.1f} MB for {b_samples:,} samples",
            key=True,
        ),
        Figure(
            "same, with the write-ahead logs: the collector's file + WAL, Prometheus's folder",
            scaled.c_bytes / max(scaled.c_total, 1),
            "B",
            reference=Reference(
                "Prometheus data folder (WAL + head + blocks)",
                scaled.p_bytes / max(scaled.p_total, 1),
                "B",
            ),
            notes=f"collector {scaled.c_bytes / 1e6:.1f} MB (WAL "
            f"{(scaled.c_bytes - scaled.c_file) / 1e6:.1f} MB, checkpointed by DuckDB at 16 MB "
            f"and at each maintenance) for {scaled.c_total:,} samples; Prometheus "
            f"{scaled.p_bytes / 1e6:.1f} MB for {scaled.p_total:,.0f}",
        ),
        Figure(
            "targets whose every tick is accounted for (scrape, failure or skip)",
            float(ticks_ok),
            f"of {len(targets)}",
            aim="all",
            notes=f"settings as shipped: {scrapes:,} scrapes, {failures} failed, "
            f"{skipped} ticks skipped",
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 agents, 2 s, 20 s")
    ap.add_argument("--agents", type=int, default=None)
    ap.add_argument("--interval", type=float, default=None)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--segment", type=int, default=None, help="segment and block seconds")
    ap.add_argument(
        "--sizes",
        default=None,
        help="smaller agent counts measured too, comma-separated, a 2-minute window each "
        f"(default {','.join(map(str, SIZES)) or 'none'})",
    )
    args = ap.parse_args()
    sizes = None if args.sizes is None else tuple(int(s) for s in args.sizes.split(",") if s)
    print_figures(run(args.quick, args.agents, args.interval, args.seconds, args.segment, sizes))


if __name__ == "__main__":
    main()

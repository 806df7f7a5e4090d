"""Benchmark: ``gpuscope demo`` as a newcomer runs it, timed from outside.

Runs the real CLI (``python -m gpuscope.cli.main demo --out DIR``) as a subprocess, three times
in a row with its defaults (32 nodes, 256 GPUs, 7 days of history every 5 minutes, 25 s of
live scraping), and reports for each figure min/median/max over the runs:

- wall time from start to exit;
- peak memory: each process's own high-water mark (``VmHWM`` in /proc/<pid>/status, kept by
  the kernel, read every 50 ms while the process lives). The aim's figure is what the demo
  holds at once: the largest sum of the resident sets (``VmRSS``) of the CLI and its
  children read together every 50 ms, or the CLI's own high-water mark where that is more
  (a peak of the CLI's between two reads). The history's helper process (its readings,
  gpuscope/demo/readings_process.py) lives only while the history is written, when the
  CLI is far below its peak, so the high-water marks summed (also reported: an upper
  bound, their peaks need not coincide) count memory never held at once. Not
  ``ru_maxrss`` from wait4: Linux folds into it the high-water mark of the memory the child
  had before exec, a copy of this (large) benchmark process;
- the database file's size once the demo has exited.

No reference: nothing else does what the demo does. ``--quick`` runs once with 8 nodes,
one day and 5 s of live scraping, to check the benchmark runs (not figures).
Run: .venv/bin/python bench/demo.py [--quick] [--runs N]  (or `python -m bench --only demo`)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.figure import Figure, print_figures

DB_NAME = "gpuscope.duckdb"
QUICK_ARGS = ["--nodes", "8", "--days", "1", "--seconds", "5"]
RUNS = 3


@dataclass(frozen=True)
class DemoRun:
    wall_s: float
    tree_peak_bytes: int  # per-process high-water marks, summed over the tree
    at_once_bytes: int  # the tree's resident sets summed at each read, at most; >= main's HWM
    main_peak_bytes: int  # the CLI process's high-water mark
    db_bytes: int


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_pids(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def run_demo(out: Path, extra: list[str]) -> DemoRun:
    """One ``gpuscope demo`` into ``out``; raises if it fails."""
    cmd = [sys.executable, "-m", "gpuscope.cli.main", "demo", "--out", str(out), *extra]
    log = out.with_suffix(".stderr")
    with log.open("wb") as err:
        start = time.perf_counter()
        # as scripts/demo runs it: bytecode written, so a run after the first compiles nothing
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        peaks: dict[int, int] = {}
        at_once = 0
        while True:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
            if pid:
                break
            pids = tree_pids(proc.pid)
            at_once = max(at_once, 1024 * sum(_status_kb(p, "VmRSS:") for p in pids))
            for p in pids:
                peaks[p] = max(peaks.get(p, 0), 1024 * _status_kb(p, "VmHWM:"))
            time.sleep(0.05)
        wall = time.perf_counter() - start
    proc.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if code != 0:
        tail = log.read_text(errors="replace")[-500:]
        raise RuntimeError(f"gpuscope demo failed (exit {code}): {tail}")
    db = (out / DB_NAME).stat().st_size
    main = peaks.get(proc.pid, 0)
    return DemoRun(wall, sum(peaks.values()), max(at_once, main), main, db)


def _spread(values: list[float]) -> str:
    return f"min {min(values):.3g}, median {statistics.median(values):.3g}, max {max(values):.3g}"


def run(quick: bool = False, runs: int | None = None) -> list[Figure]:
    """The demo ``runs`` times (3; quick: once, small)."""
    n = runs or (1 if quick else RUNS)
    extra = QUICK_ARGS if quick else []
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        for i in range(n):
            results.append(run_demo(Path(tmp) / f"run{i}", extra))
    size = "8 nodes, 1 day, 5 s live" if quick else "32 nodes (256 GPUs), 7 days, 25 s live"
    walls = [r.wall_s for r in results]
    trees = [r.tree_peak_bytes / 1e6 for r in results]
    at_once = [r.at_once_bytes / 1e6 for r in results]
    mains = [r.main_peak_bytes / 1e6 for r in results]
    dbs = [r.db_bytes / 1e6 for r in results]
    note = f"{n} run(s) in a row, {size}; "
    return [
        Figure(
            "gpuscope demo wall time",
            statistics.median(walls),
            "s",
            aim="≤ 60 s on a quiet 2-core machine",
            notes=note + _spread(walls) + " s",
            key=True,
        ),
        Figure(
            "gpuscope demo peak RSS (the CLI and its children at once)",
            max(at_once),
            "MB",
            aim="≤ 500 MB",
            notes=note + _spread(at_once) + " MB; their VmRSS summed, read every 50 ms, "
            "or the CLI's own VmHWM where more",
            key=True,
        ),
        Figure(
            "gpuscope demo peak RSS, high-water marks summed (the CLI and any child process)",
            max(trees),
            "MB",
            notes=note + _spread(trees) + " MB; VmHWM read every 50 ms; an upper bound: "
            "the history's helper process is gone before the CLI's peak",
        ),
        Figure(
            "gpuscope demo peak RSS of the CLI process alone (VmHWM)",
            max(mains),
            "MB",
            notes=note + _spread(mains) + " MB",
        ),
        Figure(
            "gpuscope demo database size",
            statistics.median(dbs),
            "MB",
            aim="≤ 60 MB",
            notes=note + _spread(dbs) + " MB, the file after the demo exits",
            key=True,
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small run: checks it runs")
    ap.add_argument("--runs", type=int, help=f"runs in a row (default {RUNS}; quick: 1)")
    args = ap.parse_args()
    print_figures(run(args.quick, args.runs))


if __name__ == "__main__":
    main()

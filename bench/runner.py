"""Runs the benchmark modules named in one registry and collects their figures.

Adding a benchmark is one line in :data:`BENCHMARKS`: a module ``bench/<name>.py`` with a
``run(quick: bool = False) -> list[Figure]``. A listed module that is not there yet is
reported as missing, and one that fails is reported with its error; neither stops the rest.
"""

from __future__ import annotations

import gc
import importlib
import logging
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from bench.figure import Figure, ModuleResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Benchmark:
    name: str  # module bench/<name>.py
    area: str  # the README table it belongs to


#: Every benchmark, in the order they run and their areas' tables appear.
BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("agent_scrape", "Agent"),
    Benchmark("parse", "Collector"),
    Benchmark("ingest", "Collector"),
    Benchmark("collector_process", "Collector"),
    Benchmark("collector_sizes", "Collector"),
    Benchmark("analytics_job", "Collector"),
    Benchmark("store", "Collector"),
    Benchmark("api", "Collector"),
    Benchmark("hostile_targets", "Collector"),
    Benchmark("fleet", "Collector"),
    Benchmark("idle", "Analytics"),
    Benchmark("idle_policy", "Analytics"),
    Benchmark("quota_bandwidth", "Analytics"),
    Benchmark("fragmentation", "Analytics"),
    Benchmark("consolidation", "Consolidation planner"),
    Benchmark("report", "Weekly report"),
    Benchmark("whatif", "What-if replay"),
    Benchmark("capacity", "What-if replay"),
    Benchmark("demo", "Demo"),
)

RunFn = Callable[[bool], list[Figure]]


def load(name: str) -> RunFn | None:
    """The module's ``run``, or None if ``bench/<name>.py`` does not exist (yet)."""
    module_name = f"bench.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise
    fn = getattr(module, "run", None)
    if not callable(fn):
        raise TypeError(f"{module_name} has no run(quick) function")
    return fn  # type: ignore[no-any-return]


def run_one(bench: Benchmark, quick: bool) -> ModuleResult:
    start = time.perf_counter()
    try:
        fn = load(bench.name)
        if fn is None:
            return ModuleResult(bench.name, bench.area, "missing", error="module not present")
        figures = fn(quick)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return ModuleResult(
            bench.name,
            bench.area,
            "error",
            seconds=time.perf_counter() - start,
            error=f"{type(exc).__name__}: {exc}",
        )
    finally:
        gc.collect()
    return ModuleResult(
        bench.name, bench.area, "ok", seconds=time.perf_counter() - start,
        figures=tuple(figures), measured=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )  # fmt: skip


def select(only: Iterable[str] | None) -> list[Benchmark]:
    """The registry's benchmarks, or those named (in registry order); unknown names raise."""
    if not only:
        return list(BENCHMARKS)
    wanted = set(only)
    known = {b.name for b in BENCHMARKS}
    unknown = sorted(wanted - known)
    if unknown:
        raise ValueError(
            f"unknown benchmark {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return [b for b in BENCHMARKS if b.name in wanted]


def run_all(
    benchmarks: list[Benchmark],
    quick: bool,
    on_result: Callable[[list[ModuleResult]], None] | None = None,
) -> list[ModuleResult]:
    """Run them in order; ``on_result`` gets the results so far after each one finishes, so
    an interrupted run keeps what it measured (``python -m bench`` writes them there)."""
    results: list[ModuleResult] = []
    for bench in benchmarks:
        print(f"== {bench.name} ({bench.area}){' quick' if quick else ''}", file=sys.stderr)
        result = run_one(bench, quick)
        print(
            f"   {result.status}: {len(result.figures)} figures in {result.seconds:.1f} s"
            + (f" ({result.error})" if result.error else ""),
            file=sys.stderr,
        )
        results.append(result)
        if on_result is not None:
            on_result(list(results))
    return results

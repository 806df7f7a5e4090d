"""The steady-state shortcuts of ingest never change what is stored.

A target's page of the same shape as its last parses to the very same name/label lists,
and relabelling, page checks, churn admission and the store's series ids are reused for
them (gpuscope/collector/scraping/parse.py, scrape.py, limits.py, store.py). Each test feeds the same pages
through the product's path twice, with the per-target caches and without any, and compares
what the two databases hold.
"""

import gc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.scraping.ingest import IngestWriter
from gpuscope.collector.scraping.limits import IngestLimits
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.page_outcome import TargetCache, page_to_outcome
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store

T0 = datetime(2025, 3, 3, 10, 0, 0, tzinfo=UTC).timestamp()
WORKLOAD = (
    'gpuscope_gpu_workload_info{container="main",gpu="0",interactive="true",namespace="ml",'
    'node="n1",pod="nb",uuid="GPU-0",workload_kind="interactive"} '
)


def page(util: str = "0.5", energy: str = "100", info: str = "1", extra: str = "") -> bytes:
    return (
        "# HELP gpuscope_gpu_utilization_ratio GPU utilization.\n"
        "# TYPE gpuscope_gpu_utilization_ratio gauge\n"
        f'gpuscope_gpu_utilization_ratio{{gpu="0",node="n1",uuid="GPU-0"}} {util}\n'
        "# TYPE gpuscope_gpu_energy_joules counter\n"
        f'gpuscope_gpu_energy_joules_total{{gpu="0",node="n1",uuid="GPU-0"}} {energy}\n'
        f"# TYPE gpuscope_gpu_workload_info gauge\n{WORKLOAD}{info}\n"
        f"process_open_fds {util}\n{extra}"
    ).encode()


#: One target's pages, scrape after scrape: steady, a counter reset, NaNs, the workload
#: leaving and coming back with the page's shape unchanged, a new series, a duplicate, a
#: reordered page, and the first page again.
PAGES = [
    page(),
    page("0.6", "110"),
    page("0.7", "120"),
    page("0.7", "5"),  # reset
    page("NaN", "NaN"),
    page("0.2", "30", info="0"),  # the pod leaves: same shape, value 0
    page("0.2", "31", info="0"),
    page("0.3", "32", info="1"),  # and comes back
    page("0.3", "33", extra='gpuscope_gpu_utilization_ratio{gpu="1",node="n1",uuid="GPU-1"} 1\n'),
    page("0.3", "34", extra='gpuscope_gpu_utilization_ratio{gpu="0",node="n1",uuid="GPU-0"} 9\n'),
    page("0.3", "35", extra='gpuscope_gpu_utilization_ratio{gpu="0",node="n1",uuid="GPU-0"} 9\n'),
    b"\n".join(reversed(page("0.4", "36").splitlines())) + b"\n",
    page("0.5", "37"),
    page("0.5", "38"),
]
#: A second target whose page changes shape every scrape (a label value that moves).
OTHER = [
    f'm_ratio{{node="n2",step="{i % 3}"}} {i}\nother_total{{node="n2"}} {i * 10}\n'.encode()
    for i in range(len(PAGES))
]

QUERIES = (
    "SELECT s.metric, CAST(s.labels AS VARCHAR), s.node, s.gpu, x.ts, x.value "
    "FROM samples x JOIN series s USING (series_id) ORDER BY ALL",
    "SELECT metric, kind, CAST(labels AS VARCHAR), first_seen, last_seen, last_raw FROM series "
    "ORDER BY ALL",
    "SELECT target, ts, up, samples, error FROM scrapes ORDER BY ALL",
    "SELECT namespace, pod, start_ts, last_seen, end_ts FROM workload_intervals ORDER BY ALL",
    "SELECT value FROM meta WHERE key = 'samples_stored'",
)


def ingest(
    db: Path, cached: bool, eof: bool = False
) -> list[list[tuple[bool, str, dict[str, int]]]]:
    """Every page through parse, checks, admission and the store; what each scrape gave.
    ``eof``: each page ends in OpenMetrics' `# EOF`, as the agents answer the collector."""
    targets = [Target("http://10.0.0.1:9835/metrics"), Target("http://10.0.0.2:9835/metrics")]
    caches = {t.url: TargetCache() if cached else None for t in targets}
    limits = IngestLimits()
    seen = []
    with Store.open(db) as store:
        writer = IngestWriter(
            store, TargetRegistry(targets), CollectorMetrics(), limits, clock=lambda: T0
        )
        for i, bodies in enumerate(zip(PAGES, OTHER, strict=True)):
            if eof:
                bodies = tuple(b + b"# EOF\n" for b in bodies)  # noqa: PLW2901
            started = T0 + 15 * i
            outcomes: list[ScrapeOutcome] = [
                page_to_outcome(t, body, started, limits=limits, cache=caches[t.url])
                for t, body in zip(targets, bodies, strict=True)
            ]
            writer.write(outcomes)
            seen.append([(o.up, o.error, dict(o.dropped)) for o in outcomes])
    return seen


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with Store.open(db, read_only=True) as store:
        cur = store.cursor()
        return cur.execute(sql).fetchall()


def test_cached_ingest_stores_exactly_what_uncached_ingest_stores(tmp_path: Path) -> None:
    fast, plain = tmp_path / "fast.duckdb", tmp_path / "plain.duckdb"
    assert ingest(fast, cached=True) == ingest(plain, cached=False)
    for sql in QUERIES:  # as text: a stored NaN equals itself there
        assert list(map(repr, rows(fast, sql))) == list(map(repr, rows(plain, sql))), sql


def test_cached_ingest_of_openmetrics_pages_stores_what_uncached_ingest_stores(
    tmp_path: Path,
) -> None:
    """The same with `# EOF` on every page: since issue 27 such pages take the page-shape
    path too (before, they never did), so the shortcuts downstream run on them."""
    fast, plain = tmp_path / "fast.duckdb", tmp_path / "plain.duckdb"
    assert ingest(fast, cached=True, eof=True) == ingest(plain, cached=False, eof=True)
    for sql in QUERIES:
        assert list(map(repr, rows(fast, sql))) == list(map(repr, rows(plain, sql))), sql
    text = tmp_path / "text.duckdb"
    ingest(text, cached=True)
    for sql in QUERIES:  # and what a text-format page stores
        assert list(map(repr, rows(fast, sql))) == list(map(repr, rows(text, sql))), sql


def test_the_steady_pages_store_increases_resets_nans_and_intervals(tmp_path: Path) -> None:
    """What the shortcuts must keep, spelled out (so that both paths being wrong alike
    would fail too)."""
    db = tmp_path / "fast.duckdb"
    outcomes = ingest(db, cached=True)
    energy = rows(
        db,
        "SELECT x.value FROM samples x JOIN series s USING (series_id) "
        "WHERE s.metric = 'gpuscope_gpu_energy_joules_total' ORDER BY x.ts",
    )
    # baseline, +10, +10, reset (the new value), NaN not stored, then from the reset's 5
    assert [v for (v,) in energy] == [0, 10, 10, 5, 25, 1, 1, 1, 1, 1, 1, 1, 1]
    util = rows(
        db,
        "SELECT x.value FROM samples x JOIN series s USING (series_id) "
        "WHERE s.metric = 'gpuscope_gpu_utilization_ratio' AND s.gpu = '0' ORDER BY x.ts",
    )
    assert str(util[4][0]) == "nan" and len(util) == len(PAGES)
    intervals = rows(db, QUERIES[3])
    assert [(r[2], r[4]) for r in intervals] == [
        (_at(0), _at(5)),  # closed by the scrape that showed the workload at 0
        (_at(7), None),
    ]
    # the duplicate line is dropped and counted on both scrapes that had it
    assert [o[0][2] for o in outcomes[9:11]] == [{"duplicate": 1}, {"duplicate": 1}]
    assert all(up for scrape in outcomes for up, _, _ in scrape)


def _at(i: int) -> datetime:
    return datetime.fromtimestamp(T0 + 15 * i, UTC).replace(tzinfo=None)


def churning_page(scrape: int, n: int) -> bytes:
    """``n`` series whose labels are new on every scrape (a request id in a label)."""
    return "".join(f'app_requests{{id="{scrape}-{i}"}} {i}\n' for i in range(n)).encode()


def test_a_churning_targets_cache_stays_near_its_page_size() -> None:
    """A target whose label sets change every scrape must not grow its parse cache to the
    global bound (400,000 entries, ~140 MB of label text in the hostile-targets benchmark):
    the cache is cleared once it holds a few pages' worth of series."""
    target, cache, n = Target(url="http://churn:9100/metrics"), TargetCache(), 2_000
    sizes = []
    for scrape in range(40):
        out = page_to_outcome(target, churning_page(scrape, n), T0 + scrape, cache=cache)
        assert out.batch is not None and len(out.batch) == n
        sizes.append(len(cache.series))
    assert max(sizes) <= 3 * n + 4096 + 2 * n  # cleared before the parse that follows
    assert max(sizes) < cache.limit // 20


def test_a_steady_targets_cache_is_kept_between_scrapes() -> None:
    """The bound is relative to the page: a steady page's cache never trips it, so the
    next scrape still hands back the very same label lists (the steady-state shortcut)."""
    target, cache = Target(url="http://steady:9100/metrics"), TargetCache()
    body = churning_page(0, 5_000)
    first = page_to_outcome(target, body, T0, cache=cache)
    for k in range(1, 6):
        again = page_to_outcome(target, body, T0 + k, cache=cache)
        assert again.batch is not None and first.batch is not None
        assert again.batch.labels is first.batch.labels


def _tracked_reachable(root: object) -> int:
    """Objects the garbage collector tracks among those reachable from ``root``, not
    counting classes and what is reachable through them only (the code's, not the data's)."""
    seen, todo, tracked = {id(root)}, [root], 0
    while todo:
        obj = todo.pop()
        tracked += gc.is_tracked(obj)
        for ref in gc.get_referents(obj):
            if id(ref) not in seen and not isinstance(ref, type):
                seen.add(id(ref))
                todo.append(ref)
    return tracked


def test_a_churning_targets_cache_holds_no_tracked_object_per_line() -> None:
    """What a churning target's parses leave in its cache must not be objects that Python's
    garbage collector tracks, one per line: 20,000 slices a page (the steady-page shape's
    value cuts) survived into the oldest generation and set off full collections, each of
    which, on a starved CPU, held every thread of the collector for a second or more (every
    healthy target lost a tick in CI's starved-CPU isolation test). Counted after a
    collection, so what the collector untracks by itself (tuples of strings) is not counted.
    """
    target, cache, n = Target(url="http://churn:9100/metrics"), TargetCache(), 5_000
    for scrape in range(3):
        out = page_to_outcome(target, churning_page(scrape, n), T0 + scrape, cache=cache)
        assert out.batch is not None and len(out.batch) == n
    del out
    gc.collect()
    assert cache.series.page is not None  # a shape was kept: what it holds is counted
    assert len(cache.series) >= n  # and the page's label sets
    assert _tracked_reachable(cache) < 100

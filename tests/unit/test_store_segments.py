"""The day being written is compacted in closed segments, and the file is rewritten while
readers and writers go on (docs/storage.md, "The day being written", "Giving space back")."""

from __future__ import annotations

import json
import threading
import time
from datetime import date, datetime, timedelta
from itertools import groupby
from pathlib import Path

import pytest

from gpuscope.collector.storage.store import Retention, Store
from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import load_settings
from tests.unit.test_store import ENERGY, GPU0, GPU1, UTIL, batch, labels, rows
from tests.unit.test_store_rollups import DAY, cycle, dump, filled

START = datetime(2025, 3, 4, 0, 0)
HOURS = Retention(compact_segment_s=3600)  # segments of an hour (the default is two)


def fill(store: Store, minutes: int, start: datetime = START) -> None:
    """Three series, one sample each a minute, interleaved as scrapes write them, stored as
    one run of cycles (``Store.append_cycles``, held equal to a scrape at a time by
    test_store_bulk; segments and compaction follow the samples' times, not the writes)."""
    cycles = []
    for i in range(minutes):
        at = start + timedelta(minutes=i)
        scrape = batch(at, (UTIL, GPU1, i / 100), (ENERGY, GPU0, 5.0 * i), (UTIL, GPU0, 0.5))
        cycles.append([(scrape, 0.0)])
    store.append_cycles(cycles)


def order(store: Store, lo: datetime, hi: datetime) -> list[tuple[int, datetime]]:
    sql = "SELECT series_id, ts FROM samples WHERE ts >= ? AND ts < ? ORDER BY rowid"
    return [(int(s), t) for s, t in rows(store, sql, lo, hi)]


def every(store: Store) -> list[tuple[object, ...]]:
    return sorted(rows(store, "SELECT series_id, ts, value FROM samples"))


def test_closed_segments_of_the_day_being_written_are_sorted_once(tmp_path: Path) -> None:
    """At 02:30 (hour segments), 00:00-02:00 is rewritten sorted as a closed day is (by
    metric, series; every other series backwards in time), 02:00-02:30 stays as scraped;
    the rows are exactly the same, and a second run at the same time rewrites nothing."""
    with Store.open(tmp_path / "g.duckdb", retention=HOURS) as store:
        fill(store, 150)
        ids = dict(rows(store, "SELECT metric || '/' || gpu, series_id FROM series"))
        before = every(store)
        assert store.compact(START + timedelta(hours=2, minutes=30)) == 2 * 60 * 3
        assert every(store) == before
        assert store.samples_stored() == 450
        runs = [ids[f"{ENERGY}/0"], ids[f"{UTIL}/1"], ids[f"{UTIL}/0"]]  # metric, then id
        for hour in range(2):
            lo = START + timedelta(hours=hour)
            got = order(store, lo, lo + timedelta(hours=1))
            assert [s for s, _ in got] == [s for s in runs for _ in range(60)]
            assert got[:60] == sorted(got[:60]) and got[60:120] == sorted(got[60:120], reverse=True)
        still = order(store, START + timedelta(hours=2), START + timedelta(hours=3))
        assert [s for s, _ in still] == [
            ids[f"{UTIL}/1"],
            ids[f"{ENERGY}/0"],
            ids[f"{UTIL}/0"],
        ] * 30
        meta = "SELECT value FROM meta WHERE key = 'segments_compacted_until'"
        assert rows(store, meta) == [("2025-03-04T02:00:00",)]
        assert rows(store, "SELECT count(*) FROM compactions") == [(0,)]  # the day is open
        assert store.compact(START + timedelta(hours=2, minutes=30)) == 0  # each once
        assert store.compact(START + timedelta(hours=3, minutes=0, seconds=30)) == 0  # delay
        assert every(store) == before


def test_a_day_compacted_in_segments_is_compacted_whole_once_closed(tmp_path: Path) -> None:
    """Segments, then a late sample in a compacted hour, then the day closes: the whole day
    is rewritten once (the late sample too), recorded in ``compactions`` with every row of
    the day, and the next day's segments start at its midnight."""
    with Store.open(tmp_path / "g.duckdb", retention=HOURS) as store:
        fill(store, 23 * 60 + 30, start=START)  # 00:00 .. 23:29
        assert store.compact(START + timedelta(hours=23, minutes=50)) == 23 * 60 * 3
        store.append_scrape(batch(START + timedelta(minutes=30, seconds=20), (UTIL, GPU0, 0.7)))
        fill(store, 60, start=START + timedelta(days=1))  # the next day, 00:00 .. 00:59
        before = every(store)
        day_rows = (23 * 60 + 30) * 3 + 1
        # 01:10 the next day: the closed day whole, then the next day's first hour
        assert store.compact(START + timedelta(days=1, hours=1, minutes=10)) == day_rows + 180
        assert every(store) == before
        assert rows(store, "SELECT day, rows FROM compactions") == [(date(2025, 3, 4), day_rows)]
        meta = "SELECT value FROM meta WHERE key = 'segments_compacted_until'"
        assert rows(store, meta) == [("2025-03-05T01:00:00",)]
        whole = order(store, START, START + timedelta(days=1))
        runs = [sid for sid, _ in groupby(s for s, _ in whole)]
        assert len(runs) == len(set(runs)) == 3  # each series in one run over the whole day
        assert store.compact(START + timedelta(days=1, hours=1, minutes=10)) == 0


def test_every_third_segment_boundary_the_day_so_far_is_compacted_as_one_run(
    tmp_path: Path,
) -> None:
    """Hour segments: at 05:30, 00:00-03:00 is compacted as one run and 03:00-05:00 as two
    segments; at 07:30 the day so far, 00:00-06:00, is compacted again as one run (the
    earlier runs and segments undone) and 06:00-07:00 as a segment, 07:00-07:30 stays as
    scraped: one run a series in each, the rows unchanged, and each step runs once."""
    with Store.open(tmp_path / "g.duckdb", retention=HOURS) as store:
        fill(store, 5 * 60)
        assert store.compact(START + timedelta(hours=5, minutes=30)) == 3 * 180 + 2 * 180
        fill(store, 150, start=START + timedelta(hours=5))
        before = every(store)
        assert store.compact(START + timedelta(hours=7, minutes=30)) == 6 * 180 + 180
        assert every(store) == before
        for lo_h, hi_h, length in ((0, 6, 360), (6, 7, 60)):
            got = order(store, START + timedelta(hours=lo_h), START + timedelta(hours=hi_h))
            runs = [(sid, len(list(g))) for sid, g in groupby(s for s, _ in got)]
            assert [n for _, n in runs] == [length] * 3, (lo_h, runs)
        still = order(store, START + timedelta(hours=7), START + timedelta(hours=8))
        assert len({s for s, _ in still[:3]}) == 3  # as scraped: the series interleaved
        meta = "SELECT key, value FROM meta WHERE key LIKE '%compacted_until' ORDER BY key"
        assert rows(store, meta) == [
            ("day_prefix_compacted_until", "2025-03-04T06:00:00"),
            ("segments_compacted_until", "2025-03-04T07:00:00"),
        ]
        assert store.compact(START + timedelta(hours=7, minutes=30)) == 0  # each once
        assert every(store) == before


def test_no_day_prefix_step_where_three_segments_do_not_divide_a_day(tmp_path: Path) -> None:
    """90-minute segments (16 a day; three of them, 4.5 h, do not divide it): segments only."""
    retention = Retention(compact_segment_s=5400)
    with Store.open(tmp_path / "g.duckdb", retention=retention) as store:
        fill(store, 6 * 60)
        assert store.compact(START + timedelta(hours=6, minutes=10)) == 4 * 90 * 3
        meta = "SELECT key FROM meta WHERE key LIKE '%compacted_until'"
        assert rows(store, meta) == [("segments_compacted_until",)]


def test_segments_off_leaves_the_open_day_as_scraped(tmp_path: Path) -> None:
    with Store.open(tmp_path / "g.duckdb", retention=Retention(compact_segment_s=0)) as store:
        fill(store, 150)
        assert store.compact(START + timedelta(hours=2, minutes=30)) == 0


def test_a_reader_during_the_swap_waits_and_writers_wait_then_commit(tmp_path: Path) -> None:
    """While the file is rewritten: a reader holding a cursor keeps it working until it
    closes it (the swap waits for it), a reader that comes during the swap waits for the new
    file and reads it, and a write that comes meanwhile waits and is committed after."""
    with filled(tmp_path) as store:
        before = dump(store)
        held = store.cursor()
        n0 = held.execute("SELECT count(*) FROM samples").fetchone()
        swap = threading.Thread(
            target=lambda: results.append(store.reclaim_space(min_free_ratio=0))
        )
        results: list[object] = []
        errors: list[BaseException] = []
        late: list[object] = []

        def read_late() -> None:
            try:
                cur = store.cursor()
                try:
                    late.append(cur.execute("SELECT count(*) FROM samples").fetchone())
                finally:
                    cur.close()
            except BaseException as exc:
                errors.append(exc)

        def write() -> None:
            try:
                store.append_scrape(cycle(DAY + timedelta(days=2, minutes=5), {0: 0.25, 1: 0.5}))
            except BaseException as exc:
                errors.append(exc)

        swap.start()
        wait_for(lambda: store._readers._closed)  # copied; the swap waits for `held`
        reader, writer = threading.Thread(target=read_late), threading.Thread(target=write)
        reader.start()
        writer.start()
        wait_for(lambda: store.readers_waited == 1 and store.writes_waited == 1)
        assert held.execute("SELECT count(*) FROM samples").fetchone() == n0  # still works
        assert results == [] and late == []
        held.close()
        for t in (swap, reader, writer):
            t.join(timeout=120)
        assert errors == []
        assert results and results[0].rewritten  # type: ignore[attr-defined]
        assert late[0] in (n0, (n0[0] + 2,))  # type: ignore[index]  # the new file
        after = dump(store)
        assert {
            k: v for k, v in after.items() if k not in ("samples", "scrapes", "series", "meta")
        } == {k: v for k, v in before.items() if k not in ("samples", "scrapes", "series", "meta")}
        assert len(after["samples"]) == len(before["samples"]) + 2
        assert set(before["samples"]) <= set(after["samples"])
        assert store.rewrites == 1


def test_a_swap_gives_up_when_a_reader_keeps_its_cursor(tmp_path: Path) -> None:
    """A reader that does not give its cursor back in time: the copy is dropped, the file
    and every cursor stay as they were, and the next maintenance tries again."""
    with filled(tmp_path) as store:
        size = store.path.stat().st_size
        holder = threading.Thread(target=lambda: kept.append(store.cursor()))
        kept: list[object] = []
        holder.start()
        holder.join()
        got = store.reclaim_space(min_free_ratio=0, reader_wait_s=0.05)
        assert not got.rewritten and store.path.stat().st_size == size
        assert kept[0].execute("SELECT 1").fetchone() == (1,)  # type: ignore[attr-defined]
        assert not list(tmp_path.glob("*.reclaim*"))
        kept.clear()  # given back (dropped): the next run rewrites
        assert store.reclaim_space(min_free_ratio=0).rewritten


def test_a_reader_that_writes_during_the_swap_makes_it_give_up_at_once(tmp_path: Path) -> None:
    """A job that holds a cursor and then writes what it found (the idle detector does)
    while the swap waits for that cursor: they would wait for each other, so the swap gives
    up at once (not at its 1-hour timeout here), the write is committed, and the file is
    left as it was for the next maintenance."""
    with filled(tmp_path) as store:
        held = store.cursor()
        results: list[object] = []

        def swap_files() -> None:
            results.append(store.reclaim_space(min_free_ratio=0, reader_wait_s=3600))

        swap = threading.Thread(target=swap_files)
        swap.start()
        wait_for(lambda: store._readers._closed)
        at = DAY + timedelta(days=2, minutes=5)
        store.append_scrape(cycle(at, {0: 0.25}))  # this thread holds `held`
        swap.join(timeout=120)
        assert not swap.is_alive()
        assert results and not results[0].rewritten  # type: ignore[attr-defined]
        sql = "SELECT count(*) FROM samples WHERE ts = ?"
        assert held.execute(sql, [at]).fetchone() == (1,)
        held.close()
        assert store.reclaim_space(min_free_ratio=0).rewritten
        assert rows(store, sql, at) == [(1,)]


def test_settings_of_the_segments_and_the_rewrite(tmp_path: Path) -> None:
    """Defaults (two-hour segments, hourly maintenance, a rewrite at a fifth free), off in
    a config file, and a segment that does not divide a day is one clear error."""
    cs = load_settings(env={}).collector
    assert (cs.compact_segment_seconds, cs.maintenance_interval_seconds) == (7200, 3600)
    assert cs.db_reclaim_free_ratio == 0.2
    config = tmp_path / "c.yaml"
    config.write_text("collector: {compact_segment_seconds: 0, db_reclaim_free_ratio: null}\n")
    off = load_settings(config, env={}).collector
    assert (off.compact_segment_seconds, off.db_reclaim_free_ratio) == (0, None)
    with pytest.raises(ConfigError, match="compact_segment_seconds"):
        load_settings(env={}, overrides={"collector": {"compact_segment_seconds": 7000}})


def test_the_collector_opens_its_store_with_these_settings(tmp_path: Path) -> None:
    """The segment and the wait for late batches reach the store the service opens."""
    from gpuscope.collector.service import CollectorService

    collector = {
        "db": tmp_path / "c.duckdb",
        "kubernetes": "none",
        "compact_segment_seconds": 600,
        "late_batch_seconds": 5,
    }
    service = CollectorService(load_settings(env={}, overrides={"collector": collector}))
    try:
        assert service.store.retention.compact_segment_s == 600
        assert service.store.retention.rollup_delay == timedelta(seconds=5)
        assert service.store.retention.compact_recent_s == 3900  # the shipped default
    finally:
        service.stop()


RECENT = Retention(compact_segment_s=3600, compact_recent_s=3900)


def scanned(store: Store, sql: str, *params: object) -> int:
    """Rows DuckDB read from the table to answer ``sql`` (its profiler's count)."""
    cur = store.cursor()
    try:
        cur.execute("PRAGMA enable_profiling = 'no_output'")
        cur.execute(sql, list(params)).fetchall()
        info = json.loads(cur.get_profiling_information(format="json"))
        return int(info["query"]["total_rows_scanned"])
    finally:
        cur.close()


def test_the_last_65_minutes_are_left_in_scrape_order(tmp_path: Path) -> None:
    """With ``compact_recent_s`` (the collector's 65 minutes), a segment is compacted only
    once it ended that long ago (and the late-batch minute): at 05:30 with hour segments,
    00:00-04:00 is compacted, 04:00-05:30 stays as scraped, so its row groups are in
    time order; an hour later 04:00-05:00 follows. The day's prefix and the closed day
    wait alike (the next test's clock is the closed day's)."""
    with Store.open(tmp_path / "r.duckdb", retention=RECENT) as store:
        fill(store, 330)  # 00:00 .. 05:29
        before = every(store)
        assert store.compact(START + timedelta(hours=5, minutes=30)) == 4 * 60 * 3
        meta = "SELECT value FROM meta WHERE key = 'segments_compacted_until'"
        assert rows(store, meta) == [("2025-03-04T04:00:00",)]
        recent = order(store, START + timedelta(hours=4), START + timedelta(hours=6))
        assert [t for _, t in recent] == sorted(t for _, t in recent)  # as scraped
        assert store.compact(START + timedelta(hours=6, minutes=5)) == 0  # 65 min + 1 not yet
        assert store.compact(START + timedelta(hours=6, minutes=6)) == 60 * 3
        assert every(store) == before


def test_the_closed_day_waits_for_its_last_65_minutes_too(tmp_path: Path) -> None:
    with Store.open(tmp_path / "d.duckdb", retention=RECENT) as store:
        fill(store, 24 * 60)
        store.compact(START + timedelta(days=1, minutes=30))
        assert rows(store, "SELECT count(*) FROM compactions") == [(0,)]
        store.compact(START + timedelta(days=1, hours=1, minutes=6))
        assert rows(store, "SELECT count(*) FROM compactions") == [(1,)]


def test_a_read_of_the_last_hour_skips_the_compacted_span(tmp_path: Path) -> None:
    """What the recent span is for. At 06:02, with hour segments, the maintenance has just
    rewritten the day so far (00:00-06:00) as one run a series; a read of the last hour
    (an alert rule's window) then reads every row of those six hours, since sorted by
    series each of their row groups reaches across all of them. With the recent 65
    minutes left as scraped (compacted to 04:00 only), it reads the row groups of its own
    minutes (122,880 rows each: about an hour of the 2,000 series here), not the
    compacted hours."""
    window = "SELECT count(*) FROM samples WHERE ts > ? AND ts <= ?"
    at = START + timedelta(hours=6, minutes=2)
    gpus = [labels(node="n1", gpu=str(g), uuid=f"GPU-{g}", mig_instance="") for g in range(2000)]
    counts = {}
    for name, retention in (("recent", RECENT), ("none", HOURS)):
        with Store.open(tmp_path / f"{name}.duckdb", retention=retention) as store:
            for hour in range(7):
                cycles = []
                for minute in range(60 if hour < 6 else 3):
                    when = START + timedelta(hours=hour, minutes=minute)
                    cycles.append([(batch(when, *((UTIL, g, 0.5) for g in gpus)), 0.0)])
                store.append_cycles(cycles)
            store.compact(at)
            store.checkpoint()
            counts[name] = scanned(store, window, at - timedelta(hours=1), at)
    assert counts["none"] >= 6 * 60 * 2000  # the six compacted hours, every row
    assert counts["recent"] <= 2 * 122_880  # 120,240 here: the hour and a few minutes
    assert counts["recent"] * 4 < counts["none"]


def wait_for(condition: object, limit: float = 60.0) -> None:
    """Poll a condition another thread makes true (a liveness bound, not a timing)."""
    deadline = time.monotonic() + limit
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail("the other thread never got there")
        time.sleep(0.005)

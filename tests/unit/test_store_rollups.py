"""Schema v6 roll-ups (docs/storage.md, "Roll-ups"): the 5-minute level reads the same as
one computed from the raw samples, whether a series is scraped every 5 minutes (its raw
samples stand in) or every 15 s (packed rows), or both in turn; a v5 database converts;
the file rewrite gives space back and loses nothing, also when interrupted."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpuscope.collector.http_api import api_queries
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.schema import migrate
from gpuscope.collector.storage.store import Retention, Store

UTIL = "gpuscope_gpu_utilization_ratio"
DAY = datetime(2025, 3, 3)


def gpu(i: int) -> tuple[tuple[str, str], ...]:
    return (("gpu", str(i)), ("mig_instance", ""), ("node", "n1"), ("uuid", f"GPU-{i}"))


def cycle(at: datetime, values: dict[int, float]) -> Batch:
    return Batch(
        target="n1",
        names=[UTIL] * len(values),
        labels=[gpu(i) for i in values],
        values=list(values.values()),
        types={UTIL: "gauge"},
        ts_ms=int((at - datetime(1970, 1, 1)).total_seconds() * 1000),
    )


def value(i: int, t: datetime) -> float:
    """Utilization of GPU i at t: varied, so min/max/last differ from the mean."""
    k = int((t - DAY).total_seconds())
    return round(((k // 15 * 7 + i * 13) % 100) / 100, 2)


def history(
    store: Store, spacing: dict[int, Any], hours: int
) -> dict[int, list[tuple[datetime, float]]]:
    """Scrape each GPU at its spacing (seconds, or a function of time) for ``hours``, the
    scrapes stored as one run of cycles (``Store.append_cycles``, held equal to a scrape at a
    time by test_store_bulk: roll-ups come from the store's maintenance, not the writes)."""
    kept: dict[int, list[tuple[datetime, float]]] = defaultdict(list)
    cycles: list[list[tuple[Batch, float]]] = []
    t = DAY
    while t < DAY + timedelta(hours=hours):
        due = {}
        for i, every in spacing.items():
            step = every(t) if callable(every) else every
            if int((t - DAY).total_seconds()) % step == 0:
                due[i] = value(i, t)
                kept[i].append((t, due[i]))
        if due:
            cycles.append([(cycle(t, due), 0.0)])
        t += timedelta(seconds=15)
    store.append_cycles(cycles)
    return kept


def expected_5m(points: list[tuple[datetime, float]]) -> dict[datetime, tuple[float, ...]]:
    """(max, sum, count) per 5-minute bucket, straight from the raw samples."""
    out: dict[datetime, list[float]] = defaultdict(list)
    for t, v in points:
        out[t - timedelta(seconds=int((t - DAY).total_seconds()) % 300)].append(v)
    return {b: (max(v), sum(v), len(v)) for b, v in out.items()}


def rolled(store: Store, sid: int) -> dict[datetime, tuple[Any, ...]]:
    got = store.cursor().execute(
        "SELECT bucket, max, sum, count FROM samples_5m WHERE series_id = ? ORDER BY bucket",
        [sid],
    )
    return {r[0]: tuple(r[1:]) for r in got.fetchall()}


def same(got: dict[datetime, tuple[Any, ...]], want: dict[datetime, tuple[float, ...]]) -> bool:
    return got.keys() == want.keys() and all(
        math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
        for k in want
        for a, b in zip(got[k], want[k], strict=True)
    )


# 5-minute steps only; 15 s only; 5-minute steps for the first 3 hours then 15 s
SPACINGS: dict[int, Any] = {0: 300, 1: 15, 2: lambda t: 300 if t < DAY + timedelta(hours=3) else 15}


@pytest.fixture
def store(tmp_path: Path) -> Any:
    retention = Retention(raw_days=1, rollup_5m_days=3, rollup_1h_days=30)
    with Store.open(tmp_path / "g.duckdb", retention=retention) as s:
        yield s


def test_the_5m_level_equals_the_raw_samples_for_coarse_fine_and_mixed_series(store: Store) -> None:
    """Every reader reads samples_5m; its rows equal the raw computation for each spacing,
    within raw retention and after it (the coarse samples are kept until the 5-minute cut),
    and a coarse series costs no roll-up row."""
    kept = history(store, SPACINGS, hours=6)
    sids = {i: sid for i in SPACINGS if (sid := store.series_id(UTIL, gpu(i))) is not None}
    # as a collector runs it: now and then (so the mixed series is coarse for 3 hours), then
    # past raw retention
    for now in (DAY + timedelta(hours=h, minutes=2) for h in (3, 6, 48)):
        store.apply_retention(now)
        done = now - timedelta(minutes=2)  # the roll-up's frontier
        for i, points in kept.items():
            want = {b: v for b, v in expected_5m(points).items() if b < done}
            assert same(rolled(store, sids[i]), want), (i, now)
    cur = store.cursor()
    per_series = dict(
        cur.execute("SELECT series_id, count(*) FROM rollup_5m_rows GROUP BY ALL").fetchall()
    )
    assert sids[0] not in per_series  # raw samples stand in: no rows
    assert per_series[sids[1]] == 72 and per_series[sids[2]] == 36  # 6 h and 3 h of buckets
    assert cur.execute(
        "SELECT count(*) FROM samples WHERE series_id = ?", [sids[0]]
    ).fetchone() == (72,)
    store.apply_retention(DAY + timedelta(days=4))  # past the 5-minute retention
    assert cur.execute("SELECT count(*) FROM samples").fetchone() == (0,)
    assert cur.execute("SELECT count(*) FROM samples_5m").fetchone() == (0,)
    assert cur.execute("SELECT count(*) FROM rollup_5m_raw").fetchone() == (0,)


def test_the_api_reads_the_same_numbers_from_roll_ups_as_from_raw_samples(store: Store) -> None:
    """GET /api/v1/utilization at a 5-minute step reads the roll-ups; the raw resolution of
    the same window must give the same points, for coarse, fine and mixed series."""
    history(store, SPACINGS, hours=6)
    store.apply_retention(DAY + timedelta(hours=6, minutes=2))
    params = {
        "start": DAY, "end": DAY + timedelta(hours=6), "step": 300, "node": None,
        "namespace": None, "project": None, "limit": 100, "offset": 0,
    }  # fmt: skip
    cur = store.cursor()
    frontier = datetime.fromisoformat(
        cur.execute("SELECT value FROM meta WHERE key = 'rollup_5m_until'").fetchone()[0]  # type: ignore[index]
    ).replace(tzinfo=None)
    assert frontier == DAY + timedelta(hours=6)
    raw = cur.execute(api_queries.UTILIZATION[("gpu", "raw")], params).fetchall()
    fives = cur.execute(
        api_queries.UTILIZATION[("gpu", "5m")], params | {"frontier": frontier}
    ).fetchall()
    assert len(raw) == 3 and [k for k, _ in raw] == [k for k, _ in fives]
    for (_, a), (_, b) in zip(raw, fives, strict=True):
        pa_, pb = json.loads(a), json.loads(b)
        assert len(pa_) == len(pb) == 72
        assert all(
            x[0] == y[0] and math.isclose(x[1], y[1], rel_tol=1e-12)
            for x, y in zip(pa_, pb, strict=True)
        )


def test_the_hourly_level_equals_the_raw_samples(store: Store) -> None:
    kept = history(store, SPACINGS, hours=3)
    store.apply_retention(DAY + timedelta(hours=3, minutes=2))
    for i, points in kept.items():
        sid = store.series_id(UTIL, gpu(i))
        got = (
            store.cursor()
            .execute(
                "SELECT bucket, max, sum, count FROM samples_1h WHERE series_id = ? "
                "ORDER BY bucket",
                [sid],
            )
            .fetchall()
        )
        want = []
        for h in range(3):
            vs = [
                v for t, v in points if DAY + timedelta(hours=h) <= t < DAY + timedelta(hours=h + 1)
            ]
            want.append((DAY + timedelta(hours=h), max(vs), sum(vs), len(vs)))
        assert len(got) == 3
        for g, w in zip(got, want, strict=True):
            assert g[0] == w[0] and g[3] == w[3]
            assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(g[1:], w[1:], strict=True))


def test_a_v5_database_converts_its_roll_ups(tmp_path: Path) -> None:
    """v5 rows keep their peak, sum and count through v6's packing (a peak equal to the mean
    becomes NULL); min and last, which nothing read, are not kept."""
    path = tmp_path / "v5.duckdb"
    con = duckdb.connect(str(path))
    assert migrate(con, target=5) == 5
    rows = [
        (7, DAY, 0.2, 0.8, 1.5, 3, 0.6),
        (7, DAY + timedelta(minutes=5), 0.1, 0.1, 0.1, 1, 0.1),
        (8, DAY, 2.0, 2.0, 8.0, 4, 2.0),
    ]
    con.executemany("INSERT INTO samples_5m VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    con.executemany("INSERT INTO samples_1h VALUES (?, ?, ?, ?, ?, ?, ?)", rows[:1])
    con.close()
    with Store.open(path) as store:
        assert (
            store.schema_version == 10
        )  # v6 packs them; v7 inventory_pdbs; v8 writer_log; v9 idle bound; v10 idle spacing
        cur = store.cursor()
        kept = [(sid, b, mx, s, n) for sid, b, _mn, mx, s, n, _last in rows]
        got = cur.execute("SELECT * FROM samples_5m ORDER BY series_id, bucket").fetchall()
        assert got == kept
        assert cur.execute("SELECT * FROM samples_1h").fetchall() == kept[:1]
        packed = cur.execute(
            "SELECT series_id, max FROM rollup_5m_rows ORDER BY series_id, bucket"
        ).fetchall()
        assert packed == [(7, 0.8), (7, None), (8, None)]


def dump(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    cur = store.cursor()
    names = [r[0] for r in cur.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
    names += ["samples_5m", "samples_1h"]
    return {n: sorted(cur.execute(f'SELECT * FROM "{n}"').fetchall(), key=repr) for n in names}


def filled(tmp_path: Path) -> Store:
    """Two days of 200 series at 15 s (written in bulk: this tests the rewrite, not ingest),
    then the store's own maintenance: roll-ups, day 1 deleted, day 2 compacted."""
    store = Store.open(tmp_path / "g.duckdb", retention=Retention(raw_days=1))
    with store._transaction() as con:
        con.execute(
            "INSERT INTO samples SELECT (i % 200)::UINTEGER, "
            "$day + to_seconds((i // 200) * 15), (hash(i) % 1000) / 1000.0 "
            "FROM range(200 * 5760 * 2) AS r(i)",
            {"day": DAY},
        )
    store.apply_retention(DAY + timedelta(days=2, hours=1))
    return store


def test_reclaim_gives_space_back_and_keeps_every_row(tmp_path: Path) -> None:
    with filled(tmp_path) as store:
        before = dump(store)
        preview = store.reclaim_space(dry_run=True, min_free_ratio=0)
        assert not preview.rewritten and preview.free_bytes > 0
        assert store.path.stat().st_size == preview.file_bytes  # a dry run changes nothing
        done = store.reclaim_space(min_free_ratio=0)
        assert done.rewritten and done.reclaimed_bytes > 0
        assert done.new_file_bytes is not None and done.new_file_bytes < done.file_bytes
        assert store.path.stat().st_size == done.new_file_bytes
        assert dump(store) == before
        store.append_scrape(cycle(DAY + timedelta(days=2), {0: 0.5}))  # still writable
    with Store.open(tmp_path / "g.duckdb") as again:
        assert again.cursor().execute("SELECT count(*) FROM samples").fetchone()[0] > 0  # type: ignore[index]
    assert not list(tmp_path.glob("*.reclaim*"))


def test_reclaim_interrupted_before_the_rename_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between writing the new file and renaming it: the old file is whole, the
    store goes on with it, and the half-way file is gone; a stale one is ignored later."""
    with filled(tmp_path) as store:
        before, size = dump(store), store.path.stat().st_size

        def crash(*_: object) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(os, "replace", crash)
        with pytest.raises(KeyboardInterrupt):
            store.reclaim_space(min_free_ratio=0)
        monkeypatch.undo()
        assert store.path.stat().st_size == size and dump(store) == before
        assert not list(tmp_path.glob("*.reclaim*"))
        # a crash that left a partial file behind (killed, no clean-up): the next run removes it
        (tmp_path / "g.duckdb.reclaim").write_bytes(b"half a database")
        assert store.reclaim_space(min_free_ratio=0).rewritten
        assert dump(store) == before
    assert not list(tmp_path.glob("*.reclaim*"))


def test_reclaim_skips_a_file_with_little_free_space(tmp_path: Path) -> None:
    with Store.open(tmp_path / "g.duckdb") as store:
        store.append_scrape(cycle(DAY, {0: 0.5}))
        got = store.reclaim_space()
        assert not got.rewritten and got.reclaimed_bytes == 0

"""The collector's DuckDB store: schema migrations, ingest, counters, retention, export."""

import os
import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage import schema
from gpuscope.collector.storage.schema import migrate
from gpuscope.collector.storage.store import Q, Retention, Store, series_kind
from gpuscope.collector.storage.store_sql import INTERVAL_TOUCH_S
from gpuscope.core.errors import UserError

T0 = datetime(2025, 3, 3, 10, 0, 0)  # a Monday, 10:00 UTC
ENERGY = "gpuscope_gpu_energy_joules_total"
UTIL = "gpuscope_gpu_utilization_ratio"
INFO = "gpuscope_gpu_workload_info"
TYPES = {"gpuscope_gpu_energy_joules": "counter", UTIL: "gauge", INFO: "gauge"}


def labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


GPU0 = labels(node="n1", gpu="0", uuid="GPU-0", mig_instance="")
GPU1 = labels(node="n1", gpu="1", uuid="GPU-1", mig_instance="")


def ms(t: datetime) -> int:
    return int(t.replace(tzinfo=UTC).timestamp() * 1000)


def batch(
    at: datetime, *samples: tuple[str, tuple[tuple[str, str], ...], float], target: str = "t1"
) -> Batch:
    names, labs, values = zip(*samples, strict=True) if samples else ((), (), ())
    return Batch(target, ms(at), list(names), list(labs), list(values), TYPES)


def rows(store: Store, sql: str, *params: object) -> list[tuple[Any, ...]]:
    return store.cursor().execute(sql, list(params) or None).fetchall()


def values_of(store: Store, metric: str, lab: tuple[tuple[str, str], ...]) -> list[float]:
    sid = store.series_id(metric, lab)
    return [
        r[0] for r in rows(store, "SELECT value FROM samples WHERE series_id = ? ORDER BY ts", sid)
    ]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "gpuscope.duckdb"


def test_migrates_an_empty_file_to_the_latest_version(db: Path) -> None:
    """A new file gets every table of every migration, the version recorded in meta."""
    with Store.open(db) as store:
        assert store.schema_version == schema.LATEST_VERSION == 10
        tables = {r[0] for r in rows(store, "SELECT table_name FROM duckdb_tables()")}
        assert {
            "series",
            "samples",
            "scrapes",
            "workload_intervals",
            "findings",
            "rollup_5m_rows",
            "rollup_5m_raw",
            "rollup_1h_rows",
            "inventory_pdbs",
            "writer_log",
        } <= tables
        views = {r[0] for r in rows(store, "SELECT view_name FROM duckdb_views()")}
        assert {"samples_5m", "samples_1h"} <= views
        assert store.samples_stored() == 0


def test_upgrades_a_v1_database_keeping_its_data(db: Path) -> None:
    """A database left at version 1 opens, gains the roll-up tables, keeps its samples."""
    con = duckdb.connect(str(db))
    assert migrate(con, target=1) == 1
    con.execute(
        "INSERT INTO series VALUES (0, 'm', 'gauge', 'n1', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, MAP {}, ?, ?, 1.0)",
        [T0, T0],
    )
    con.execute("INSERT INTO samples VALUES (0, ?, 1.0)", [T0])
    con.execute("UPDATE meta SET value = '1' WHERE key = 'samples_stored'")
    con.close()
    with Store.open(db) as store:
        assert store.schema_version == schema.LATEST_VERSION == 10
        assert rows(store, "SELECT count(*) FROM samples_5m") == [(0,)]
        assert store.samples_stored() == 1
        assert store.series_id("m", labels(node="n1")) == 0
        store.append_scrape(
            batch(
                T0 + timedelta(seconds=15),
                ("m", labels(node="n1"), 2.0),
                ("m", labels(node="n2"), 3.0),
            )
        )
        assert store.series_id("m", labels(node="n2")) == 1
        assert store.samples_stored() == 3


def test_refuses_a_database_from_a_newer_version_without_changing_it(db: Path) -> None:
    """Version 99 > latest: one clear line naming both versions, and the file is untouched."""
    Store.open(db).close()
    con = duckdb.connect(str(db))
    con.execute(schema.SET_META, ["schema_version", "99"])
    con.close()
    before = db.read_bytes()
    with pytest.raises(UserError) as err:
        Store.open(db)
    message = str(err.value)
    assert "newer" in message and "99" in message and str(schema.LATEST_VERSION) in message
    assert "\n" not in message
    assert db.read_bytes() == before


def test_refuses_another_applications_database(db: Path) -> None:
    """A DuckDB file with tables but no gpuscope schema is not adopted."""
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE invoices (id INTEGER)")
    con.close()
    with pytest.raises(UserError, match="no gpuscope schema"):
        Store.open(db)
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT table_name FROM duckdb_tables()").fetchall() == [("invoices",)]
    con.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_refuses_a_file_that_is_not_a_database_and_leaves_it_alone(
    db: Path, read_only: bool
) -> None:
    """Random bytes: one line saying so; the file keeps every byte and gets no WAL beside it."""
    junk = os.urandom(64 * 1024)
    db.write_bytes(junk)
    with pytest.raises(UserError, match="is not a DuckDB database") as err:
        Store.open(db, read_only=read_only)
    assert "\n" not in str(err.value)
    assert db.read_bytes() == junk
    assert sorted(p.name for p in db.parent.iterdir()) == [db.name]


def test_counters_become_increases_across_resets_and_reopens(db: Path) -> None:
    """First sample is the baseline; a drop is a reset (increase = new value); a reopened
    store continues from the last raw value it persisted. Gauges are stored as they are."""
    energy = [100.0, 130.0, 20.0, 50.0]
    with Store.open(db) as store:
        for i, e in enumerate(energy):
            store.append_scrape(
                batch(T0 + timedelta(seconds=15 * i), (ENERGY, GPU0, e), (UTIL, GPU0, 0.25 * i))
            )
    with Store.open(db) as store:
        store.append_scrape(
            batch(T0 + timedelta(seconds=60), (ENERGY, GPU0, 70.0), (UTIL, GPU0, 0.5))
        )
        store.append_scrape(
            batch(T0 + timedelta(seconds=75), (ENERGY, GPU0, 10.0), (UTIL, GPU0, 0.5))
        )
        assert values_of(store, ENERGY, GPU0) == [0.0, 30.0, 20.0, 30.0, 20.0, 10.0]
        assert values_of(store, UTIL, GPU0) == [0.0, 0.25, 0.5, 0.75, 0.5, 0.5]
    with Store.open(db, read_only=True) as store:  # closing folded the writer's log
        assert rows(store, "SELECT kind, last_raw FROM series ORDER BY series_id") == [
            ("counter", 10.0),
            ("gauge", 0.5),
        ]


def test_series_kind_follows_family_types() -> None:
    """Family types are keyed without _total; untyped _total is a counter; histogram parts count."""
    assert series_kind("x_total", {"x": "counter"}) == "counter"
    assert series_kind("x_total", {}) == "counter"
    assert series_kind("x", {"x": "gauge"}) == "gauge"
    assert series_kind("h_bucket", {"h": "histogram"}) == "counter"
    assert series_kind("s", {"s": "summary"}) == "gauge"


def test_series_ids_are_stable_across_reopen(db: Path) -> None:
    """The cache rebuilt from the series table maps the same labels to the same ids,
    including labels kept in the map and empty label values; new series get fresh ids."""
    ecc = labels(node="n1", gpu="0", uuid="GPU-0", mig_instance="", type="corrected")
    with Store.open(db) as store:
        store.append_scrape(
            batch(
                T0,
                (ENERGY, GPU0, 1.0),
                (UTIL, GPU1, 0.5),
                ("gpuscope_gpu_ecc_errors_total", ecc, 0.0),
            )
        )
        ids = [
            store.series_id(ENERGY, GPU0),
            store.series_id(UTIL, GPU1),
            store.series_id("gpuscope_gpu_ecc_errors_total", ecc),
        ]
    assert ids == [0, 1, 2]
    with Store.open(db) as store:
        assert [
            store.series_id(ENERGY, GPU0),
            store.series_id(UTIL, GPU1),
            store.series_id("gpuscope_gpu_ecc_errors_total", ecc),
        ] == ids
        store.append_scrape(
            batch(T0 + timedelta(seconds=15), (ENERGY, GPU0, 2.0), (UTIL, GPU0, 0.1))
        )
        assert store.series_id(UTIL, GPU0) == 3
        assert rows(store, "SELECT count(*) FROM series") == [(4,)]


def test_a_failed_batch_leaves_nothing_behind(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error after the samples went in rolls the whole batch back: no samples, no
    series, no counter state, no acknowledgement; the next batch reuses the ids cleanly."""
    with Store.open(db) as store:
        store.append_scrape(batch(T0, (ENERGY, GPU0, 100.0)))

        def explode(*args: object, **kwargs: object) -> set[tuple[str, ...]]:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(store, "_update_intervals", explode)
        pod = labels(node="n1", gpu="1", uuid="GPU-1", namespace="ml", pod="nb", container="c")
        with pytest.raises(RuntimeError):  # the pod's interval opens last in the transaction
            store.append_scrape(
                batch(
                    T0 + timedelta(seconds=15),
                    (ENERGY, GPU0, 150.0),
                    (UTIL, GPU1, 0.5),
                    (INFO, pod, 1.0),
                )
            )
        assert rows(store, "SELECT count(*) FROM samples") == [(1,)]
        assert rows(store, "SELECT count(*), max(last_raw) FROM series") == [(1, 100.0)]
        assert rows(store, "SELECT count(*) FROM scrapes") == [(1,)]
        assert store.samples_stored() == 1
        assert store.series_id(UTIL, GPU1) is None
        monkeypatch.undo()
        store.append_scrape(
            batch(T0 + timedelta(seconds=30), (ENERGY, GPU0, 160.0), (UTIL, GPU1, 0.5))
        )
        assert store.series_id(UTIL, GPU1) == 1
        assert values_of(store, ENERGY, GPU0) == [0.0, 60.0]
        assert store.samples_stored() == 3


def test_duplicate_series_in_a_batch_keep_the_last_sample(db: Path) -> None:
    """One row per series and batch, so the counter state is never ambiguous."""
    with Store.open(db) as store:
        assert store.append_scrape(batch(T0, (UTIL, GPU0, 0.1), (UTIL, GPU0, 0.2))) == 1
        assert values_of(store, UTIL, GPU0) == [0.2]


def test_samples_stored_is_persisted(db: Path) -> None:
    """The acknowledged-rows counter survives a reopen and reads the same read-only."""
    with Store.open(db) as store:
        for i in range(3):
            store.append_scrape(
                batch(
                    T0 + timedelta(seconds=15 * i),
                    (ENERGY, GPU0, i),
                    (UTIL, GPU0, 0.5),
                    (UTIL, GPU1, 0.5),
                )
            )
        assert store.samples_stored() == 9
    with Store.open(db) as store:
        assert store.samples_stored() == 9
    with Store.open(db, read_only=True) as reader:
        assert reader.samples_stored() == 9
        with pytest.raises(UserError, match="read-only"):
            reader.append_scrape(batch(T0, (UTIL, GPU0, 0.5)))


def test_read_only_open_refuses_missing_or_old_databases(db: Path) -> None:
    """A reader never creates or upgrades a database."""
    with pytest.raises(UserError, match="does not exist"):
        Store.open(db, read_only=True)
    assert not db.exists()
    con = duckdb.connect(str(db))
    migrate(con, target=1)
    con.close()
    with pytest.raises(UserError, match="version 1"):
        Store.open(db, read_only=True)


def test_cursor_reads_committed_rows_from_another_thread(db: Path) -> None:
    """Readers in other threads use cursors of the writer's connection."""
    with Store.open(db) as store:
        store.append_scrape(batch(T0, (UTIL, GPU0, 0.5)))
        seen: list[object] = []
        cur = store.cursor()
        worker = threading.Thread(
            target=lambda: seen.extend(cur.execute("SELECT count(*) FROM samples").fetchall())
        )
        worker.start()
        worker.join()
        assert seen == [(1,)]


def test_workload_intervals_follow_workload_info_presence(db: Path) -> None:
    """An interval opens when a pod's workload_info appears, closes at the first scrape of
    the same target without it, survives a reopen, and other targets do not close it."""
    pod = labels(
        node="n1",
        gpu="0",
        uuid="GPU-0",
        mig_instance="",
        namespace="ml",
        pod="nb-1",
        container="main",
        workload_kind="interactive",
        interactive="true",
        project="vision",
    )
    t = [T0 + timedelta(seconds=15 * i) for i in range(5)]
    with Store.open(db) as store:
        store.append_scrape(batch(t[0], (INFO, pod, 1.0), (UTIL, GPU0, 0.1)))
        store.append_scrape(batch(t[1], (INFO, pod, 1.0), (UTIL, GPU0, 0.1)))
        store.append_scrape(batch(t[1], (UTIL, GPU1, 0.1), target="t2"))
    with Store.open(db) as store:
        store.append_scrape(batch(t[2], (INFO, pod, 1.0), (UTIL, GPU0, 0.1)))
        store.append_scrape(batch(t[3], (UTIL, GPU0, 0.1)))
        store.append_scrape(batch(t[4], (INFO, pod, 1.0)))
        got = rows(
            store,
            "SELECT namespace, pod, container, node, gpu, gpu_uuid, kind, project, interactive, start_ts, last_seen, end_ts "
            "FROM workload_intervals ORDER BY start_ts",
        )
    assert got == [
        ("ml", "nb-1", "main", "n1", "0", "GPU-0", "interactive", "vision", True, t[0], t[2], t[3]),
        ("ml", "nb-1", "main", "n1", "0", "GPU-0", "interactive", "vision", True, t[4], t[4], None),
    ]


def test_an_open_intervals_last_seen_is_written_once_a_minute(db: Path) -> None:
    """last_seen of an open interval is set at the first scrape of each minute of sample
    time (INTERVAL_TOUCH_S), so it lags the last sighting by under a minute and most
    cycles write nothing to the table; the interval still closes at the exact scrape."""
    pod = labels(node="n1", gpu="0", uuid="GPU-0", namespace="ml", pod="nb", container="c")
    t = [T0 + timedelta(seconds=15 * i) for i in range(10)]  # T0 is on a minute
    sql = "SELECT start_ts, last_seen, end_ts FROM workload_intervals"
    with Store.open(db) as store:
        for i in range(8):  # sightings at 0 s .. 105 s
            store.append_scrape(batch(t[i], (INFO, pod, 1.0)))
        assert rows(store, sql) == [(t[0], t[4], None)]  # 60 s, not 105 s
        assert t[7] - t[4] < timedelta(seconds=INTERVAL_TOUCH_S)
        store.append_scrape(batch(t[8], (INFO, pod, 1.0)))  # 120 s: a new minute
        assert rows(store, sql) == [(t[0], t[8], None)]
        store.append_scrape(batch(t[9], (UTIL, GPU0, 0.1)))  # the pod is gone at 135 s
        assert rows(store, sql) == [(t[0], t[8], t[9])]


def test_retention_rolls_up_then_deletes(db: Path) -> None:
    """5-minute and hour roll-ups match hand-computed min/max/sum/count/last; raw samples go
    once past raw retention and rolled up; a second run rolls nothing twice."""
    day = datetime(2025, 3, 3)
    points = [
        (day + timedelta(hours=10, minutes=m, seconds=s), v)
        for m, s, v in [
            (0, 0, 0.2),
            (1, 0, 0.8),
            (4, 59, 0.5),
            (5, 0, 0.1),
            (59, 45, 0.3),
            (60, 0, 0.9),
        ]
    ]
    retention = Retention(raw_days=2, rollup_5m_days=5, rollup_1h_days=30)
    with Store.open(db, retention=retention) as store:
        for at, v in points:
            store.append_scrape(batch(at, (UTIL, GPU0, v)))
        sid = store.series_id(UTIL, GPU0)
        # 10:30: buckets before 10:25 roll up (the open one and the 1-minute delay wait).
        done = store.apply_retention(day + timedelta(hours=10, minutes=30))
        assert done["rolled_5m"] == 2 and done["rolled_1h"] == 0 and done["deleted_samples"] == 0
        assert rows(
            store,
            "SELECT series_id, bucket, max, sum, count FROM samples_5m ORDER BY bucket",
        ) == [
            (sid, day + timedelta(hours=10), 0.8, pytest.approx(1.5), 3),
            (sid, day + timedelta(hours=10, minutes=5), 0.1, 0.1, 1),
        ]
        done = store.apply_retention(day + timedelta(hours=11, minutes=10))
        # 10:55 and 11:00 hold one sample each: the raw samples stand in, no rows are written
        assert done["rolled_5m"] == 0 and done["coarse_series"] == 1
        assert done["rolled_1h"] == 1  # 11:00 is not over
        assert rows(store, "SELECT series_id, bucket, max, sum, count FROM samples_1h") == [
            (sid, day + timedelta(hours=10), 0.8, pytest.approx(1.9), 5),
        ]
        assert rows(store, "SELECT count(*) FROM samples") == [(6,)]
        done = store.apply_retention(day + timedelta(days=3))
        # the two stand-in samples stay (until the 5-minute retention); the others go
        assert (
            done["rolled_1h"] == 1 and done["deleted_samples"] == 4 and done["deleted_scrapes"] == 6
        )
        assert rows(
            store,
            "SELECT bucket, max, sum, count FROM samples_1h WHERE bucket > ?",
            day + timedelta(hours=10),
        ) == [
            (day + timedelta(hours=11), 0.9, 0.9, 1),
        ]
        assert rows(store, "SELECT count(*) FROM samples_5m") == [(4,)]
        done = store.apply_retention(day + timedelta(days=6))
        assert done["deleted_samples"] == 2
        assert rows(store, "SELECT count(*) FROM samples_5m") == [(0,)]
        assert rows(store, "SELECT count(*) FROM rollup_5m_raw") == [(0,)]
        assert rows(store, "SELECT count(*) FROM samples_1h") == [(2,)]
        assert store.samples_stored() == 6  # acknowledged rows, not rows present


def test_compaction_sorts_closed_days_by_series_and_keeps_every_row(db: Path) -> None:
    """Closed days are rewritten sorted by series (and time) once; the open day is left as
    scraped (segments off: tests/unit/test_store_segments.py has them); the rows (and the
    acknowledged count) are exactly the same afterwards."""
    start = datetime(2025, 3, 3, 23, 58)
    with Store.open(db, retention=Retention(compact_segment_s=0)) as store:
        for i in range(16):  # 23:58 .. 00:01:45, two series interleaved in each batch
            store.append_scrape(
                batch(
                    start + timedelta(seconds=15 * i),
                    (ENERGY, GPU0, 10.0 * i),
                    (UTIL, GPU1, i / 16),
                )
            )
        before = sorted(rows(store, "SELECT series_id, ts, value FROM samples"))
        assert store.compact(datetime(2025, 3, 4, 0, 0, 30)) == 0  # within the 1-minute delay
        assert store.compact(datetime(2025, 3, 4, 1, 0)) == 16
        assert store.compact(datetime(2025, 3, 4, 2, 0)) == 0
        assert sorted(rows(store, "SELECT series_id, ts, value FROM samples")) == before
        closed = rows(
            store,
            "SELECT series_id, ts FROM samples WHERE ts < ? ORDER BY rowid",
            datetime(2025, 3, 4),
        )
        # by series; even series forwards in time, odd ones backwards (timestamps compress)
        assert [r[0] for r in closed] == [0] * 8 + [1] * 8
        assert closed[:8] == sorted(closed[:8]) and closed[8:] == sorted(closed[8:], reverse=True)
        still_open = rows(
            store,
            "SELECT series_id FROM samples WHERE ts >= ? ORDER BY rowid",
            datetime(2025, 3, 4),
        )
        assert [r[0] for r in still_open] == [0, 1] * 8
        assert rows(store, "SELECT day, rows FROM compactions") == [(date(2025, 3, 3), 16)]
        assert store.samples_stored() == 32


def test_concurrent_appends_of_new_series_give_each_series_one_id(db: Path) -> None:
    """Scrape threads appending at once: every new series gets exactly one id."""
    with Store.open(db) as store:
        errors: list[BaseException] = []

        def scrape(target: str) -> None:
            try:
                for i in range(30):
                    at = T0 + timedelta(seconds=15 * i)
                    labs = [labels(node="n1", gpu=str(g), uuid=f"GPU-{g}") for g in range(i + 1)]
                    store.append_scrape(
                        batch(at, *((UTIL, lab, 0.5) for lab in labs), target=target)
                    )
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=scrape, args=(f"t{k}",)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert rows(store, "SELECT count(*), count(DISTINCT uuid), max(series_id) FROM series") == [
            (30, 30, 29)
        ]


def test_appends_go_on_while_a_day_is_compacted(db: Path) -> None:
    """Compaction runs on its own cursor: a writer thread appending meanwhile loses nothing."""
    series = [labels(node=f"n{i // 8}", gpu=str(i % 8), uuid=f"GPU-{i}") for i in range(200)]
    day = datetime(2025, 3, 3)
    with Store.open(db, retention=Retention(compact_segment_s=0)) as store:  # the day only
        for i in range(200):  # 200 ticks x 200 series on 2025-03-03
            at = day + timedelta(minutes=5 * i)
            store.append_scrape(batch(at, *((UTIL, lab, 0.5) for lab in series)))
        errors: list[BaseException] = []

        def write() -> None:
            try:
                for i in range(50):
                    at = day + timedelta(days=1, seconds=15 * i)
                    store.append_scrape(batch(at, *((UTIL, lab, 0.25) for lab in series)))
            except BaseException as exc:
                errors.append(exc)

        writer = threading.Thread(target=write)
        writer.start()
        assert store.compact(day + timedelta(days=1, hours=1)) == 40_000
        writer.join()
        assert errors == []
        assert rows(store, "SELECT count(*) FROM samples") == [(50_000,)]
        assert store.samples_stored() == 50_000


def test_sample_times_are_whole_seconds(db: Path) -> None:
    """ts is stored in seconds (truncated); per-sample timestamps override the scrape time."""
    with Store.open(db) as store:
        store.append_scrape(
            Batch(
                "t1",
                ms(T0) + 999,
                [UTIL, ENERGY],
                [GPU0, GPU0],
                [0.5, 1.0],
                TYPES,
                [None, ms(T0) - 15_000],
            )
        )
        assert rows(store, "SELECT series_id, ts FROM samples ORDER BY series_id") == [
            (0, T0),
            (1, T0 - timedelta(seconds=15)),
        ]


def test_export_day_writes_a_parquet_partition_polars_reads(db: Path, tmp_path: Path) -> None:
    """Closed days only; rows of that UTC day alone, with their series' labels."""
    out = tmp_path / "export"
    with Store.open(db) as store:
        for i in range(4):
            at = datetime(2025, 3, 3, 23, 59, 30) + timedelta(seconds=15 * i)  # two before midnight
            store.append_scrape(batch(at, (ENERGY, GPU0, 100.0 + 10 * i), (UTIL, GPU1, 0.5)))
        with pytest.raises(UserError, match="not over"):
            store.export_day(date(2025, 3, 4), out, now=datetime(2025, 3, 4, 12, 0))
        path = store.export_day(date(2025, 3, 3), out, now=datetime(2025, 3, 4, 0, 5))
    assert path == out / "day=2025-03-03" / "samples.parquet"
    assert [p.name for p in path.parent.iterdir()] == ["samples.parquet"]
    df = pl.read_parquet(path).sort("metric", "ts")
    assert df.height == 4
    assert df["metric"].to_list() == [ENERGY, ENERGY, UTIL, UTIL]
    assert df["value"].to_list() == [0.0, 10.0, 0.5, 0.5]
    assert df["uuid"].to_list() == ["GPU-0", "GPU-0", "GPU-1", "GPU-1"]
    assert df["kind"].to_list() == ["counter", "counter", "gauge", "gauge"]
    assert df["ts"].max() == datetime(2025, 3, 3, 23, 59, 45)


def test_inventory_is_kept_as_history(db: Path) -> None:
    """A changed node gets a new version; a vanished pod's version ends; None skips a kind."""
    t1, t2 = T0, T0 + timedelta(minutes=1)
    with Store.open(db) as store:
        store.record_inventory(
            t1,
            nodes=[{"name": "n1", "gpus": 8}],
            pods=[{"namespace": "a", "name": "p"}],
            quotas=[{"project": "x", "guaranteed_gpus": 4}],
        )
        store.record_inventory(t2, nodes=[{"name": "n1", "gpus": 4}], pods=[])
        assert rows(
            store,
            "SELECT key, record->>'gpus', valid_from, valid_to FROM inventory_nodes ORDER BY valid_from",
        ) == [
            ("n1", "8", t1, t2),
            ("n1", "4", t2, None),
        ]
        assert rows(store, "SELECT key, valid_to FROM inventory_pods") == [("a/p", t2)]
        assert rows(store, "SELECT valid_to FROM quotas") == [(None,)]


def test_findings_open_update_and_resolve(db: Path) -> None:
    """A detector run upserts its findings by id and resolves the ones it no longer sees."""
    f = {
        "id": "idle:ml/nb-1",
        "kind": "idle_session",
        "severity": "warning",
        "subject": {"namespace": "ml", "pod": "nb-1"},
        "since": T0,
        "observed_at": T0 + timedelta(hours=1),
        "evidence": {"util": 0.0},
        "recommendation": {"action": "stop"},
    }
    with Store.open(db) as store:
        store.record_findings([f], T0 + timedelta(hours=1), kinds=["idle_session"])
        store.record_findings(
            [{**f, "severity": "critical", "observed_at": T0 + timedelta(hours=2)}],
            T0 + timedelta(hours=2),
            kinds=["idle_session"],
        )
        (open_,) = store.findings()
        assert (
            open_["severity"] == "critical"
            and open_["since"] == T0
            and open_["subject"] == f["subject"]
        )
        store.record_findings([], T0 + timedelta(hours=3), kinds=["gpu_fragmentation"])
        assert len(store.findings()) == 1  # another detector's run leaves it open
        store.record_findings([], T0 + timedelta(hours=3), kinds=["idle_session"])
        assert store.findings() == []
        (closed,) = store.findings(open_only=False)
        assert closed["resolved_at"] == T0 + timedelta(hours=3)


def test_actions_and_alert_state(db: Path) -> None:
    """Actions append to the audit log; alert state upserts by alert id, keeping ``since``
    while the state holds and the last notification time when none is given."""
    with Store.open(db) as store:
        store.record_actions(
            [
                {
                    "id": "a1",
                    "kind": "stop-notebook",
                    "finding_id": "f1",
                    "dry_run": False,
                    "result": "ok",
                }
            ],
            T0,
        )
        store.save_alert_state([{"alert_id": "x", "state": "pending"}], T0)
        store.save_alert_state(
            [{"alert_id": "x", "state": "firing", "last_notified_at": T0}],
            T0 + timedelta(minutes=5),
        )
        assert rows(store, "SELECT id, ts, kind, finding_id, dry_run, result FROM actions") == [
            ("a1", T0, "stop-notebook", "f1", False, "ok")
        ]
        store.save_alert_state([{"alert_id": "x", "state": "firing"}], T0 + timedelta(minutes=9))
        state = store.alert_states()["x"]
        assert state["state"] == "firing" and state["updated_at"] == T0 + timedelta(minutes=9)
        assert rows(store, "SELECT since, last_notified_at FROM alert_state") == [
            (T0 + timedelta(minutes=5), T0)
        ]


def test_named_queries_load_from_package_data() -> None:
    """gpuscope/collector/storage/sql/queries.sql ships with the package and every query the store uses is in it."""
    assert {"append_samples", "update_series", "rollup_5m", "export_day", "scd_close"} <= Q.keys()
    assert all(q.strip() for q in Q.values())


def test_a_cycle_is_one_transaction_with_the_same_results_as_single_appends(
    tmp_path: Path,
) -> None:
    """append_cycle stores several targets (and the down ones) exactly as append_scrape does
    one by one: same samples, counter increases, scrapes rows and workload intervals."""
    pod = labels(
        node="n1",
        gpu="0",
        uuid="GPU-0",
        mig_instance="",
        namespace="ml",
        pod="nb",
        container="main",
        workload_kind="interactive",
        interactive="true",
        project="p",
    )
    other = labels(node="n2", gpu="0", uuid="GPU-9", mig_instance="")
    t = [T0 + timedelta(seconds=15 * i) for i in range(4)]

    def scrapes(i: int) -> list[Batch]:
        first = [(INFO, pod, 1.0)] if i < 2 else []  # the pod leaves after two scrapes
        return [
            batch(t[i], *first, (UTIL, GPU0, 0.1 * i), (ENERGY, GPU0, 100.0 + i), target="t1"),
            batch(t[i], (UTIL, other, 0.5), (ENERGY, other, 50.0 - i), target="t2"),
        ]

    one, many = tmp_path / "one.duckdb", tmp_path / "many.duckdb"
    with Store.open(one) as store:
        for i in range(4):
            for b in scrapes(i):
                store.append_scrape(b, duration_s=0.01)
            store.record_scrape("t3", t[i], up=False, duration_s=1.0, error="timeout")
    with Store.open(many) as store:
        for i in range(4):
            counts = store.append_cycle(
                [(b, 0.01) for b in scrapes(i)],
                [("t3", t[i].replace(tzinfo=UTC).timestamp(), 1.0, "timeout")],
            )
            assert counts == [3 if i < 2 else 2, 2]  # t1 loses its workload series at i=2
    queries = (
        "SELECT s.metric, s.node, x.ts, x.value FROM samples x JOIN series s USING (series_id) "
        "ORDER BY ALL",
        "SELECT target, ts, up, samples, error FROM scrapes ORDER BY ALL",
        "SELECT namespace, pod, start_ts, last_seen, end_ts FROM workload_intervals ORDER BY ALL",
        "SELECT value FROM meta WHERE key = 'samples_stored'",
    )
    with Store.open(one, read_only=True) as a, Store.open(many, read_only=True) as b:
        for sql in queries:
            assert rows(a, sql) == rows(b, sql), sql
        energy = [r[3] for r in rows(b, queries[0]) if r[0] == ENERGY and r[1] == "n2"]
    assert energy == [0.0, 49.0, 48.0, 47.0]  # a falling counter is a reset each time


def test_a_failed_cycle_leaves_nothing_behind(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error after the samples of a cycle went in rolls back every target of it."""
    pod = labels(
        node="n1",
        gpu="0",
        uuid="GPU-0",
        mig_instance="",
        namespace="ml",
        pod="nb",
        container="main",
        workload_kind="batch",
        interactive="false",
        project="p",
    )
    with Store.open(db) as store:
        store.append_cycle([(batch(T0, (UTIL, GPU0, 0.5)), 0.0)])

        def explode(*args: object, **kwargs: object) -> set[tuple[str, ...]]:
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(store, "_update_intervals", explode)
        later = T0 + timedelta(seconds=15)
        with pytest.raises(RuntimeError):
            store.append_cycle(
                [
                    (batch(later, (UTIL, GPU0, 0.6), target="t1"), 0.0),
                    (batch(later, (INFO, pod, 1.0), (UTIL, GPU1, 0.7), target="t2"), 0.0),
                ]
            )
        monkeypatch.undo()
        assert store.samples_stored() == 1
        assert rows(store, "SELECT count(*) FROM samples") == [(1,)]
        assert rows(store, "SELECT count(*) FROM series") == [(1,)]
        assert rows(store, "SELECT count(*) FROM scrapes") == [(1,)]
        store.append_cycle([(batch(later, (UTIL, GPU1, 0.7), target="t2"), 0.0)])
        assert store.series_id(UTIL, GPU1) == 1


def test_a_v6_database_gains_the_budgets_table_and_keeps_its_inventory(db: Path) -> None:
    """v7 adds inventory_pdbs beside the inventory a v6 database already holds."""
    con = duckdb.connect(str(db))
    assert migrate(con, target=6) == 6
    con.execute("INSERT INTO inventory_nodes VALUES ('n1', '{\"name\": \"n1\"}', ?, NULL)", [T0])
    con.close()
    with Store.open(db) as store:
        assert store.schema_version == 10
        assert rows(store, "SELECT key FROM inventory_nodes") == [("n1",)]
        store.record_inventory(
            T0, pdbs=[{"namespace": "ml", "name": "keep", "disruptions_allowed": 0}]
        )
        assert rows(store, "SELECT key FROM inventory_pdbs WHERE valid_to IS NULL") == [
            ("ml/keep",)
        ]


def test_a_v8_idle_state_gains_a_read_bound_of_none(db: Path) -> None:
    """v9 adds gpu_activity_state.lookback_from; a state saved before it has none, so its
    next fold reads the whole look-back (gpuscope/analytics/detectors/idle_reads.py)."""
    con = duckdb.connect(str(db))
    assert migrate(con, target=8) == 8
    con.execute(
        "INSERT INTO gpu_activity_state VALUES ('GPU-1', ?, 0.5, ?, ?, 'utilization')",
        [T0, T0, T0],
    )
    con.close()
    with Store.open(db) as store:
        assert store.schema_version == 10
        assert rows(store, "SELECT uuid, lookback_from FROM gpu_activity_state") == [
            ("GPU-1", None)
        ]


def test_a_v9_idle_state_gains_a_spacing_of_none(db: Path) -> None:
    """v10 adds gpu_activity_state.spacing; a state saved before it has none, so the next
    fold reads that key's look-back as before (gpuscope/analytics/detectors/idle_reads.py)."""
    con = duckdb.connect(str(db))
    assert migrate(con, target=9) == 9
    con.execute(
        "INSERT INTO gpu_activity_state VALUES ('GPU-1', ?, 0.5, ?, ?, 'utilization', ?)",
        [T0, T0, T0, T0],
    )
    con.close()
    with Store.open(db) as store:
        assert store.schema_version == 10
        assert rows(store, "SELECT uuid, lookback_from, spacing FROM gpu_activity_state") == [
            ("GPU-1", T0, None)
        ]

"""The writer's log (collector/storage/writer_log.py): a steady cycle appends, it updates no
row; once a minute a cycle folds the log into series and meta; and a writer killed before
a fold loses and repeats nothing (counters continue, samples_stored counts every row)."""

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Q, Store

T0 = datetime(2025, 3, 3, 10, 0, 0)  # on a whole minute
ENERGY = "gpuscope_gpu_energy_joules_total"
UTIL = "gpuscope_gpu_utilization_ratio"
TYPES = {"gpuscope_gpu_energy_joules": "counter", UTIL: "gauge"}
GPUS = [(("gpu", str(i)), ("node", "n1"), ("uuid", f"GPU-{i}")) for i in range(4)]


def cycle(store: Store, at: datetime, energy: float, target: str = "t1") -> None:
    """One scrape of a page of 4 GPUs: an energy counter (``energy`` + i) and a gauge each."""
    names = [ENERGY] * 4 + [UTIL] * 4
    values = [energy + i for i in range(4)] + [0.25 * i for i in range(4)]
    ms = int(at.replace(tzinfo=UTC).timestamp() * 1000)
    store.append_cycle([(Batch(target, ms, names, GPUS + GPUS, values, TYPES), 0.01)])


def statements(store: Store, run: Any) -> list[str]:
    """The statements (comments left out) the store's connection ran while ``run()`` ran
    (DuckDB's query log)."""
    con = store._con
    con.execute("CALL enable_logging('QueryLog')")
    con.execute("CALL truncate_duckdb_logs()")
    run()
    got = con.execute(
        "SELECT message FROM duckdb_logs() WHERE type = 'QueryLog' ORDER BY timestamp"
    ).fetchall()
    con.execute("CALL disable_logging()")
    code = (" ".join(x for x in m.splitlines() if not x.startswith("--")) for (m,) in got)
    return [" ".join(c.split()) for c in code if "duckdb_logs" not in c]


def durable(path: Path) -> tuple[list[tuple[Any, ...]], int, int]:
    """(series' last_seen and last_raw, meta's samples_stored, rows in samples) as a fresh
    writer finds the file."""
    with Store.open(path) as store:
        cur = store.cursor()
        series = cur.execute(
            "SELECT series_id, last_seen, last_raw FROM series ORDER BY series_id"
        ).fetchall()
        meta = cur.execute("SELECT value FROM meta WHERE key = 'samples_stored'").fetchone()
        count = cur.execute("SELECT count(*) FROM samples").fetchone()
        assert meta is not None and count is not None
        return series, int(meta[0]), int(count[0])


def test_a_steady_cycle_appends_three_rows_sets_and_updates_nothing(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb") as store:
        cycle(store, T0, 100.0)  # the first cycle folds (and creates the series)
        ran = statements(store, lambda: cycle(store, T0 + timedelta(seconds=5), 110.0))
        writes = [s for s in ran if s not in ("BEGIN TRANSACTION", "COMMIT")]
        assert len(writes) == 3, ran  # samples, the log, the scrape row
        assert all(s.startswith("INSERT") for s in writes), ran
        # a new minute of sample time: the cycle folds (series, meta, the log emptied)
        ran = statements(store, lambda: cycle(store, T0 + timedelta(seconds=60), 120.0))
        assert any(s.startswith("UPDATE series") for s in ran), ran
        assert any(s.startswith("UPDATE meta") for s in ran), ran
        assert any(s.startswith("DELETE FROM writer_log") for s in ran), ran
        assert store.cursor().execute("SELECT count(*) FROM writer_log").fetchone() == (0,)


def test_the_log_holds_only_counters_that_changed_and_the_count(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb") as store:
        cycle(store, T0, 100.0)
        cycle(store, T0 + timedelta(seconds=5), 110.0)  # every counter moved
        cycle(store, T0 + timedelta(seconds=10), 110.0)  # none moved
        logged = (
            store.cursor()
            .execute("SELECT seq, series_id IS NULL, value FROM writer_log ORDER BY seq, series_id")
            .fetchall()
        )
    counts = [r for r in logged if r[1]]
    raws = [r for r in logged if not r[1]]
    assert [r[2] for r in counts] == [8.0, 8.0]  # one count row per cycle, 8 samples each
    assert sorted(r[2] for r in raws) == [110.0, 111.0, 112.0, 113.0]  # the second cycle's


def test_a_killed_writer_loses_and_repeats_nothing(tmp_path: Path) -> None:
    """The same cycles, one store closed cleanly and one whose connection is dropped
    without its fold (as a kill leaves it): reopened, both hold the same series rows and
    count, the count equals the rows, and the next counter sample continues from the last
    raw value committed (an increase of 5, not a reset)."""
    clean, killed = tmp_path / "clean.duckdb", tmp_path / "killed.duckdb"
    for path in (clean, killed):
        store = Store.open(path)
        for k in range(6):  # one minute: the first cycle folds, the five others log
            cycle(store, T0 + timedelta(seconds=5 * k), 100.0 + 10 * k)
        if path == killed:
            cur = store.cursor()
            assert cur.execute("SELECT count(*) FROM writer_log").fetchone() != (0,)
            cur.close()
            store._con.close()  # no fold: what a SIGKILL leaves
        else:
            store.close()
    with Store.open(killed, read_only=True) as ro:  # read-only: meta's count plus the log's
        assert ro.samples_stored() == 48
    assert durable(clean) == durable(killed)
    series, stored, count = durable(killed)
    assert stored == count == 48
    assert [r[2] for r in series[:4]] == [150.0, 151.0, 152.0, 153.0]  # the energy counters
    assert {r[1] for r in series} == {T0 + timedelta(seconds=25)}
    with Store.open(killed) as store:
        cycle(store, T0 + timedelta(seconds=30), 155.0)
        last = (
            store.cursor()
            .execute("SELECT value FROM samples WHERE series_id = 0 ORDER BY ts DESC LIMIT 1")
            .fetchone()
        )
        assert last == (5.0,)
        assert store.samples_stored() == 56


def test_a_cycle_that_fails_leaves_the_log_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle rolled back after its log rows were written (its scrape rows fail) leaves the
    log, the count and the counters' memory as they were: the next cycle's increase is from
    the last committed value."""
    with Store.open(tmp_path / "s.duckdb") as store:
        cycle(store, T0, 100.0)
        cycle(store, T0 + timedelta(seconds=5), 110.0)
        before = store.cursor().execute("SELECT * FROM writer_log ORDER BY ALL").fetchall()
        with monkeypatch.context() as m:
            m.setitem(Q, "insert_scrapes", "SELECT no_such_column")
            with pytest.raises(duckdb.Error):
                cycle(store, T0 + timedelta(seconds=10), 500.0)
        assert store.cursor().execute("SELECT * FROM writer_log ORDER BY ALL").fetchall() == before
        cycle(store, T0 + timedelta(seconds=15), 115.0)
        assert store.samples_stored() == 24
        last = (
            store.cursor()
            .execute("SELECT value FROM samples WHERE series_id = 0 ORDER BY ts DESC LIMIT 1")
            .fetchone()
        )
        assert last == (5.0,)
    assert durable(tmp_path / "s.duckdb")[1:] == (24, 24)


def test_an_open_folds_a_log_left_behind_before_reading_it(tmp_path: Path) -> None:
    """A log the previous writer left (killed) is folded when the file is opened read-write:
    the log is empty afterwards and meta alone counts every sample."""
    path = tmp_path / "s.duckdb"
    store = Store.open(path)
    for k in range(3):
        cycle(store, T0 + timedelta(seconds=5 * k), 100.0 + k)
    store._con.close()
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM writer_log").fetchone() != (0,)
    with Store.open(path) as store:
        cur = store.cursor()
        assert cur.execute("SELECT count(*) FROM writer_log").fetchone() == (0,)
        assert cur.execute("SELECT value FROM meta WHERE key = 'samples_stored'").fetchone() == (
            "24",
        )


def test_a_cycle_of_targets_down_logs_nothing(tmp_path: Path) -> None:
    """A cycle that stored no sample (every target down) adds no row to the log (a count row
    of 0 would only widen what a recovery after a kill reads), and still its scrape row."""
    with Store.open(tmp_path / "s.duckdb") as store:
        cycle(store, T0, 100.0)
        cycle(store, T0 + timedelta(seconds=5), 110.0)
        cur = store.cursor()
        before = cur.execute("SELECT count(*) FROM writer_log").fetchone()
        at = (T0 + timedelta(seconds=10)).replace(tzinfo=UTC).timestamp()
        store.append_cycle([], [("t1", at, 1.0, "timeout")])
        assert cur.execute("SELECT count(*) FROM writer_log").fetchone() == before
        assert cur.execute("SELECT count(*) FROM scrapes WHERE NOT up").fetchone() == (1,)
        assert store.samples_stored() == 16

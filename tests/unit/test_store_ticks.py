"""A few ticks in one transaction (Store.append_ticks, the scrape loop's grouped commit)
store exactly what append_cycle of each tick in turn stores: samples, series, scrapes (the
targets that answered and those that did not), workload intervals, samples_stored, the
counters' last raw values through the writer log, and the writer's memory after it."""

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from gpuscope.collector.storage.store_ticks import Tick
from tests.unit.test_store_bulk import T0, TYPES, UTIL, cycle, gpu, rows


def tick(k: int) -> Tick:
    """Cycle ``k`` of test_store_bulk (a counter reset and a NaN, pods leaving and coming
    back, new series mid-run), with node c down every third tick."""
    ts = (T0 + timedelta(seconds=20 * k)).timestamp()
    down = [("http://c/metrics", ts, 0.2, "connection refused")] if k % 3 == 0 else []
    return cycle(k), down


@pytest.mark.parametrize(("first", "size"), [(0, 3), (2, 3), (5, 4), (1, 2)])
def test_ticks_in_one_transaction_store_what_each_alone_stores(
    tmp_path: Path, first: int, size: int
) -> None:
    """The first ``first`` ticks one by one in both stores, then the rest one by one or in
    runs of ``size``; the writer log is compared unfolded (samples_stored as a reader
    reopening the file after a kill sees it) and folded; then one more tick alone in both
    (the writer's memory after the runs is the same)."""
    ticks = [tick(k) for k in range(15)]
    with Store.open(tmp_path / "one.duckdb") as one, Store.open(tmp_path / "run.duckdb") as run:
        for t in ticks[:first]:
            one.append_cycle(*t)
            run.append_cycle(*t)
        rest = ticks[first:-1]
        by_one = [one.append_cycle(*t) for t in rest]
        by_run = [
            c for i in range(0, len(rest), size) for c in run.append_ticks(rest[i : i + size])
        ]
        assert by_run == by_one
        assert run.samples_stored() == one.samples_stored() > 0
        assert one.append_cycle(*ticks[-1]) == run.append_cycle(*ticks[-1])
        got, want = rows(run), rows(one)
        assert got == want
        assert len(got["intervals"]) == 3  # p1 twice (it left and came back), p2 once
        assert sum(1 for r in got["scrapes"] if not r[2]) == 5  # c down at 0, 3, .. 12


def test_a_run_killed_before_its_fold_is_recovered_as_ticks_alone(tmp_path: Path) -> None:
    """A run that only appends to the writer log (no fold: its sample times in the minute of
    the last fold), the store then left without closing (a killed writer): reopening folds
    the log into the same series and samples_stored as the ticks stored one by one. In the
    run node a's energy counter rises (tick 8), then is NaN (tick 9, 10 s later): its last
    raw value is the one before the NaN, and it changed in the run."""
    late = [
        (dataclasses.replace(b, ts_ms=b.ts_ms - 10_000), d) for b, d in cycle(9)
    ]  # 170 s: the minute of ticks 6..8
    ticks = [*(tick(k) for k in range(9)), (late, [])]
    paths = {name: tmp_path / f"{name}.duckdb" for name in ("one", "run")}
    one, run = Store.open(paths["one"]), Store.open(paths["run"])
    for t in ticks[:-2]:  # tick 6 folds (a new minute), 7 logs
        one.append_cycle(*t)
        run.append_cycle(*t)
    for t in ticks[-2:]:
        one.append_cycle(*t)
    run.append_ticks(ticks[-2:])
    assert run._wlog.rows > 0  # logged, not folded
    for store in (one, run):
        store._con.close()  # no fold_log: as a SIGKILL leaves the file
    with Store.open(paths["one"]) as one, Store.open(paths["run"]) as run:
        assert run.samples_stored() == one.samples_stored() > 0
        assert rows(run) == rows(one)


def test_a_refused_run_stores_nothing_and_leaves_the_writer_as_it_was(tmp_path: Path) -> None:
    """A run with a batch the store refuses (a sample time out of range, in its last
    tick) stores none of its ticks; the ticks stored after it are those append_cycle
    would store."""
    ticks = [tick(k) for k in range(8)]
    with Store.open(tmp_path / "one.duckdb") as one, Store.open(tmp_path / "run.duckdb") as run:
        for t in ticks[:2]:
            one.append_cycle(*t)
            run.append_cycle(*t)
        bad = Batch("http://c/metrics", 2**62, [UTIL], [gpu("c", 0)], [0.5], TYPES)
        with pytest.raises(ValueError, match="out of range"):
            run.append_ticks([ticks[2], ticks[3], ([(bad, 0.0)], [])])
        assert run.samples_stored() == one.samples_stored()
        for t in ticks[2:]:
            one.append_cycle(*t)
        run.append_ticks(ticks[2:5])
        run.append_ticks(ticks[5:])
        assert rows(run) == rows(one)


def test_a_run_of_ticks_with_every_target_down_stores_their_scrapes_rows(tmp_path: Path) -> None:
    """Ticks where no target answered (an agent gone), alone in a run and beside ticks that
    stored samples, store the same rows as each tick alone."""
    downs = [([], [("http://a/metrics", (T0 + timedelta(seconds=s)).timestamp(), 0.0, "refused")])
             for s in (200, 205, 210, 215)]  # fmt: skip
    ticks = [tick(0), tick(1), *downs[:2], tick(11), *downs[2:]]
    with Store.open(tmp_path / "one.duckdb") as one, Store.open(tmp_path / "run.duckdb") as run:
        by_one = [one.append_cycle(*t) for t in ticks]
        by_run = run.append_ticks(ticks[:2]) + run.append_ticks(ticks[2:4])
        by_run += run.append_ticks(ticks[4:])
        assert by_run == by_one
        got = rows(run)
        assert got == rows(one)
        assert sum(1 for r in got["scrapes"] if r[5] == "refused") == 4


def test_a_run_that_fails_in_its_transaction_is_rolled_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error after the run's samples went in (its intervals' statements come last) rolls
    the whole run back, and the writer's memory with it: the same ticks stored again after
    it leave the rows append_cycle leaves."""
    ticks = [tick(k) for k in range(10)]
    with Store.open(tmp_path / "one.duckdb") as one, Store.open(tmp_path / "run.duckdb") as run:
        for t in ticks[:4]:
            one.append_cycle(*t)
            run.append_cycle(*t)

        def explode(*args: object, **kwargs: object) -> set[tuple[str, ...]]:
            raise RuntimeError("disk on fire")

        with monkeypatch.context() as m:
            m.setattr(run, "_update_intervals", explode)
            with pytest.raises(RuntimeError, match="disk on fire"):
                run.append_ticks(ticks[4:7])  # p1 leaves at 5: an interval closes
        assert run.samples_stored() == one.samples_stored()
        for t in ticks[4:]:
            one.append_cycle(*t)
        run.append_ticks(ticks[4:7])
        run.append_ticks(ticks[7:])
        assert rows(run) == rows(one)

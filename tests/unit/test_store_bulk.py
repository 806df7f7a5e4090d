"""A run of cycles in one transaction (Store.append_cycles, the demo's week) stores exactly
what append_cycle of each cycle in turn stores: samples, series, scrapes, workload
intervals and the samples_stored count, and leaves the writer's memory the same."""

import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuscope.collector.scraping.batch import Batch, Labels
from gpuscope.collector.storage.store import Store
from gpuscope.demo.history import fill_history
from gpuscope.sim import SimulatedCluster, default_scenario

T0 = datetime(2025, 3, 3, 10, 0, 0, tzinfo=UTC)
UTIL = "gpuscope_gpu_utilization_ratio"
ENERGY = "gpuscope_gpu_energy_joules_total"
INFO = "gpuscope_gpu_workload_info"
TYPES = {"gpuscope_gpu_energy_joules": "counter", UTIL: "gauge", INFO: "gauge"}

#: Every table the write path fills, each in an order that does not depend on row order.
TABLES = {
    "samples": "SELECT * FROM samples ORDER BY series_id, ts",
    "series": "SELECT * FROM series ORDER BY series_id",
    "scrapes": "SELECT * FROM scrapes ORDER BY target, ts",
    "intervals": "SELECT * FROM workload_intervals ORDER BY ALL",
    "meta": "SELECT * FROM meta ORDER BY key",
}


def _nan(value: object) -> object:
    """NaN as a string, so that rows with NaN compare equal."""
    return "nan" if isinstance(value, float) and math.isnan(value) else value


def rows(store: Store) -> dict[str, list[Any]]:
    """Every table's rows as the store leaves them durably: its log folded into series and
    meta first (as closing it does; writer_log.py)."""
    store.fold_log()
    cur = store.cursor()
    try:
        return {
            name: [tuple(map(_nan, r)) for r in cur.execute(sql).fetchall()]
            for name, sql in TABLES.items()
        }
    finally:
        cur.close()


def gpu(node: str, i: int) -> Labels:
    return (("gpu", str(i)), ("node", node), ("uuid", f"GPU-{node}-{i}"))


def workload(node: str, i: int, pod: str) -> Labels:
    return tuple(
        sorted(
            (*gpu(node, i), ("namespace", "team"), ("pod", pod), ("container", "main"),
             ("project", "team"), ("workload_kind", "notebook"), ("interactive", "true"))
        )
    )  # fmt: skip


def cycle(k: int) -> list[tuple[Batch, float]]:
    """Cycle ``k``: two targets every 20 s. Node a's energy counter resets at 6 and is NaN
    at 9; its pod p1 leaves at 5 and comes back at 8; p2 appears at 4 (new series in the
    middle of a run); node b's GPU 1 appears at 7; b is missing at 3."""
    ts = int((T0 + timedelta(seconds=20 * k)).timestamp() * 1000)
    out = []
    for node in ("a", "b"):
        if node == "b" and k == 3:
            continue
        names, labels, values = [], [], []
        for i in range(2 if node == "b" and k >= 7 else 1):
            energy = (float(k * 100) if k < 6 else float(k)) if k != 9 else math.nan
            names += [UTIL, ENERGY]
            labels += [gpu(node, i), gpu(node, i)]
            values += [0.1 * k, energy]
        if node == "a" and not 5 <= k < 8:
            names.append(INFO)
            labels.append(workload(node, 0, "p1"))
            values.append(1.0)
        if node == "a" and k >= 4:
            names.append(INFO)
            labels.append(workload(node, 0, "p2"))
            values.append(1.0)
        out.append((Batch(f"http://{node}/metrics", ts, names, labels, values, TYPES), 0.1))
    return out


@pytest.mark.parametrize("first", [0, 2, 5])
def test_a_run_stores_what_its_cycles_one_by_one_store(tmp_path: Path, first: int) -> None:
    """The first ``first`` cycles one by one in both stores (intervals open before the run,
    some closed and touched in it), then cycles 2..13 one by one or as runs of 4; then one
    more cycle one by one in both (the writer's memory after a run is the same)."""
    cycles = [cycle(k) for k in range(14)]
    with Store.open(tmp_path / "one.duckdb") as one, Store.open(tmp_path / "run.duckdb") as run:
        for c in cycles[:first]:
            one.append_cycle(c)
            run.append_cycle(c)
        by_one = sum(sum(one.append_cycle(c)) for c in cycles[first:-1])
        rest = cycles[first:-1]
        by_run = sum(run.append_cycles(rest[i : i + 4]) for i in range(0, len(rest), 4))
        assert by_run == by_one > 0
        assert rows(run) == rows(one)
        assert one.append_cycle(cycles[-1]) == run.append_cycle(cycles[-1])
        got, want = rows(run), rows(one)
        assert got == want
        assert len(got["intervals"]) == 3  # p1 twice (it left and came back), p2 once


def test_a_failed_run_leaves_nothing_and_the_writer_as_it_was(tmp_path: Path) -> None:
    """A run whose write fails stores none of its cycles, and the cycles stored after it
    are those append_cycle would store."""
    cycles = [cycle(k) for k in range(8)]
    with Store.open(tmp_path / "one.duckdb") as one, Store.open(tmp_path / "run.duckdb") as run:
        for c in cycles[:2]:
            one.append_cycle(c)
            run.append_cycle(c)
        bad = Batch("http://c/metrics", 2**62, [UTIL], [gpu("c", 0)], [0.5], TYPES)
        with pytest.raises(ValueError):
            run.append_cycles([cycles[2], [(bad, 0.0)]])
        for c in cycles[2:]:
            one.append_cycle(c)
        run.append_cycles(cycles[2:])
        assert rows(run) == rows(one)


def test_the_demos_history_in_runs_is_the_one_cycle_at_a_time(tmp_path: Path) -> None:
    """fill_history on a small simulated cluster (12 hours, pods coming and going): runs of
    50 cycles, their readings computed 50 times at once (the demo's way), and one
    append_cycle a cycle, each cycle's readings the simulator's at that time, store the
    same rows."""
    scenario = default_scenario(nodes=6)
    end = float(int(time.time()) // 86_400 * 86_400)
    origin = end - scenario.live_offset
    cluster = SimulatedCluster(scenario.model_copy(update={"origin": origin}))
    targets = {n: f"http://{n}:9400/metrics" for n in cluster.node_names}
    got = []
    for name, run_cycles in (("one", 1), ("run", 50)):
        with Store.open(tmp_path / f"{name}.duckdb") as store:
            n = fill_history(
                store, cluster, targets, start=end - 43_200, end=end, origin=origin,
                run_cycles=run_cycles,
            )  # fmt: skip
            got.append((n, rows(store)))
    assert got[0][0] > 0
    assert got[1] == got[0]
    assert got[0][1]["intervals"]  # workloads came and went

"""Readers that prefilter series by ``series.last_seen`` under the writer's log
(collector/storage/writer_log.py): between folds ``last_seen`` lags a series' newest
sample, by at most ``LAST_SEEN_LAG_S`` (a cycle that would make it lag more folds), and
each reader widens its prefilter by that much. Each test writes a store through
``append_cycle`` for a few minutes, then a few cycles more without a fold (less than a
minute of sample time after it), and asks about a window that starts after the last fold.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuscope.alerts.conditions import series_windows
from gpuscope.alerts.config import MetricRule
from gpuscope.analytics.detectors.bandwidth import run_bandwidth
from gpuscope.analytics.report.data import pod_usage
from gpuscope.analytics.runner import newest_data
from gpuscope.collector.http_api import api_queries
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from gpuscope.collector.storage.writer_log import FOLD_S, LAST_SEEN_LAG_S
from gpuscope.core.settings import AnalyticsSettings, Settings

T0 = datetime(2025, 3, 3, 10, 0, 0)  # on a whole minute
STEP = 5
#: the last cycle: 35 s into the store's seventh minute (its fold was at T0 + 360 s)
END = 395
UTIL = "gpuscope_gpu_utilization_ratio"
TX, RX = "gpuscope_ib_transmit_bytes_total", "gpuscope_ib_receive_bytes_total"
LINK = "gpuscope_ib_port_rate_bytes_per_second"
INFO = "gpuscope_gpu_workload_info"
TYPES = {INFO: "gauge", UTIL: "gauge", TX[:-6]: "counter", RX[:-6]: "counter", LINK: "gauge"}
RATE = 50e9
GPUS = [(("gpu", str(i)), ("node", "n1"), ("uuid", f"GPU-{i}")) for i in range(2)]
POD = (*GPUS[0], ("container", "main"), ("namespace", "ml"), ("pod", "train-0"))
PORT = (("device", "mlx5_0"), ("node", "n2"), ("port", "1"))


def ms(t: float) -> int:
    return int((T0 + timedelta(seconds=t)).replace(tzinfo=UTC).timestamp() * 1000)


def gpu_batch(t: float) -> Batch:
    """Two busy GPUs; a pod holds the first."""
    return Batch("gpus", ms(t), [UTIL, UTIL, INFO], [*GPUS, POD], [0.5, 0.75, 1.0], TYPES)


def port_batch(t: float) -> Batch:
    """An IB port at 95 % of its link rate since T0 (counters far from 0)."""
    tx = 1e12 + 0.95 * RATE * t
    return Batch("ib", ms(t), [TX, RX, LINK], [PORT] * 3, [tx, tx / 2, RATE], TYPES)


def write(store: Store, port_at: set[int]) -> None:
    """The GPUs every STEP s from T0 to END, the port at the times in ``port_at``."""
    for t in range(0, END + 1, STEP):
        batches = [(gpu_batch(t), 0.01)]
        if t in port_at:
            batches.append((port_batch(t), 0.01))
        store.append_cycle(batches)


def utc(t: float) -> datetime:
    return (T0 + timedelta(seconds=t)).replace(tzinfo=UTC)


@pytest.fixture
def gpus(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "g.duckdb") as store:
        write(store, set())
        yield store


@pytest.fixture
def port_back(tmp_path: Path) -> Iterator[Store]:
    """The port seen at T0, silent for six minutes, back after the last minute's fold."""
    with Store.open(tmp_path / "p.duckdb") as store:
        write(store, {0, *range(365, END + 1, STEP)})
        yield store


def test_the_scenario_leaves_last_seen_behind_the_newest_samples(gpus: Store) -> None:
    # the premise of the tests below: the GPUs' rows were last folded at T0 + 360 s
    cur = gpus.cursor()
    assert cur.execute("SELECT max(last_seen) FROM series").fetchone() == (
        T0 + timedelta(seconds=360),
    )
    assert cur.execute("SELECT max(ts) FROM samples").fetchone() == (T0 + timedelta(seconds=END),)
    assert 0 < END - 360 < FOLD_S <= LAST_SEEN_LAG_S


def test_a_series_back_after_a_silence_makes_its_cycle_fold(port_back: Store) -> None:
    # the bound the readers rely on holds for every series, a silent one included
    lags = (
        port_back.cursor()
        .execute(
            "SELECT s.node, epoch(max(x.ts) - max(s.last_seen)) FROM series AS s "
            "JOIN samples AS x USING (series_id) GROUP BY s.series_id, s.node ORDER BY ALL"
        )
        .fetchall()
    )
    assert {node for node, _ in lags} == {"n1", "n2"}
    assert all(lag <= LAST_SEEN_LAG_S for _, lag in lags), lags
    assert {lag for node, lag in lags if node == "n2"} == {END - 365}


def test_api_utilization_from_after_the_last_fold_has_every_gpu(gpus: Store) -> None:
    params = {
        "start": T0 + timedelta(seconds=370),
        "end": T0 + timedelta(seconds=END + 5),
        "step": 5.0,
        "node": None,
        "namespace": None,
        "project": None,
        "limit": 100,
        "offset": 0,
    }
    cur = gpus.cursor()
    rows = cur.execute(api_queries.UTILIZATION[("gpu", "raw")], params).fetchall()
    assert [key for key, _ in rows] == ["n1/0", "n1/1"]
    points = {key: json.loads(p) for key, p in rows}
    epoch = utc(0).timestamp()
    assert [p[0] - epoch for p in points["n1/1"]] == list(range(370, END + 1, STEP))
    assert {p[1] for p in points["n1/1"]} == {0.75}
    count = {k: params[k] for k in ("start", "node", "namespace", "project")}
    assert cur.execute(api_queries.UTILIZATION_KEYS["gpu"], count).fetchone() == (2,)


def test_bandwidth_finds_a_hot_port_whose_samples_all_follow_the_last_fold(
    port_back: Store,
) -> None:
    # a 30 s window (as the demo's 0.3 minutes): (T0 + 365 s, T0 + 395 s]
    settings = AnalyticsSettings(ib_hot_window_minutes=0.5)
    got = run_bandwidth(port_back.cursor(), utc(END), settings)
    hot = [f for f in got.findings if f.kind == "bandwidth_hotspot"]
    assert [(f.subject["node"], f.subject["device"]) for f in hot] == [("n2", "mlx5_0")]


def test_an_alert_rule_sees_a_series_back_after_a_silence(port_back: Store) -> None:
    rule = MetricRule(name="link", metric=LINK, window=30, lookback=60, aggregate="last")
    got = series_windows(port_back.cursor(), rule, utc(END))
    assert [(w.labels["node"], w.count, w.last, w.age_seconds) for w in got] == [
        ("n2", 6, RATE, 0.0)
    ]


def test_newest_data_is_the_newest_sample_not_the_last_fold(gpus: Store) -> None:
    assert newest_data(gpus.cursor()) == T0 + timedelta(seconds=END)


def test_report_use_of_a_window_after_the_last_fold_has_data(gpus: Store) -> None:
    # the pod held GPU 0 (at 50 %) over the whole 30 s: its use is known, not no_data
    got = pod_usage(gpus.cursor(), utc(365), utc(END), Settings()).to_dicts()
    assert [(r["pod"], r["no_data"], r["idle"]) for r in got] == [("train-0", 0.0, 0.0)]
    assert got[0]["allocated"] == pytest.approx(30 / 3600)
    assert got[0]["used"] == pytest.approx(0.5 * 30 / 3600)

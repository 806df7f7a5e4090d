"""Readers of a store written under fleet summaries (docs/scale.md, "Fleet summaries"): one
workload interval stands for every GPU the workload holds (its `gpu` label is the count,
collector/storage/held_gpus.py), where direct scraping has one a GPU. The store here holds
both shapes: ``ml/direct-0`` scraped directly (one GPU, every 60 s) and two workloads as
the fleet's summaries store them (every 5 minutes, at each bucket's last second):
``big/sum-0`` holding 4 GPUs, busy for 20 minutes then idle, and ``big/sum-1`` holding 1,
always busy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from gpuscope.analytics.queueing.quota import Q as QUOTA_Q
from gpuscope.analytics.report.data import SUMMARIES_NOTE, pod_usage
from gpuscope.analytics.report.inputs import create_held
from gpuscope.analytics.report.sql import Q as REPORT_Q
from gpuscope.analytics.report.sql import frame
from gpuscope.collector.http_api import api_queries
from gpuscope.collector.querying.fleet_summaries import UTILIZATION_MEAN, workload_key
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings

T0 = datetime(2025, 3, 3, 10, 0, 0)
END = 2400
UTIL = "gpuscope_gpu_utilization_ratio"
WUTIL = "gpuscope_gpu_workload_utilization_ratio"
INFO = "gpuscope_gpu_workload_info"
TYPES = {INFO: "gauge", UTIL: "gauge", WUTIL: "gauge", UTILIZATION_MEAN: "gauge"}
GPU0 = (("gpu", "0"), ("node", "n1"), ("uuid", "GPU-0"))
DIRECT = tuple(sorted((*GPU0, ("container", "main"), ("namespace", "ml"), ("pod", "direct-0"))))
#: the summaries' workloads: (pod, GPUs held, busy peak and GPUs' mean utilization while busy)
SUMMED = (("sum-0", 4, 0.8, 0.9), ("sum-1", 1, 0.3, 0.35))
#: sum-0 is busy before this (seconds after T0), idle (peak 0.01, mean 0.02) from it
IDLE_FROM = 1200
#: the window asked: 20 minutes, half of them sum-0 busy, half idle
LO, HI = 600, 1800


def at(t: float) -> datetime:
    return (T0 + timedelta(seconds=t)).replace(tzinfo=UTC)


def ms(t: float) -> int:
    return int(at(t).timestamp() * 1000)


def direct_batch(t: float) -> Batch:
    return Batch("direct", ms(t), [UTIL, INFO, WUTIL], [GPU0, DIRECT, DIRECT], [0.6, 1.0, 0.6], TYPES)  # fmt: skip


def summary_batch(t: float) -> Batch:
    """What fleet mode stores for a bucket: per workload its busy peak (under the agent's
    utilization name), its GPUs' mean utilization, its own utilization and its GPU count."""
    names: list[str] = []
    labels: list[tuple[tuple[str, str], ...]] = []
    values: list[float] = []
    for pod, gpus, busy_before, mean_before in SUMMED:
        idle = pod == "sum-0" and t >= IDLE_FROM
        busy, mean = (0.01, 0.02) if idle else (busy_before, mean_before)
        who = (("container", "main"), ("namespace", "big"), ("node", "n2"), ("pod", pod))
        keyed = tuple(sorted((*who, ("uuid", workload_key("big", pod, "main")))))
        info = tuple(sorted((*keyed, ("gpu", str(gpus)))))
        names += [UTIL, UTILIZATION_MEAN, WUTIL, INFO]
        labels += [keyed, keyed, keyed, info]
        values += [busy, mean, busy, 1.0]
    return Batch("fleet", ms(t), names, list(labels), values, TYPES)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with Store.open(tmp_path_factory.mktemp("summaries") / "s.duckdb") as s:
        for t in range(0, END + 1, 60):
            s.append_cycle([(direct_batch(t), 0.01)])
            if t % 300 == 240:  # a bucket's summaries at its last second
                s.append_cycle([(summary_batch(t + 59), 0.01)])
        yield s


def usage(store: Store) -> dict[str, dict[str, float]]:
    cur = store.cursor()
    try:
        rows = pod_usage(cur, at(LO), at(HI), Settings()).to_dicts()
    finally:
        cur.close()
    return {f"{r['namespace']}/{r['pod']}": r for r in rows}


def test_the_report_counts_every_gpu_a_workload_key_holds(store: Store) -> None:
    got = usage(store)
    third = (HI - LO) / 3600
    direct, four, one = got["ml/direct-0"], got["big/sum-0"], got["big/sum-1"]
    assert direct["allocated"] == pytest.approx(third)
    assert one["allocated"] == pytest.approx(third)
    assert four["allocated"] == pytest.approx(4 * third)  # 4x one GPU, not 1x
    # idle: the 10 minutes sum-0's peak was under the threshold, for each of its 4 GPUs
    assert four["idle"] == pytest.approx(4 * third / 2)
    assert direct["idle"] == one["idle"] == 0
    # used: each GPU at the workload's GPUs' mean utilization (0.9, then 0.02), not its
    # busy peak
    assert four["used"] == pytest.approx(4 * third / 2 * (0.9 + 0.02))
    assert one["used"] == pytest.approx(third * 0.35)
    assert direct["used"] == pytest.approx(third * 0.6)
    assert all(r["no_data"] == 0 for r in got.values())


def test_the_reports_pods_and_gpu_count_say_what_summaries_hold(store: Store) -> None:
    cur = store.cursor()
    params = {"lo": at(LO), "start": at(LO), "end": at(HI)}
    try:
        create_held(cur, params)
        pods = {r["pod"]: r["gpus"] for r in frame(cur, REPORT_Q["pods"], **params).to_dicts()}
        held = cur.execute(REPORT_Q["held_gpus"]).fetchone()
    finally:
        cur.close()
    assert pods == {"direct-0": 1, "sum-0": 4, "sum-1": 1}
    assert held == (6, 5)  # GPUs held; of them under summaries (the report's note says so)
    assert "mean utilization of its GPUs" in SUMMARIES_NOTE


def test_the_queue_models_gpu_hours_count_a_workload_keys_gpus(store: Store) -> None:
    cur = store.cursor()
    try:
        rows = cur.execute(QUOTA_Q["pod_gpu_hours"], {"lo": at(LO), "at": at(HI)}).fetchall()
    finally:
        cur.close()
    hours = {f"{ns}/{pod}": h for ns, pod, _, _, h in rows}
    third = (HI - LO) / 3600
    assert hours == pytest.approx(
        {"ml/direct-0": third, "big/sum-0": 4 * third, "big/sum-1": third}
    )


def _utilization(store: Store, by: str) -> dict[str, list[list[float]]]:
    params = {"start": at(LO), "end": at(HI), "step": 300.0, "node": None, "namespace": None,
              "project": None, "limit": 100, "offset": 0}  # fmt: skip
    cur = store.cursor()
    try:
        sql = api_queries.UTILIZATION_BY_GPUS.get((by, "raw"), api_queries.UTILIZATION[(by, "raw")])
        rows = cur.execute(sql, params).fetchall()
        summaries = cur.execute(
            api_queries.HAS_SUMMARIES[by],
            {k: params[k] for k in ("start", "node", "namespace", "project")},
        ).fetchone()
    finally:
        cur.close()
    assert summaries == (True,)
    return {key: json.loads(points) for key, points in rows}


def test_api_utilization_per_namespace_weighs_each_workload_by_its_gpus(store: Store) -> None:
    got = _utilization(store, "namespace")
    busy = [p for p in got["big"] if p[0] < at(IDLE_FROM).timestamp()]
    # (0.8 x 4 GPUs + 0.3 x 1) / 5 GPUs, over 5 GPUs: not (0.8 + 0.3) / 2 over 2 series
    assert busy and all(p[1:] == [pytest.approx(0.7), 5] for p in busy)
    assert {p[2] for p in _utilization(store, "workload")["big/sum-0"]} == {4}


def test_api_utilization_per_gpu_levels_leave_summaries_out(store: Store) -> None:
    # a summary is a workload's peak, not a GPU's utilization: only the direct GPU is there
    for by in ("cluster", "node", "gpu"):
        got = _utilization(store, by)
        assert [p[1:] for ps in got.values() for p in ps] == [[0.6, 1]] * 4, by
    assert not api_queries.SUMMARIES_NOTE[False].startswith(api_queries.SUMMARIES_NOTE[True])


def test_the_cull_arbiter_counts_a_workload_keys_gpus(store: Store) -> None:
    cur = store.cursor()
    try:
        row = cur.execute(api_queries.ARBITER_IDLE, {"namespace": "big", "pod": "sum-0"}).fetchone()
    finally:
        cur.close()
    assert row is not None and row[0] == 4


def test_the_api_answers_say_what_summaries_mean(store: Store) -> None:
    from fastapi.testclient import TestClient

    from gpuscope.collector.gauges.metrics import CollectorMetrics
    from gpuscope.collector.http_api.api import ApiState, create_app
    from gpuscope.collector.scraping.targets import TargetRegistry

    state = ApiState(store=store, targets=TargetRegistry([]), metrics=CollectorMetrics())
    client = TestClient(create_app(state))
    span = {"start": at(LO).isoformat(), "end": at(HI).isoformat(), "step": 300}
    notes = {by: client.get("/api/v1/utilization", params={**span, "by": by}).json()["note"]
             for by in ("cluster", "gpu", "namespace", "workload")}  # fmt: skip
    assert notes["cluster"] == notes["gpu"] == api_queries.SUMMARIES_NOTE[True]
    assert notes["namespace"] == notes["workload"] == api_queries.SUMMARIES_NOTE[False]
    assert "cannot be computed" in notes["gpu"] and "upper bound" in notes["namespace"]
    arbiter = client.get("/api/v1/arbiter/idle", params={"namespace": "big", "pod": "sum-0"})
    assert arbiter.json()["gpus"] == 4


def test_the_idle_policy_replay_counts_a_workload_keys_gpus(store: Store) -> None:
    from gpuscope.analytics.idle_whatif.read import read_inputs

    cur = store.cursor()
    try:
        got = read_inputs(cur, at(LO), at(HI), Settings(), look_back=timedelta(0), every=True)
    finally:
        cur.close()
    pods = dict(got.sessions.select("pid", "pod").iter_rows())
    hours = {
        pods[pid]: h
        for pid, h in got.runs.group_by("pid").agg(pl.col("gpu_hours").sum()).iter_rows()
    }
    idle = {
        pods[pid]: h
        for pid, h in got.runs.filter(pl.col("state") == "I")
        .group_by("pid")
        .agg(pl.col("gpu_hours").sum())
        .iter_rows()
    }
    third = (HI - LO) / 3600
    assert hours == pytest.approx({"direct-0": third, "sum-0": 4 * third, "sum-1": third})
    assert idle == pytest.approx({"sum-0": 4 * third / 2})


def test_no_summary_gpu_count_is_read_as_a_gpu_index(store: Store) -> None:
    from gpuscope.analytics.detectors.bandwidth import Q as BANDWIDTH_Q
    from gpuscope.analytics.runner import gpu_indices_of

    cur = store.cursor()
    try:
        assert gpu_indices_of(cur) == {"ml/direct-0": [0]}
        span = {"start": at(LO), "end": at(HI)}
        held = cur.execute(REPORT_Q["gpu_intervals"], span).fetchall()
        workloads = cur.execute(
            BANDWIDTH_Q["node_workloads"], {"at": at(HI), "nodes": ["n1", "n2"]}
        ).fetchall()
    finally:
        cur.close()
    assert [(key, gpu) for key, gpu, _, _ in held] == [("ml/direct-0", 0)]
    assert {pod: gpus for _, _, pod, _, _, gpus in workloads} == {
        "direct-0": ["0"],
        "sum-0": [],
        "sum-1": [],
    }

"""Idle through gaps (issue 21): a gap in data is judged by the samples on both sides, the
same way by the idle detector and by the weekly report.

What was seen: a notebook busy until 11:00 and idle until 15:00, scraped every 60 s with
jitter, with one 20-minute collector gap at 12:29-12:50. The detector said "idle since
12:50, 2.17 GPU-h" (the gap restarted its idle clock), the weekly report counted 3.75 GPU-h
(the gap's buckets as no data); the truth by construction is 4.0.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuscope.analytics.detectors.idle_gaps import bridged
from gpuscope.analytics.report.data import pod_usage
from gpuscope.analytics.runner import run_on_store
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 4, 10, 0)  # a Tuesday
EPOCH = datetime(1970, 1, 1)
UTIL = "gpuscope_gpu_utilization_ratio"
INFO = "gpuscope_gpu_workload_info"


def write_notebook(
    store: Store, *, busy_until: datetime, end: datetime, gap: tuple[datetime, datetime],
    busy_level: float = 0.6, seed: int = 7,
) -> None:  # fmt: skip
    """One node, one GPU, one notebook holding it from T0: busy at ``busy_level`` until
    ``busy_until``, idle (1 %) after; a scrape every 60 s with up to 3 s of jitter, none in
    ``gap``."""
    rng = random.Random(seed)
    node = NodeInfo(name="n1", gpu_model="H100", allocatable_gpus=1, cpu_milli=64000)
    pod = PodInfo(
        namespace="research", name="nb-alice-0", uid="u1", node="n1", phase="Running",
        start_time=(T0 - EPOCH).total_seconds(), gpu_request=1, gpu_fraction=None,
        project="research", owner_kind="Notebook", owner_name="nb-alice",
        pending_reason="",
    )  # fmt: skip
    store.record_inventory(T0, nodes=[node], pods=[pod], quotas=[])
    gpu = {"node": "n1", "gpu": "0", "uuid": "GPU-n1-0", "mig_instance": ""}
    who = gpu | {"namespace": "research", "pod": "nb-alice-0", "container": "main"}
    info = who | {"workload_kind": "interactive", "project": "research", "interactive": "true"}
    t = T0
    while t <= end:
        ts = t + timedelta(seconds=rng.uniform(0, 3)) if T0 < t < end else t
        if not (gap[0] < ts < gap[1]):
            value = busy_level if ts <= busy_until else 0.01
            ms = int(ts.replace(tzinfo=UTC).timestamp() * 1000)
            names = [UTIL, INFO]
            labels = [tuple(sorted(gpu.items())), tuple(sorted(info.items()))]
            store.append_cycle([(Batch("n1", ms, names, labels, [value, 1.0], {}), 0.01)])
        t += timedelta(seconds=60)


def _cfg() -> Settings:
    return Settings.model_validate({"collector": {"scrape_interval_seconds": 60}})


def test_an_idle_notebook_stays_idle_through_a_gap_in_data(tmp_path: Path) -> None:
    """Regression: detector and report both count 4.0 GPU-h (not 2.17 and 3.75), the
    detector's idle-since is 11:00 (not 12:50), and the finding says it was idle through
    a 21-minute gap in data."""
    end = T0 + timedelta(hours=5)
    gap = (T0 + timedelta(hours=2, minutes=29, seconds=30), T0 + timedelta(hours=2, minutes=50))
    with Store.open(tmp_path / "g.duckdb") as store:
        write_notebook(store, busy_until=T0 + timedelta(hours=1), end=end, gap=gap)
        idle = run_on_store(store, end, _cfg(), ["idle"], persist=False)["idle"]
        [f] = [f for f in idle.findings if f.kind == "idle_session"]
        assert f.since is not None
        assert abs(f.since - (T0 + timedelta(hours=1))) <= timedelta(seconds=65), f.since
        assert f.evidence["gpu_hours_wasted"] == pytest.approx(4.0, abs=0.02)
        assert f.evidence["note"] == "idle through a 21-minute gap in data"
        assert f.evidence["data_gap_minutes"] == pytest.approx(21, abs=0.6)
        usage = pod_usage(store.cursor(), T0, end, _cfg()).to_dicts()
        [row] = [r for r in usage if r["pod"] == "nb-alice-0"]
        assert row["idle"] == pytest.approx(4.0, abs=300 / 3600)
        assert row["no_data"] == pytest.approx(0.0, abs=1e-6)
        # the detector's and the report's figures agree from the detector's idle-since on
        since_on = pod_usage(store.cursor(), f.since, end, _cfg()).to_dicts()[0]
        assert since_on["idle"] == pytest.approx(f.evidence["gpu_hours_wasted"], abs=300 / 3600)


def test_a_gap_next_to_busy_data_is_unknown_not_idle(tmp_path: Path) -> None:
    """A session busy on one side of a gap (here: busy until the gap starts) is unknown
    during it: the detector's idle clock starts after the gap, the report counts the gap
    as no data and only the time after it as idle."""
    end = T0 + timedelta(hours=5)
    gap = (T0 + timedelta(hours=2, minutes=29, seconds=30), T0 + timedelta(hours=2, minutes=50))
    with Store.open(tmp_path / "b.duckdb") as store:
        write_notebook(store, busy_until=gap[0], end=end, gap=gap)
        idle = run_on_store(store, end, _cfg(), ["idle"], persist=False)["idle"]
        [f] = [f for f in idle.findings if f.kind == "idle_session"]
        assert f.since is not None and f.since >= gap[1]
        assert "note" not in f.evidence
        assert f.evidence["gpu_hours_wasted"] == pytest.approx(
            (end - gap[1]).total_seconds() / 3600, abs=0.02
        )
        [row] = pod_usage(store.cursor(), T0, end, _cfg()).to_dicts()
        assert row["no_data"] == pytest.approx(20 / 60, abs=2 * 300 / 3600)
        assert row["idle"] == pytest.approx(f.evidence["gpu_hours_wasted"], abs=300 / 3600)


def test_the_rule_is_idle_on_both_sides_and_not_too_long() -> None:
    assert bridged(False, False, 21 * 60)
    for before, after in [(True, False), (False, True), (True, True), (None, False),
                          (False, None), (None, None)]:  # fmt: skip
        assert not bridged(before, after, 21 * 60)
    assert not bridged(False, False, 24 * 3600)  # a day without data stays unknown


def test_a_window_inside_the_held_time_counts_only_its_own_hours(tmp_path: Path) -> None:
    """The report reads held time past its range (a gap at the edge is judged by what lies
    beyond it), but counts only the range: a window from 10:37:20 to 13:02:40 inside a
    notebook's five hours is 2 h 25 min 20 s allocated, none of it unknown, and a gap that
    ends at the window's end is bridged by the idle sample just past it."""
    end = T0 + timedelta(hours=5)
    gap = (T0 + timedelta(hours=2, minutes=40), T0 + timedelta(hours=3, minutes=4))
    with Store.open(tmp_path / "g.duckdb") as store:
        write_notebook(store, busy_until=T0 + timedelta(minutes=20), end=end, gap=gap)
        lo = T0 + timedelta(minutes=37, seconds=20)
        hi = T0 + timedelta(hours=3, minutes=2, seconds=40)
        [row] = pod_usage(store.cursor(), lo, hi, _cfg()).to_dicts()
    assert row["allocated"] == pytest.approx((hi - lo).total_seconds() / 3600)
    assert row["no_data"] == pytest.approx(0)
    assert row["idle"] == pytest.approx(row["allocated"])


def test_each_idle_notebook_is_told_its_own_gap(tmp_path: Path) -> None:
    """Several idle notebooks in one run (their gaps are found by one query): each finding
    names the gap in its own data after its own idle-since, never another notebook's.
    Three notebooks, each on a node of its own (a gap is its agent's: no scrape), idle
    from 11:00, 11:40 and 13:00, with a 21-minute gap at 12:29, a 35-minute gap at 13:20,
    and a 30-minute gap at 11:50 for the last one, before it went idle (it was not idle
    through that one)."""
    end = T0 + timedelta(hours=5)
    specs = [  # (idle from, gap)
        (T0 + timedelta(hours=1), (T0 + timedelta(hours=2, minutes=29), T0 + timedelta(hours=2, minutes=50))),
        (T0 + timedelta(hours=1, minutes=40), (T0 + timedelta(hours=3, minutes=20), T0 + timedelta(hours=3, minutes=55))),
        (T0 + timedelta(hours=3), (T0 + timedelta(hours=1, minutes=50), T0 + timedelta(hours=2, minutes=20))),
    ]  # fmt: skip
    nodes = [
        NodeInfo(name=f"n{g}", gpu_model="H100", allocatable_gpus=1, cpu_milli=64000)
        for g in range(len(specs))
    ]
    pods = [
        PodInfo(
            namespace="research",
            name=f"nb-{g}",
            uid=f"u{g}",
            node=f"n{g}",
            phase="Running",
            start_time=(T0 - EPOCH).total_seconds(),
            gpu_request=1,
            gpu_fraction=None,
            project="research",
            owner_kind="Notebook",
            owner_name=f"nb-{g}",
            pending_reason="",
        )
        for g in range(len(specs))
    ]
    with Store.open(tmp_path / "m.duckdb") as store:
        store.record_inventory(T0, nodes=nodes, pods=pods, quotas=[])
        t = T0
        while t <= end:
            batches = []
            for g, (idle_from, gap) in enumerate(specs):
                if gap[0] < t < gap[1]:
                    continue
                gpu = {"node": f"n{g}", "gpu": "0", "uuid": f"GPU-n{g}-0", "mig_instance": ""}
                who = gpu | {"namespace": "research", "pod": f"nb-{g}", "container": "main"}
                info = who | {"workload_kind": "interactive", "project": "research",
                              "interactive": "true"}  # fmt: skip
                labels = [tuple(sorted(gpu.items())), tuple(sorted(info.items()))]
                value = 0.6 if t < idle_from else 0.01
                ms = int(t.replace(tzinfo=UTC).timestamp() * 1000)
                batches.append((Batch(f"n{g}", ms, [UTIL, INFO], labels, [value, 1.0], {}), 0.01))
            store.append_cycle(batches)
            t += timedelta(seconds=60)
        idle = run_on_store(store, end, _cfg(), ["idle"], persist=False)["idle"]
    found = {f.subject["pod"]: f for f in idle.findings if f.kind == "idle_session"}
    assert sorted(found) == ["nb-0", "nb-1", "nb-2"]
    assert found["nb-0"].evidence["data_gap_minutes"] == pytest.approx(21, abs=1.1)
    assert found["nb-1"].evidence["data_gap_minutes"] == pytest.approx(35, abs=1.1)
    assert "note" not in found["nb-2"].evidence  # its gap came before it went idle

"""Idle detection over constructed histories appended through a real Store.

Each history is scraped every 15 s from 10:00 to 11:00 (the time of analysis unless a test
says otherwise); a workload's interval starts with the first scrape that shows it, so the
answers (idle since, GPU-hours) are known by hand.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.detectors.idle import KINDS, activity_state, run_idle
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.records import Finding
from gpuscope.core.settings import AnalyticsSettings

T0 = datetime(2026, 3, 2, 10, 0)
END = T0 + timedelta(hours=1)
STEP = 15
MIN = timedelta(minutes=1)


@dataclass(frozen=True)
class Gpu:
    node: str
    index: int

    @property
    def uuid(self) -> str:
        return f"GPU-{self.node}-{self.index}"

    def labels(self) -> dict[str, str]:
        return {"node": self.node, "gpu": str(self.index), "uuid": self.uuid, "mig_instance": ""}


@dataclass(frozen=True)
class Work:
    namespace: str
    pod: str
    kind: str
    gpus: tuple[Gpu, ...]
    start: datetime = T0
    container: str = "main"


#: (gpu, ts) -> utilization, or None for no sample of that GPU at ts
Util = Callable[[Gpu, datetime], float | None]


def fill(
    store: Store,
    gpus: Iterable[Gpu],
    works: Iterable[Work],
    util: Util,
    *,
    start: datetime = T0,
    end: datetime = END,
    step: int = STEP,
    down: Callable[[str, datetime], bool] = lambda node, ts: False,
    sm_active: bool = False,
) -> None:
    """Scrape every node (one target each) every ``step`` seconds from start to end. Runs of
    cycles where every node answered are written in one transaction by ``append_cycles``
    (held equal to ``append_cycle`` one at a time by tests/unit/test_store_bulk.py); a cycle
    with a node down goes through ``append_cycle`` with its down targets."""
    gpus, works = list(gpus), list(works)
    nodes = sorted({g.node for g in gpus})
    ts = start
    run: list[list[tuple[Batch, float]]] = []
    while ts <= end:
        ms = int((ts - datetime(1970, 1, 1)).total_seconds() * 1000)
        batches: list[tuple[Batch, float]] = []
        missing: list[tuple[str, float, float, str]] = []
        for node in nodes:
            if down(node, ts):
                missing.append((node, ms / 1000, 0.0, "connection refused"))
                continue
            names: list[str] = []
            labels: list[tuple[tuple[str, str], ...]] = []
            values: list[float] = []
            for g in (g for g in gpus if g.node == node):
                value = util(g, ts)
                if value is None:
                    continue
                metric = "gpuscope_gpu_sm_active_ratio" if sm_active else None
                for m in filter(None, ("gpuscope_gpu_utilization_ratio", metric)):
                    names.append(m)
                    labels.append(tuple(sorted(g.labels().items())))
                    # with DCGM the NVML utilization reads high (kernels resident, SMs idle)
                    values.append(0.9 if sm_active and m.endswith("utilization_ratio") else value)
            for w in works:
                for g in w.gpus:
                    if g.node == node and ts >= w.start:
                        info = {
                            **g.labels(),
                            "namespace": w.namespace,
                            "pod": w.pod,
                            "container": w.container,
                            "workload_kind": w.kind,
                            "interactive": str(w.kind == "interactive").lower(),
                            "project": w.namespace,
                        }
                        names.append("gpuscope_gpu_workload_info")
                        labels.append(tuple(sorted(info.items())))
                        values.append(1.0)
            batches.append((Batch(node, ms, names, labels, values, {}), 0.01))
        if missing:
            if run:
                store.append_cycles(run)
                run = []
            store.append_cycle(batches, missing)
        else:
            run.append(batches)
        ts += timedelta(seconds=step)
    if run:
        store.append_cycles(run)


def analyze(store: Store, at: datetime = END, **kw: Any) -> tuple[dict[str, Any], list[Finding]]:
    cfg = AnalyticsSettings(**kw)
    result = run_idle(store, at, cfg, WorkloadSettings())
    assert result.kinds == KINDS
    return result.summary, result.findings


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "idle.duckdb")


A0, A1, B0 = Gpu("node-a", 0), Gpu("node-a", 1), Gpu("node-b", 0)


def test_notebook_idle_for_40_minutes_is_an_idle_session(store: Store) -> None:
    """Busy until 10:20:00, then 1 %: idle since 10:20, 40 min x 1 GPU = 0.6667 GPU-hours."""
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    fill(store, [A0], [nb], lambda g, ts: 0.6 if ts <= T0 + 20 * MIN else 0.01)
    summary, findings = analyze(store)
    assert [f.kind for f in findings] == ["idle_session"]
    f = findings[0]
    assert f.since == T0 + 20 * MIN
    assert f.severity == "warning"
    assert f.subject == {"namespace": "alice", "pod": "jupyter-alice", "container": "main"}
    assert f.evidence["idle_since"] == "2026-03-02T10:20:00"
    assert f.evidence["gpus_held"] == 1
    assert f.evidence["gpu_hours_wasted"] == pytest.approx(0.6667)
    assert f.evidence["last_busy_utilization"] == pytest.approx(0.6)
    assert f.evidence["signal"] == "utilization"
    assert f.recommendation == {
        "action": "stop-notebook",
        "target": {"namespace": "alice", "pod": "jupyter-alice"},
    }
    assert summary["idle_sessions"] == 1 and summary["idle_gpus"] == 1
    assert summary["gpu_hours_wasted"] == pytest.approx(0.6667)
    assert summary["interactive_sessions"] == 1 and summary["unknown_workloads"] == 0
    # the finding is recorded; a later busy run resolves it
    assert [r["kind"] for r in store.findings()] == ["idle_session"]


def test_idle_past_four_windows_is_critical(store: Store) -> None:
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    fill(store, [A0], [nb], lambda g, ts: 0.0, end=T0 + timedelta(hours=2))
    _, findings = analyze(store, T0 + timedelta(hours=2))
    assert [(f.kind, f.severity, f.since) for f in findings] == [("idle_session", "critical", T0)]
    assert findings[0].evidence["gpu_hours_wasted"] == pytest.approx(2.0)
    assert findings[0].evidence["last_busy_utilization"] is None


def test_busy_notebook_is_not_idle(store: Store) -> None:
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    fill(store, [A0], [nb], lambda g, ts: 0.5)
    summary, findings = analyze(store)
    assert findings == []
    assert summary["idle_sessions"] == 0 and summary["interactive_sessions"] == 1


def test_idle_training_job_is_reported_without_recommendation(store: Store) -> None:
    job = Work("ml", "train-0", "training", (A0,))
    fill(store, [A0], [job], lambda g, ts: 0.0)
    summary, findings = analyze(store)
    assert [(f.kind, f.severity, f.since, f.recommendation) for f in findings] == [
        ("workload_idle", "info", T0, None)
    ]
    assert findings[0].evidence["gpu_hours_wasted"] == pytest.approx(1.0)
    assert summary["idle_sessions"] == 0 and summary["idle_gpus"] == 1


def test_notebook_in_its_first_minutes_is_not_idle(store: Store) -> None:
    """The GPU idled for an hour, but the notebook got it 5 minutes ago."""
    nb = Work("alice", "jupyter-alice", "interactive", (A0,), start=END - 5 * MIN)
    fill(store, [A0], [nb], lambda g, ts: 0.0)
    summary, findings = analyze(store)
    assert findings == []
    assert summary["interactive_sessions"] == 1 and summary["unknown_workloads"] == 0


def test_agent_down_for_the_window_is_unknown_not_idle(store: Store) -> None:
    nb = Work("alice", "jupyter-alice", "interactive", (B0,))
    fill(store, [B0], [nb], lambda g, ts: 0.0, down=lambda node, ts: ts >= T0 + 25 * MIN)
    summary, findings = analyze(store)
    assert findings == []
    assert summary["unknown_workloads"] == 1 and summary["idle_sessions"] == 0


def test_a_gap_inside_the_window_is_unknown(store: Store) -> None:
    """Two minutes without samples 10 minutes ago, busy before them: the GPU may have been
    busy during the gap too (issue 21: a gap is judged by the samples on both sides)."""
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))

    def util(g: Gpu, ts: datetime) -> float | None:
        if END - 12 * MIN <= ts < END - 10 * MIN:
            return None
        return 0.7 if END - 40 * MIN <= ts < END - 12 * MIN else 0.0

    fill(store, [A0], [nb], util)
    summary, findings = analyze(store)
    assert findings == [] and summary["workloads"] == 1
    # once a whole window has passed after the gap, it is idle since the gap ended
    fill(store, [A0], [nb], util, start=END + timedelta(seconds=STEP), end=END + 30 * MIN)
    _, findings = analyze(store, END + 30 * MIN)
    assert [(f.kind, f.since) for f in findings] == [("idle_session", END - 10 * MIN)]


def test_protected_namespace_and_pod_are_never_reported(store: Store) -> None:
    works = [
        Work("kube-system", "debug-nb", "interactive", (A0,)),
        Work("alice", "jupyter-keep", "interactive", (A1,)),
    ]
    fill(store, [A0, A1], works, lambda g, ts: 0.0)
    store.record_inventory(
        T0,
        pods=[{"namespace": "alice", "name": "jupyter-keep", "protected": True,
               "labels": {"gpuscope.io/protect": "true"}}],
    )  # fmt: skip
    summary, findings = analyze(store, max_session_age_hours=0.1)
    assert findings == []
    assert summary["workloads"] == 0


def test_two_gpus_one_busy_is_not_idle(store: Store) -> None:
    job = Work("ml", "train-2", "training", (A0, A1))
    fill(store, [A0, A1], [job], lambda g, ts: 0.7 if g == A1 else 0.0)
    assert analyze(store)[1] == []


def test_two_idle_gpus_idle_since_the_later_one(store: Store) -> None:
    job = Work("ml", "train-2", "training", (A0, A1))

    def util(g: Gpu, ts: datetime) -> float:
        last_busy = T0 + (10 if g == A0 else 25) * MIN
        return 0.3 if ts <= last_busy else 0.02

    fill(store, [A0, A1], [job], util)
    summary, findings = analyze(store)
    assert [(f.kind, f.since) for f in findings] == [("workload_idle", T0 + 25 * MIN)]
    assert findings[0].evidence["gpus_held"] == 2
    assert findings[0].evidence["gpu_hours_wasted"] == pytest.approx(2 * 35 / 60, abs=1e-4)
    assert summary["idle_gpus"] == 2


def test_sm_activity_wins_over_nvml_utilization(store: Store) -> None:
    """NVML says 90 % (a kernel resident), DCGM SM activity 1 %: idle by SM activity."""
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    fill(store, [A0], [nb], lambda g, ts: 0.01, sm_active=True)
    _, findings = analyze(store)
    assert [f.kind for f in findings] == ["idle_session"]
    assert findings[0].evidence["signal"] == "sm_active"


def test_session_older_than_max_age(store: Store) -> None:
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    job = Work("ml", "train-0", "training", (A1,))
    fill(store, [A0, A1], [nb, job], lambda g, ts: 0.5)
    summary, findings = analyze(store, max_session_age_hours=0.5)
    assert [(f.kind, f.since, f.severity) for f in findings] == [
        ("session_time_limit", T0 + 30 * MIN, "warning")
    ]
    assert findings[0].recommendation == {
        "action": "stop-notebook",
        "target": {"namespace": "alice", "pod": "jupyter-alice"},
    }
    assert summary["sessions_over_time_limit"] == 1


def test_incremental_runs_equal_a_full_recompute(tmp_path: Path) -> None:
    works = [
        Work("alice", "jupyter-alice", "interactive", (A0,)),
        Work("ml", "train-2", "training", (A1, B0)),
    ]

    def util(g: Gpu, ts: datetime) -> float | None:
        if g == B0 and T0 + 30 * MIN <= ts < T0 + 31 * MIN:
            return None  # a short gap on node-b
        return 0.4 if ts <= T0 + (5 if g == A0 else 15) * MIN else 0.0

    cfg, wl = AnalyticsSettings(), WorkloadSettings()
    with Store.open(tmp_path / "a.duckdb") as inc, Store.open(tmp_path / "b.duckdb") as full:
        for s in (inc, full):
            fill(s, [A0, A1, B0], works, util, end=END + 30 * MIN)
        steps = [END - 20 * MIN, END, END + 5 * MIN, END + 10 * MIN, END + 30 * MIN]
        for at in steps:
            a = run_idle(inc, at, cfg, wl)
            b = run_idle(full, at, cfg, wl, persist=False)
            assert a.findings == b.findings and a.summary == b.summary, at
        state_inc, was_inc, _ = activity_state(inc, END + 30 * MIN, cfg, persist=False)
        state_full, was_full, _ = activity_state(full, END + 30 * MIN, cfg, persist=False)
        assert was_inc and not was_full
        assert state_inc.sort_by("uuid").equals(state_full.sort_by("uuid"))
        assert {f.kind for f in a.findings} == {"idle_session", "workload_idle"}
        # a look into the past (CLI --at) recomputes and moves no saved state
        past = run_idle(inc, END - 20 * MIN, cfg, wl)
        assert past.findings == run_idle(full, END - 20 * MIN, cfg, wl, persist=False).findings
        assert activity_state(inc, END + 30 * MIN, cfg, persist=False)[1]


def test_full_reanalysis_reads_rollups_for_history(tmp_path: Path) -> None:
    """After roll-ups, a fresh state finds a 3-hour idle notebook from the 5-minute buckets:
    the last busy bucket 10:00-10:05 counts as busy to its end, so idle since 10:05."""
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    end = T0 + timedelta(hours=3)
    with Store.open(tmp_path / "r.duckdb") as s:
        fill(s, [A0], [nb], lambda g, ts: 0.5 if ts <= T0 + 2 * MIN else 0.0, end=end, step=60)
        s.apply_retention(end)
        cfg = AnalyticsSettings(startup_grace_minutes=0)
        findings = run_idle(s, end, cfg, WorkloadSettings(), scrape_interval_s=60).findings
        assert [(f.kind, f.since) for f in findings] == [("idle_session", T0 + 5 * MIN)]
        # the next scheduled run goes on from the saved state, with the same answer
        assert activity_state(s, end, cfg, scrape_interval_s=60, persist=False)[1]
        again = run_idle(s, end, cfg, WorkloadSettings(), scrape_interval_s=60).findings
        assert again == findings


def test_full_reanalysis_learns_a_sparse_keys_spacing_from_the_rollups(tmp_path: Path) -> None:
    """A key sampled every 20 minutes, busy for 40 minutes, then two samples missing (a
    bucket start to the next 60 minutes apart), idle after: three of its usual spacings, so not a gap in data by the
    learned-spacing rule, which the roll-ups' re-analysis applies as the fold does: its data
    are gap-free from its first bucket. (Judged without its spacing, by the 15-minute floor,
    the hour would read as a gap, and coverage would restart after it.)"""
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    end = T0 + timedelta(hours=6)
    missing = (T0 + 60 * MIN, T0 + 80 * MIN)
    with Store.open(tmp_path / "sparse.duckdb") as s:
        fill(s, [A0], [nb], lambda g, ts: None if ts in missing else 0.9 if ts < missing[0] else 0.0,
             end=end, step=1200)  # fmt: skip
        s.apply_retention(end)
        cfg = AnalyticsSettings(startup_grace_minutes=0)
        state, incremental, _ = activity_state(s, end, cfg, scrape_interval_s=60, persist=False)
        assert not incremental
        [row] = state.to_pylist()
        assert row["covered_since"] == T0  # gap-free data since its first bucket
        findings = run_idle(s, end, cfg, WorkloadSettings(), scrape_interval_s=60).findings
        # busy before the hour, idle after: idle since the last busy bucket's end
        assert [(f.kind, f.since) for f in findings] == [("idle_session", T0 + 45 * MIN)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    busy=st.lists(st.booleans(), min_size=5, max_size=40),
    start_tick=st.integers(min_value=0, max_value=20),
    at_tick=st.integers(min_value=0, max_value=45),
)
def test_idle_since_is_within_start_and_at(busy: list[bool], start_tick: int, at_tick: int) -> None:
    """With 1-minute samples, 10-minute window, 2-minute grace: idle exactly when the brute
    force says so, and idle since is never after ``at`` nor before the workload's start."""
    t0 = T0
    last = len(busy) - 1
    nb = Work("alice", "nb", "interactive", (A0,), start=t0 + min(start_tick, last) * MIN)
    at = max(t0 + min(at_tick, last) * MIN, nb.start)
    cfg = AnalyticsSettings(idle_window_minutes=10, startup_grace_minutes=2)
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "p.duckdb") as s:
        fill(s, [A0], [nb], lambda g, ts: 0.9 if busy[int((ts - t0) / MIN)] else 0.0,
             end=t0 + last * MIN, step=60)  # fmt: skip
        result = run_idle(s, at, cfg, WorkloadSettings(), scrape_interval_s=60)
    last_busy = [t0 + i * MIN for i, b in enumerate(busy) if b and nb.start <= t0 + i * MIN <= at]
    since = max([nb.start, *last_busy])
    expect_idle = at - since >= 10 * MIN and at - nb.start >= 2 * MIN
    idle = [f for f in result.findings if f.kind == "idle_session"]
    assert bool(idle) == expect_idle
    for f in idle:
        assert f.since is not None and nb.start <= f.since <= at and f.since == since


def test_scheduled_analytics_pass_the_collectors_scrape_interval(store: Store) -> None:
    """A collector scraping every 60 s: the detectors' run (run_on_store, what the service
    calls) finds the idle notebook whether 60 s or the 15 s default is declared: the
    spacing is learned from the samples, so a minute between them is not missing data."""
    from gpuscope.analytics.runner import run_on_store
    from gpuscope.core.settings import Settings

    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    fill(store, [A0], [nb], lambda g, ts: 0.01, step=60)
    at = END.replace(tzinfo=None)
    sixty = Settings.model_validate({"collector": {"scrape_interval_seconds": 60}})
    for settings_ in (sixty, Settings()):
        found = run_on_store(store, at, settings_, ["idle"], persist=False)["idle"]
        assert [(f.kind, f.since) for f in found.findings] == [("idle_session", T0)]


@pytest.mark.parametrize("step", [1, 15, 60, 300])
def test_sample_spacing_is_learned_from_the_history(tmp_path: Path, step: int) -> None:
    """Regression (issue 12): a history stored every 5 minutes under a declared 5 s scrape
    interval read every step as missing data, so idle since was the last minute. Now a 1 s,
    15 s, 60 s or 5-minute history (1 s declared) is judged at its own spacing: the notebook
    busy until 30 steps in is idle since then; an outage of 5 spacings right after busy
    samples is missing data (unknown, not idle) until a whole window of data follows it
    (issue 21: one with idle samples on both sides is idle through, test_idle_gaps.py)."""
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    span = timedelta(seconds=step * 80)
    busy_until = T0 + timedelta(seconds=step * 30)
    window = step * 20 / 60
    cfg = AnalyticsSettings(idle_window_minutes=window, startup_grace_minutes=0)
    util: Util = lambda g, ts: 0.5 if ts <= busy_until else 0.01  # noqa: E731
    with Store.open(tmp_path / "a.duckdb") as s:
        fill(s, [A0], [nb], util, end=T0 + span, step=step)
        found = run_idle(s, T0 + span, cfg, WorkloadSettings(), scrape_interval_s=1).findings
        assert [(f.kind, f.since) for f in found] == [("idle_session", busy_until)]
        assert found[0].evidence["gpu_hours_wasted"] == pytest.approx(
            (span - timedelta(seconds=step * 30)).total_seconds() / 3600, abs=1e-3
        )
    outage = (T0 + timedelta(seconds=step * 60), T0 + timedelta(seconds=step * 65))

    def gappy(g: Gpu, ts: datetime) -> float | None:
        if outage[0] < ts < outage[1]:
            return None
        return 0.5 if ts <= outage[0] else util(g, ts)

    with Store.open(tmp_path / "b.duckdb") as s:
        fill(s, [A0], [nb], gappy, end=T0 + span, step=step)
        result = run_idle(s, T0 + span, cfg, WorkloadSettings(), scrape_interval_s=1)
        assert result.findings == [] and result.summary["unknown_workloads"] == 1
        later = T0 + span + timedelta(seconds=step * 10)
        fill(s, [A0], [nb], gappy, start=T0 + span + timedelta(seconds=step), end=later,
             step=step)  # fmt: skip
        found = run_idle(s, later, cfg, WorkloadSettings(), scrape_interval_s=1).findings
        assert [(f.kind, f.since) for f in found] == [("idle_session", outage[1])]


def test_session_age_counts_from_the_pods_start(store: Store) -> None:
    """Regression (issue 12): a notebook that started 54 h before its first stored sample
    is 55 h old at the end of an hour of samples, not 1 h (the pod's start time from the
    inventory, not the first sample)."""
    nb = Work("alice", "jupyter-alice", "interactive", (A0,))
    fill(store, [A0], [nb], lambda g, ts: 0.5)
    started = T0 - timedelta(hours=54)
    store.record_inventory(
        T0,
        pods=[{"namespace": "alice", "name": "jupyter-alice", "node": "node-a",
               "phase": "Running", "gpu_request": 1,
               "start_time": (started - datetime(1970, 1, 1)).total_seconds()}],
    )  # fmt: skip
    _, findings = analyze(store, max_session_age_hours=24)
    [f] = findings
    assert f.kind == "session_time_limit"
    assert f.evidence["age_hours"] == pytest.approx(55)
    assert f.evidence["started_at"] == started.isoformat()
    assert f.since == started + timedelta(hours=24)

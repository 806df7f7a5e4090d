"""The settings the saved activity state was built under (meta idle_state_config) are
written only when they change (one statement less a scheduled run, issue 39): a run under
other settings rebuilds the state and saves them, and the next run under them goes on
from that state, answering as a full recompute does."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from gpuscope.analytics.detectors.idle import activity_state, run_idle
from gpuscope.collector.storage.store import Store
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.settings import AnalyticsSettings
from tests.integration.test_idle import END, MIN, T0, Gpu, Work, fill

A0 = Gpu("node-a", 0)


def _util(g: Gpu, ts: datetime) -> float | None:
    return 0.4 if ts <= T0 + 10 * MIN else 0.0


def test_a_settings_change_rebuilds_the_state_and_its_runs_are_incremental(
    tmp_path: Path,
) -> None:
    works = [Work("alice", "jupyter-alice", "interactive", (A0,))]
    before, after = AnalyticsSettings(), AnalyticsSettings(idle_utilization_below=0.5)
    wl = WorkloadSettings()
    with Store.open(tmp_path / "a.duckdb") as s, Store.open(tmp_path / "b.duckdb") as full:
        for x in (s, full):
            fill(x, [A0], works, _util)
        run_idle(s, END - 20 * MIN, before, wl)
        assert activity_state(s, END - 10 * MIN, before, persist=False)[1]
        assert not activity_state(s, END - 10 * MIN, after, persist=False)[1]
        changed = run_idle(s, END - 10 * MIN, after, wl)
        assert changed.findings == run_idle(full, END - 10 * MIN, after, wl, persist=False).findings
        # saved under the new settings: the next run under them is incremental
        assert activity_state(s, END, after, persist=False)[1]
        assert not activity_state(s, END, before, persist=False)[1]
        again = run_idle(s, END, after, wl)
        assert again.findings == run_idle(full, END, after, wl, persist=False).findings
        assert {f.kind for f in again.findings} == {"idle_session"}
        # and again under the same settings: still incremental, the same answers
        later = run_idle(s, END + 5 * MIN, after, wl)
        assert later.findings == run_idle(full, END + 5 * MIN, after, wl, persist=False).findings
        assert activity_state(s, END + 10 * MIN, after, persist=False)[1]

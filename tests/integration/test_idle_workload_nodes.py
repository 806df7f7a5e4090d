"""A workload's node and signal in the idle findings: its distinct nodes (and busy signals),
sorted, joined by commas; the rows are built from lists (issue 39), so these hold what
string_agg(DISTINCT ... ORDER BY ...) gave."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from gpuscope.analytics.detectors.idle import run_idle
from gpuscope.collector.storage.store import Store
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.settings import AnalyticsSettings
from tests.integration.test_idle import END, MIN, T0, Gpu, Work, fill

B0, A1, A0 = Gpu("node-b", 0), Gpu("node-a", 1), Gpu("node-a", 0)


def _idle(g: Gpu, ts: datetime) -> float | None:
    return 0.4 if ts <= T0 + 5 * MIN else 0.0


def test_a_workload_on_two_nodes_names_each_node_once_in_order(tmp_path: Path) -> None:
    works = [Work("ml", "train-1", "training", (B0, A1, A0))]
    with Store.open(tmp_path / "w.duckdb") as s:
        fill(s, [B0, A1, A0], works, _idle)
        result = run_idle(s, END, AnalyticsSettings(), WorkloadSettings(), persist=False)
    [f] = result.findings
    assert f.kind == "workload_idle"
    assert f.evidence["node"] == "node-a,node-b"
    assert f.evidence["gpu_uuids"] == [A0.uuid, A1.uuid, B0.uuid]
    assert f.evidence["signal"] == "utilization"
    assert f.evidence["gpus_held"] == 3


def test_sm_activity_on_every_gpu_is_one_signal(tmp_path: Path) -> None:
    works = [Work("ml", "train-1", "training", (B0, A0))]
    with Store.open(tmp_path / "w.duckdb") as s:
        fill(s, [B0, A0], works, _idle, sm_active=True)
        result = run_idle(s, END, AnalyticsSettings(), WorkloadSettings(), persist=False)
    [f] = result.findings
    assert (f.evidence["node"], f.evidence["signal"]) == ("node-a,node-b", "sm_active")

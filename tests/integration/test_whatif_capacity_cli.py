"""The capacity what-if on a small stored week: ``gpuscope whatif --db`` with the capacity
flags, and ``GET /api/v1/whatif`` with the same parameters (figures known by hand)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.collector.http_api.api import ApiState, create_app
from gpuscope.collector.scraping.targets import TargetRegistry
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from gpuscope.service_whatif import whatif_on_store
from tests.integration.test_whatif_history import spread_week

pytestmark = pytest.mark.integration

NOW = datetime(2025, 3, 12, tzinfo=UTC)  # W10 is over
ENV = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")}
#: From the 4-GPU job's creation (Tue 09:00) to the week's end (Mon 00:00): 135 h.
TO_WEEK_END_H = 135.0


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("capacity") / "w.duckdb"
    spread_week(path)
    return path


def _cli(db: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "whatif", "--db", str(db), "--week",
         "2025-W10", "--policy", "leastallocated", "--seeds", "1", *args],
        capture_output=True, text=True, timeout=180, env=ENV, cwd=cwd,
    )  # fmt: skip


def test_one_more_node_clears_the_queue_and_the_search_says_so(db: Path) -> None:
    """Under LeastAllocated the two 1-GPU pods spread over both 4-GPU nodes, so the 4-GPU
    job waits 2 h (8 GPU-h); one more Tesla-T4 node starts it on arrival."""
    proc = _cli(db, "--add-nodes", "Tesla-T4:1", "--capacity-search", "--json")
    assert proc.returncode == 0, proc.stderr
    cap = json.loads(proc.stdout)["capacity"]
    assert cap["policy"] == "leastallocated"
    assert cap["change"]["add_nodes"] == ["Tesla-T4:1"]
    base, new = cap["baseline"], cap["changed"]
    assert base["queued_gpu_hours"] == pytest.approx(8.0)
    assert base["mean_wait_hours"]["2-4"] == {"jobs": 1, "never_started": 0, "mean_wait_hours": 2.0}
    assert (base["gpus"], new["gpus"], new["nodes"]) == (8, 12, 3)
    assert new["queued_gpu_hours"] == 0.0
    for key in ("fewest_gpus_half", "fewest_gpus_90"):
        answer = cap[key]
        assert (answer["model"], answer["nodes"], answer["gpus"]) == ("Tesla-T4", 1, 4)
        assert answer["queued_gpu_hours"] == 0.0


def test_removing_a_node_leaves_the_big_job_waiting_all_week(db: Path) -> None:
    """Without node b both 1-GPU pods share a; one of them runs all week, so the 4-GPU job
    never starts: 4 GPUs x 135 h queued."""
    proc = _cli(db, "--remove-nodes", "b")
    assert proc.returncode == 0, proc.stderr
    assert "capacity what-if under leastallocated: remove b" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("changed"))
    assert f"{4 * TO_WEEK_END_H:.2f}" in row


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--add-nodes", "H100"], "expected MODEL:COUNT"),
        (["--add-nodes", "H100:2"], "no schedulable 'H100' node to copy; the cluster's GPU"),
        (["--remove-nodes", "rack in r1"], "not a selector term"),
        (["--remove-nodes", "rack=r9"], "selects no node"),
        (["--mig-layout", "default:9g.80gb"], "not a MIG profile"),
        (["--mig-layout", "nosuch:none"], "no GPU node in pool 'nosuch'"),
    ],
)
def test_bad_capacity_input_is_one_line_and_exit_2(
    db: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    proc = _cli(db, *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr, proc.stderr


def _client(store: Store) -> TestClient:
    state = ApiState(
        store=store, targets=TargetRegistry(), metrics=CollectorMetrics(), clock=NOW.timestamp,
        whatif=whatif_on_store(store, Settings(), NOW.timestamp),
    )  # fmt: skip
    return TestClient(create_app(state))


def test_the_capacity_replays_run_under_the_policy_the_cluster_ran(
    db: Path, tmp_path: Path
) -> None:
    """The capacity what-if replays under the calibrated policy: ``--calibrate``, else
    ``analytics.whatif_policy``. Under MostAllocated the two 1-GPU pods pack onto one
    node, so the 4-GPU job starts on arrival and nothing is queued, where LeastAllocated
    (the default) queues 8 GPU-hours."""
    proc = _cli(db, "--calibrate", "mostallocated", "--add-nodes", "Tesla-T4:1", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["summary"]["calibration"]["policy"] == "mostallocated"
    assert out["capacity"]["policy"] == "mostallocated"
    assert out["capacity"]["baseline"]["queued_gpu_hours"] == 0.0
    config = tmp_path / "gpuscope.yaml"
    config.write_text("analytics:\n  whatif_policy: mostallocated\n")
    proc = _cli(db, "--config", str(config), "--add-nodes", "Tesla-T4:1", "--json")
    assert proc.returncode == 0, proc.stderr
    configured = json.loads(proc.stdout)
    assert configured["summary"]["calibration"]["policy"] == "mostallocated"
    assert configured["capacity"] == out["capacity"]
    r = _get(db, [("policy", "leastallocated"), ("seeds", "1"), ("calibrate", "mostallocated"),
                  ("add_nodes", "Tesla-T4:1")])  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["capacity"] == out["capacity"]
    assert r.json()["summary"]["calibration"]["policy"] == "mostallocated"


def _get(db: Path, params: list[tuple[str, str]]) -> Any:
    with Store.open(db, read_only=True) as store:
        return _client(store).get("/api/v1/whatif", params=[("week", "2025-W10"), *params])


def test_the_api_answers_what_the_cli_prints(db: Path) -> None:
    proc = _cli(db, "--add-nodes", "Tesla-T4:1", "--capacity-search", "--json")
    assert proc.returncode == 0, proc.stderr
    params = [("policy", "leastallocated"), ("seeds", "1"), ("add_nodes", "Tesla-T4:1"),
              ("capacity_search", "true")]  # fmt: skip
    r = _get(db, params)
    assert r.status_code == 200, r.text
    assert r.json()["capacity"] == json.loads(proc.stdout)["capacity"]


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ([("add_nodes", "H100")], "expected MODEL:COUNT"),
        ([("add_nodes", "H100:1")], "no schedulable 'H100' node"),
        ([("remove_nodes", "rack in r1")], "not a selector term"),
        ([("mig_layout", "default:4g.40gb=2")], "compute slices"),
        ([("capacity_policy", "nosuch")], "capacity_policy 'nosuch'"),
        ([("calibrate", "nosuch")], "unknown policy 'nosuch'"),
        ([("add_nodes", "Tesla-T4:1")] * 33, "at most 32 capacity changes"),
        ([("remove_nodes", "x" * 1001)], "at most 1000 characters"),
    ],
)
def test_bad_capacity_parameters_are_400(
    db: Path, params: list[tuple[str, str]], detail: str
) -> None:
    r = _get(db, [("policy", "leastallocated"), ("seeds", "1"), *params])
    assert r.status_code == 400, r.text
    assert detail in r.json()["detail"]


def test_the_weekly_reports_section_is_the_search_of_its_week(db: Path, tmp_path: Path) -> None:
    from gpuscope.analytics.report.whatif_capacity import whatif_capacity_over
    from gpuscope.analytics.whatif.history import read_history

    with Store.open(db, read_only=True) as store:
        cur = store.cursor()
        history = read_history(cur, datetime(2025, 3, 3), datetime(2025, 3, 10))
    table, note = whatif_capacity_over(history, Settings().analytics)
    rows = table.rows(named=True)
    assert [(r["cluster"], r["queue_cut"], r["gpus_added"], r["gpus"]) for r in rows] == [
        ("as it was", "", 0, 8),
        ("+1 Tesla-T4 node", "half", 4, 12),
        ("+1 Tesla-T4 node", "90 %", 4, 12),
    ]
    assert rows[0]["queued_gpu_hours"] == pytest.approx(8.0)
    assert rows[0]["mean_wait_hours"] == pytest.approx(2.0 / 3, abs=1e-4)  # 3 pods, 1 waited 2 h
    assert rows[1]["queued_gpu_hours"] == 0.0
    assert note.startswith("4 more Tesla-T4 GPUs (1 node of 4) would have cut queued GPU-hours")
    # a week too busy for the section's budget is not searched, and says where to go
    budget = len(history.events) * 4  # 3 replays for the search: fewer than it needs
    table, note = whatif_capacity_over(history, Settings().analytics, budget=budget)
    assert table.height == 0 and "--capacity-search" in note
    # the report prints the same sentence in its summary
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "report", "weekly", "--db", str(db),
         "--week", "2025-W10", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = (tmp_path / "2025-W10" / "summary.md").read_text()
    assert "- What if, more GPUs: 4 more Tesla-T4 GPUs (1 node of 4)" in summary
    assert (tmp_path / "2025-W10" / "tables" / "whatif_capacity.csv").is_file()

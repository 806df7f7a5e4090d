"""``gpuscope whatif idle`` on histories stored through the collector's ingest path.

Four notebooks over 12 hours, scraped every 60 s (issue 36's outside check), each with its
truth worked out by hand below; a notebook whose GPU goes quiet for a while with data both
sides; a time limit; and bad input refused in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 3, 8, 0)
T1 = T0 + timedelta(hours=12)
H = timedelta(hours=1)
M = timedelta(minutes=1)
FROM, TO = "2025-03-03T08:00:00Z", "2025-03-03T20:00:00Z"

#: (name, busy spans as (from, to) offsets after T0): the four notebooks of the issue
NOTEBOOKS: dict[str, list[tuple[timedelta, timedelta]]] = {
    # busy 08-09, idle 2 hours, busy 11-12, idle from noon
    "nb-gap": [(0 * H, 1 * H), (3 * H, 4 * H)],
    # busy its first half hour, idle after
    "nb-half": [(0 * H, 30 * M)],
    # busy 40 minutes, paused 20, every hour
    "nb-pauses": [(h * H, h * H + 40 * M) for h in range(12)],
    # idle its first 45 minutes, busy after
    "nb-late": [(45 * M, 12 * H)],
}


def busy_at(spans: Sequence[tuple[timedelta, timedelta]], ts: datetime) -> bool:
    return any(T0 + a <= ts < T0 + b for a, b in spans)


def store_history(
    path: Path,
    util: Callable[[str, datetime], float | None],
    names: Sequence[str],
    *,
    start: datetime = T0,
    end: datetime = T1,
    step: timedelta = M,
    ends: dict[str, datetime] | None = None,
) -> None:
    """Every notebook on a GPU of its own (node-<name>), scraped each ``step`` from start
    to end inclusive, as the collector's cycles written in one transaction
    (``Store.append_cycles``, held equal to ``append_cycle`` one cycle at a time by
    tests/unit/test_store_bulk.py); ``util`` None: no sample of the GPU then; ``ends``: when
    a notebook was deleted (its workload series stops)."""
    ends = ends or {}
    cycles: list[list[tuple[Batch, float]]] = []
    with Store.open(path) as store:
        ts = start
        while ts <= end:
            ms = int((ts - datetime(1970, 1, 1)).total_seconds() * 1000)
            batches = []
            for name in names:
                gpu = {
                    "node": f"node-{name}",
                    "gpu": "0",
                    "uuid": f"GPU-{name}",
                    "mig_instance": "",
                }
                metric_names: list[str] = []
                labels: list[tuple[tuple[str, str], ...]] = []
                values: list[float] = []
                value = util(name, ts)
                if value is not None:
                    metric_names.append("gpuscope_gpu_utilization_ratio")
                    labels.append(tuple(sorted(gpu.items())))
                    values.append(value)
                if ts < ends.get(name, end + H):
                    info = {**gpu, "namespace": "research", "pod": name, "container": "main",
                            "workload_kind": "interactive", "interactive": "true",
                            "project": "research"}  # fmt: skip
                    metric_names.append("gpuscope_gpu_workload_info")
                    labels.append(tuple(sorted(info.items())))
                    values.append(1.0)
                batches.append((Batch(gpu["node"], ms, metric_names, labels, values, {}), 0.01))
            cycles.append(batches)
            ts += step
        store.append_cycles(cycles)


def gpuscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "whatif", "idle", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")},
    )


def by_minutes(out: dict[str, Any]) -> dict[float, dict[str, Any]]:
    return {e["idle_minutes"]: e for e in out["thresholds"] if e["source"] == "ladder"}


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("four") / "four.duckdb"
    store_history(path, lambda n, ts: 0.6 if busy_at(NOTEBOOKS[n], ts) else 0.01, list(NOTEBOOKS))
    return path


def test_the_four_notebooks_exactly(four: Path) -> None:
    """The truth, by hand (sessions held 08:00-20:00, idle since the last busy sample;
    start-up grace 10 minutes):

    - nb-gap: last busy 08:59, next 11:00 (2 h idle); last busy 11:59, then idle to 20:00;
    - nb-half: last busy 08:29, idle to 20:00;
    - nb-pauses: pauses of 20 minutes (last busy h:39, next h+1:00): never 30 idle;
    - nb-late: idle 08:00-08:45 (its start counts as idle since), busy from 08:45.

    30 min: nb-gap stops 09:29 (freed 10.52 h, came back 11:00), nb-half 08:59 (11.02 h),
    nb-late 08:30 (11.5 h, came back): 3 stopped, 2 came back, 33.03 h.
    60 min: nb-gap 09:59 (10.02 h, came back), nb-half 09:29 (10.52 h); nb-late's 45
    minutes are too short: 2 stopped, 1 came back, 20.53 h.
    180 min: nb-gap's 2 hours too short, its afternoon stops 14:59 (5.02 h), nb-half
    11:29 (8.52 h): 2 stopped, none came back, 13.53 h.
    600 min: nb-gap's 8 afternoon hours too short; nb-half 18:29 (1.52 h): 1, 0, 1.52 h.
    """
    proc = gpuscope("--db", str(four), "--from", FROM, "--to", TO, "--idle-minutes", "30",
                    "--idle-minutes", "60", "--idle-minutes", "180", "--idle-minutes", "600",
                    "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    got = by_minutes(out)
    truth = {30: (3, 2, 33.03), 60: (2, 1, 20.53), 180: (2, 0, 13.53), 600: (1, 0, 1.52)}
    assert set(got) == set(truth)
    for minutes, (stopped, back, freed) in truth.items():
        e = got[minutes]
        assert (e["sessions_stopped"], e["stopped_then_busy"]) == (stopped, back), minutes
        assert e["gpu_hours_freed"] == pytest.approx(freed, abs=0.3), minutes
    # who came back at 30 minutes, and how much work the policy would have cut off:
    # nb-gap busy 11:00-12:00 (1 h), nb-late busy 08:45-20:00 (11.25 h)
    cut = {c["pod"]: c["busy_gpu_hours_after_stop"] for c in got[30]["cut_off"]}
    assert set(cut) == {"nb-gap", "nb-late"}
    assert cut["nb-gap"] == pytest.approx(1.0, abs=0.1)
    assert cut["nb-late"] == pytest.approx(11.25, abs=0.1)
    assert got[30]["namespaces"][0]["namespace"] == "research"
    assert got[30]["namespaces"][0]["sessions_stopped"] == 3
    assert out["sessions"] == 4
    assert out["gpu_hours_held"] == pytest.approx(48.0, abs=0.05)
    # the rule: at most 5 % coming back leaves 180 (13.5 h) and 600 min; 180 frees more
    rec = out["recommendation"]
    assert rec["idle_minutes"] == 180
    assert rec["gpu_hours_freed"] == pytest.approx(13.53, abs=0.3)
    assert "5 %" in rec["rule"]


def test_a_looser_comeback_bound_recommends_a_shorter_threshold(four: Path) -> None:
    """Half the stopped sessions may come back: 60 minutes (1 of 2) frees 20.5 h; 30
    minutes (2 of 3, 67 %) is over the bound."""
    proc = gpuscope("--db", str(four), "--from", FROM, "--to", TO, "--idle-minutes", "30",
                    "--idle-minutes", "60", "--idle-minutes", "180", "--max-comeback-share",
                    "0.5", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["recommendation"]["idle_minutes"] == 60


def test_time_limits_and_the_warning_period(four: Path) -> None:
    """A 4-hour limit stops every notebook at 12:00 (each started 08:00): 8 h freed each;
    nb-pauses (8 x 40 min) and nb-late (8 h) were busy after it. A 30-minute warning moves
    every stop 30 minutes on: 30 minutes idle gives the figures of 60, and the 4-hour limit
    stops at 12:30 (7.5 h freed each; nb-pauses cut 10 + 7 x 40 minutes, nb-late 7.5 h)."""
    proc = gpuscope("--db", str(four), "--from", FROM, "--to", TO, "--time-limit-hours", "4",
                    "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    limit = next(e for e in json.loads(proc.stdout)["time_limits"] if e["source"] == "ladder")
    assert limit["hours"] == 4
    assert (limit["sessions_stopped"], limit["stopped_then_busy"]) == (4, 2)
    assert limit["gpu_hours_freed"] == pytest.approx(32.0, abs=0.05)
    assert limit["busy_gpu_hours_after_stop"] == pytest.approx(8 * 40 / 60 + 8, abs=0.1)

    proc = gpuscope("--db", str(four), "--from", FROM, "--to", TO, "--time-limit-hours", "4",
                    "--idle-minutes", "30", "--warning-minutes", "30", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    e = by_minutes(out)[30]
    assert e["warning_minutes"] == 30
    assert (e["sessions_stopped"], e["stopped_then_busy"]) == (2, 1)
    assert e["gpu_hours_freed"] == pytest.approx(20.53, abs=0.3)
    limit = next(e for e in out["time_limits"] if e["source"] == "ladder")
    assert (limit["sessions_stopped"], limit["stopped_then_busy"]) == (4, 2)
    assert limit["gpu_hours_freed"] == pytest.approx(30.0, abs=0.05)
    assert limit["busy_gpu_hours_after_stop"] == pytest.approx((10 + 7 * 40) / 60 + 7.5, abs=0.1)


def test_idle_through_a_short_gap_but_not_a_long_one(tmp_path: Path) -> None:
    """Both notebooks are idle from 08:30 with no data 09:00-09:40 (40 min): idle both
    sides, so they were idle through it (the detector's rule) and 60 minutes stops them at
    09:29. nb-busy-side is busy again right after its gap: unknown, never idle, and its
    idle clock restarts at 09:45 (the first bucket after): 60 minutes stops it at 10:45."""

    def util(name: str, ts: datetime) -> float | None:
        if T0 + 60 * M <= ts < T0 + 100 * M:
            return None
        if name == "nb-busy-side" and T0 + 100 * M <= ts < T0 + 105 * M:
            return 0.6
        return 0.6 if ts < T0 + 30 * M else 0.01

    path = tmp_path / "gap.duckdb"
    store_history(path, util, ["nb-quiet", "nb-busy-side"], end=T0 + 4 * H)
    proc = gpuscope("--db", str(path), "--from", FROM, "--to", "2025-03-03T12:00:00Z",
                    "--idle-minutes", "60", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    e = by_minutes(json.loads(proc.stdout))[60]
    assert e["sessions_stopped"] == 2
    assert e["stopped_then_busy"] == 0
    # nb-quiet from 09:30 to 12:00 (2.5 h); nb-busy-side from 10:45 (1.25 h)
    assert e["gpu_hours_freed"] == pytest.approx(2.5 + 1.25, abs=0.2)


def test_freed_hours_end_at_the_real_deletion(tmp_path: Path) -> None:
    """nb-half deleted at 14:00: 30 minutes stops it at 08:59, freeing 5 h, not 11."""
    path = tmp_path / "deleted.duckdb"
    store_history(path, lambda n, ts: 0.6 if ts < T0 + 30 * M else 0.01, ["nb-half"],
                  ends={"nb-half": T0 + 6 * H})  # fmt: skip
    proc = gpuscope("--db", str(path), "--from", FROM, "--to", TO, "--idle-minutes", "30",
                    "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    e = by_minutes(json.loads(proc.stdout))[30]
    assert e["sessions_stopped"] == 1
    assert e["gpu_hours_freed"] == pytest.approx(5.0, abs=0.1)


def test_text_output_names_the_recommendation(four: Path) -> None:
    proc = gpuscope("--db", str(four), "--from", FROM, "--to", TO)
    assert proc.returncode == 0, proc.stderr
    assert "Recommended: stop interactive sessions after" in proc.stdout
    assert "rule: the idle threshold that frees the most GPU-hours" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--from", FROM, "--to", TO], "give --db PATH"),
        (["--db", "X", "--from", FROM], "--from and --to go together"),
        (["--db", "X", "--week", "2025-W10", "--from", FROM, "--to", TO], "not both"),
        (["--db", "X", "--from", TO, "--to", FROM], "is not after"),
        (["--db", "X", "--from", "yesterday", "--to", TO], "expected a time like"),
        (["--db", "X", "--week", "2025-W99"], "is not an ISO week"),
        (["--db", "/nonexistent/x.duckdb", "--from", FROM, "--to", TO], "does not exist"),
    ],
)
def test_bad_input_is_one_line(args: list[str], message: str) -> None:
    proc = gpuscope(*args)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_each_stop_is_where_the_idle_detector_first_says_idle(four: Path) -> None:
    """The replay's stop at 30 minutes against the idle detector run at that instant: the
    detector calls the session idle then (window 30 minutes), and did not 6 minutes before
    (the replay works on 5-minute buckets: its stop is at most one bucket after the
    detector's first idle instant, never before it)."""
    from datetime import timedelta as td

    from gpuscope.analytics.detectors.idle import run_idle
    from gpuscope.analytics.idle_whatif.points import Point
    from gpuscope.analytics.idle_whatif.read import read_inputs
    from gpuscope.analytics.idle_whatif.replay import per_session
    from gpuscope.core.collector_settings import WorkloadSettings
    from gpuscope.core.settings import AnalyticsSettings, Settings

    settings = Settings()
    with Store.open(four, read_only=True) as store:
        inputs = read_inputs(store.cursor(), T0, T1, settings, look_back=td(minutes=40))
        rows = per_session(inputs, Point("idle", 30), td(minutes=10))
        assert rows["pod"].to_list() == ["nb-gap", "nb-half", "nb-late"]

        def idle_pods(at: datetime) -> set[str]:
            found = run_idle(store, at, AnalyticsSettings(idle_window_minutes=30),
                             WorkloadSettings(), persist=False)  # fmt: skip
            return {f.subject["pod"] for f in found.findings if f.kind == "idle_session"}

        for pod, stop in rows.select("pod", "stop").iter_rows():
            assert pod in idle_pods(stop), (pod, stop)
            assert pod not in idle_pods(stop - td(minutes=6)), (pod, stop)

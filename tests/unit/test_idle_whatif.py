"""The idle-policy replay's pure parts: points (ladder, configured policies), the replay on
hand-made runs, the recommendation's rule, and the CLI's parser beside ``whatif --db``."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuscope.actions.policy import Policy
from gpuscope.analytics.idle_whatif.figures import recommend, replay_range
from gpuscope.analytics.idle_whatif.points import (
    POLICY_WARNING_MINUTES,
    Point,
    configured,
    ladder,
)
from gpuscope.analytics.idle_whatif.read import ReplayInputs
from gpuscope.analytics.idle_whatif.replay import per_session, totals
from gpuscope.cli.main import build_parser
from gpuscope.core.errors import UserError
from gpuscope.core.settings import load_settings

T = datetime(2025, 3, 3, 8, 0)
H = timedelta(hours=1)
M = timedelta(minutes=1)


def test_the_policy_default_warning_is_the_actions_one() -> None:
    assert Policy.model_fields["warning_minutes"].default == POLICY_WARNING_MINUTES


def test_ladder_is_sorted_and_each_value_once() -> None:
    assert [p.minutes for p in ladder("idle", [60, 15, 60])] == [15, 60]
    assert [p.minutes for p in ladder("time_limit", [2])] == [120]
    assert len(ladder("idle", None)) == 7
    assert ladder("idle", [30], 10)[0].stop_after == timedelta(minutes=40)


def test_configured_policies_from_the_policy_file(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(
        "policies:\n"
        "  - {name: nb, type: idle, namespaces: [research], match_labels: {team: a}}\n"
        "  - {name: long, type: time_limit, max_session_age_hours: 12, warning_minutes: 0}\n"
        "  - {name: pack, type: consolidation}\n"
    )
    s = load_settings(env={}, overrides={"actions": {"policy_file": f},
                                         "analytics": {"idle_window_minutes": 45}})  # fmt: skip
    points, notes = configured(s)
    assert notes == []
    idle, limit = points
    # idle_minutes defaults to the detector's window, the warning to the policy's default
    assert (idle.minutes, idle.warning_minutes, idle.source, idle.name) == (45, 30, "policy", "nb")
    assert idle.covers("research", {"team": "a"})
    assert not idle.covers("research", {"team": "b"})
    assert not idle.covers("other", {"team": "a"})
    assert (limit.kind, limit.minutes, limit.warning_minutes) == ("time_limit", 720, 0)


def test_without_a_policy_the_detector_settings_are_the_configured_points(tmp_path: Path) -> None:
    points, _ = configured(load_settings(env={}, overrides={}))
    assert [(p.kind, p.minutes, p.source) for p in points] == [
        ("idle", 30, "detector"),
        ("time_limit", 72 * 60, "detector"),
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies: [: nope\n")
    points, notes = configured(load_settings(env={}, overrides={"actions": {"policy_file": bad}}))
    assert [p.source for p in points] == ["detector", "detector"]
    assert "could not be read" in notes[0]


def _inputs(runs: list[tuple[int, str, datetime, datetime, float]], **kw: Any) -> ReplayInputs:
    """Sessions 1.. each on one GPU from T to T + 10 h (unless ``ended``), range T..T+10h."""
    pids = sorted({r[0] for r in runs})
    ended = kw.get("ended", {})
    sessions = pl.DataFrame(
        {
            "pid": pids,
            "namespace": [kw.get("ns", {}).get(p, "a") for p in pids],
            "pod": [f"nb{p}" for p in pids],
            "kind": ["interactive"] * len(pids),
            "project": ["a"] * len(pids),
            "started": [kw.get("started", {}).get(p, T) for p in pids],
            "ended": [ended.get(p) for p in pids],
            "in_range": [True] * len(pids),
            "pod_labels": [kw.get("labels", {}).get(p) for p in pids],
            "owner": [f"user{p}" for p in pids],
        },
        schema_overrides={"ended": pl.Datetime("us"), "started": pl.Datetime("us")},
    )
    held = pl.DataFrame(
        {
            "pid": pids,
            "share": [1.0] * len(pids),
            "s": [kw.get("started", {}).get(p, T) for p in pids],
            "e": [ended.get(p) or T + 10 * H for p in pids],
        },
        schema_overrides={"s": pl.Datetime("us"), "e": pl.Datetime("us")},
    )
    start = kw.get("start", T)
    frame = pl.DataFrame(
        runs, schema=["pid", "state", "t0", "t1", "gpu_hours"], orient="row"
    ).with_columns(pl.col("t0", "t1").cast(pl.Datetime("us")))
    return ReplayInputs(start, T + 10 * H, T - 5 * H, sessions, held, frame)


def test_a_time_limit_inside_a_busy_run_cuts_its_part() -> None:
    """Busy 08-12 (4 GPU-h) then idle: a 3-hour limit at 11:00 cuts 1 of the 4 busy hours,
    frees 7 h and the session counts as cut off while busy."""
    inp = _inputs([(1, "B", T, T + 4 * H, 4.0), (1, "I", T + 4 * H, T + 10 * H, 6.0)])
    rows = per_session(inp, Point("time_limit", 180), timedelta(minutes=10))
    got = totals(rows)
    assert got["sessions_stopped"] == 1 and got["stopped_then_busy"] == 1
    assert got["gpu_hours_freed"] == pytest.approx(7.0)
    assert got["busy_gpu_hours_after_stop"] == pytest.approx(1.0)


def test_grace_delays_a_stop_and_short_runs_never_stop() -> None:
    """Idle from its start for 20 minutes: a 5-minute threshold waits for the 10-minute
    grace (stop 08:10); a 30-minute one never stops it."""
    inp = _inputs([(1, "I", T, T + 20 * M, 1 / 3), (1, "B", T + 20 * M, T + 10 * H, 9.67)])
    stop = per_session(inp, Point("idle", 5), timedelta(minutes=10))["stop"].to_list()
    assert stop == [T + 10 * M]
    assert per_session(inp, Point("idle", 30), timedelta(minutes=10)).height == 0


def test_a_session_stopped_before_the_range_frees_its_hours_in_it() -> None:
    """Idle since 05:00 (three hours before the range): 60 minutes stopped it at 06:00; in
    the range it frees all its 10 hours."""
    inp = _inputs([(1, "I", T - 3 * H, T + 10 * H, 10.0)], started={1: T - 3 * H})
    rows = per_session(inp, Point("idle", 60), timedelta(0))
    assert rows["stop"].to_list() == [T - 2 * H]
    assert totals(rows)["gpu_hours_freed"] == pytest.approx(10.0)


def test_a_selective_policy_covers_only_what_it_selects() -> None:
    runs = [(p, "I", T, T + 10 * H, 10.0) for p in (1, 2, 3)]
    inp = _inputs(runs, ns={3: "b"}, labels={1: '{"team": "x"}', 2: '{"team": "y"}',
                                             3: '{"team": "x"}'})  # fmt: skip
    point = Point("idle", 60, source="policy", name="p", namespaces=("a",),
                  match_labels=(("team", "x"),))  # fmt: skip
    assert per_session(inp, point, timedelta(0))["pod"].to_list() == ["nb1"]
    assert per_session(inp, Point("idle", 60), timedelta(0), ("b",))["pod"].to_list() == ["nb3"]


def _entry(minutes: float, freed: float, stopped: int, back: int, **kw: Any) -> dict[str, Any]:
    return {"idle_minutes": minutes, "warning_minutes": 0.0, "source": "ladder",
            "configured": False, "gpu_hours_freed": freed, "sessions_stopped": stopped,
            "stopped_then_busy": back, "comeback_share": back / stopped if stopped else 0.0,
            **kw}  # fmt: skip


def test_the_rule_takes_the_most_freed_within_the_comeback_bound() -> None:
    entries = [
        _entry(15, 100.0, 40, 10),  # 25 % come back
        _entry(30, 80.0, 40, 2),  # 5 %: at the bound
        _entry(60, 80.0, 30, 1),  # same hours, longer: preferred on a tie
        _entry(120, 50.0, 20, 0),
        _entry(30, 80.0, 40, 2, source="policy", configured=True, policy="nb"),
        _entry(
            90,
            90.0,
            10,
            0,
            source="policy",
            configured=True,
            policy="ns-only",
            selects={"namespaces": ["a"], "match_labels": {}},
        ),
    ]
    rec = recommend(entries, 0.05, 2.0, "EUR")
    assert rec["idle_minutes"] == 60
    assert rec["cost_freed"] == 160.0
    vs = {v["policy"]: v for v in rec["versus_configured"]}
    assert vs["nb"]["more_gpu_hours_freed"] == 0.0
    assert vs["ns-only"]["more_gpu_hours_freed"] == pytest.approx(-10.0)
    assert vs["ns-only"]["more_cost_freed"] == pytest.approx(-20.0)
    assert "60 minutes idle" in rec["text"] and "EUR" in rec["text"]
    assert "5 %" in rec["rule"]
    # a tighter bound leaves 120 (0 %) and the policy-free rungs with nobody back
    assert recommend(entries, 0.0, None, "USD")["idle_minutes"] == 120
    none = recommend([_entry(15, 10.0, 4, 4)], 0.05, None, "USD")
    assert none["idle_minutes"] is None and "No threshold" in none["text"]


def test_replay_range_checks() -> None:
    now = datetime(2025, 3, 20)
    assert replay_range("2025-W10", None, None, now)[:2] == (T - 8 * H, T - 8 * H + 7 * 24 * H)
    assert replay_range(None, None, None, now)[2] == "2025-W11"
    lo, hi, label = replay_range(None, "2025-03-03T08:00:00+01:00", "2025-03-03T10:00:00Z", now)
    assert (lo, hi, label) == (T - H, T + 2 * H, None)
    for args, msg in [
        (("2025-W12", None, None), "is not over"),
        ((None, "2025-03-01T00:00:00Z", "2025-04-15T00:00:00Z"), "longer than 31 days"),
        ((None, None, "2025-03-01T00:00:00Z"), "go together"),
    ]:
        with pytest.raises(UserError, match=msg):
            replay_range(*args, now)


def test_whatif_idle_is_a_subcommand_beside_whatif_db() -> None:
    p = build_parser()
    plain = p.parse_args(["whatif", "--db", "x.duckdb", "--week", "2025-W10"])
    assert plain.whatif_what is None and str(plain.db) == "x.duckdb"
    idle = p.parse_args(["whatif", "idle", "--db", "x.duckdb", "--idle-minutes", "30",
                         "--idle-minutes", "90", "--namespace", "a", "--log-level", "DEBUG"])  # fmt: skip
    assert idle.whatif_what == "idle" and idle.idle_minutes == [30.0, 90.0]
    assert idle.namespace == ["a"] and idle.log_level == "DEBUG"
    with pytest.raises(SystemExit):
        p.parse_args(["whatif", "idle", "--idle-minutes", "0"])

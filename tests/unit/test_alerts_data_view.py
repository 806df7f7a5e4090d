"""The alerts' data view (gpuscope/alerts/conditions.py): where metric rules are judged
when the store is filled from a query API (issue 40)."""

from __future__ import annotations

import json
from datetime import datetime

import duckdb

from gpuscope.alerts.conditions import DIRECT, DataView, data_view


def meta(value: object | None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    if value is not None:
        con.execute("INSERT INTO meta VALUES ('query_cursor', ?)", [json.dumps(value)])
    return con


def test_scraped_directly_rules_are_judged_at_now_over_their_own_window() -> None:
    view = data_view(meta(None))
    now = datetime(2026, 12, 1, 12, 3, 7)
    assert view == DIRECT and view.at(now) == now and view.window(180) == 180


def test_fleet_mode_judges_at_the_newest_bucket_of_the_shard_most_behind() -> None:
    t0 = 1_800_000_000.0  # a multiple of 300
    view = data_view(meta({"mode": "fleet", "step": 300.0, "shards": 3,
                           "cursors": {"0": t0 + 600, "1": t0 + 300, "2": None}}))  # fmt: skip
    # shard 1 has stored buckets up to [t0, t0 + 300): its sample at t0 + 299
    assert view.horizon is not None
    assert (view.horizon - datetime(1970, 1, 1)).total_seconds() == t0 + 299
    later = datetime(2030, 1, 1)
    assert view.at(later) == view.horizon
    # windows are whole buckets: 3 minutes is the newest bucket, 10 minutes two, 1 h twelve
    assert [view.window(w) for w in (180, 300, 600, 420, 3600)] == [300, 300, 600, 600, 3600]


def test_pull_mode_judges_at_its_newest_step_over_its_own_window() -> None:
    t0 = 1_800_000_000.0
    view = data_view(meta({"mode": "pull", "step": 15.0, "cursors": {"pull": t0}}))
    assert view.horizon is not None
    assert (view.horizon - datetime(1970, 1, 1)).total_seconds() == t0 - 15
    assert view.window(180) == 180


def test_an_unreadable_saved_window_is_read_as_direct() -> None:
    assert data_view(meta({"mode": "fleet"})) == DIRECT
    assert data_view(meta({"mode": "fleet", "step": 300, "cursors": {}})) == DIRECT
    assert DataView(step_s=300).window(1) == 300

"""The data-age rule of ``gpuscope analyze`` (gpuscope.analytics.runner.analysis_time): data older
than a few scrape intervals is analysed where it ends, with a note; current data at now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuscope.analytics.runner import analysis_time

NOW = datetime(2026, 11, 24, 13, 0, tzinfo=UTC)
NAIVE_NOW = NOW.replace(tzinfo=None)


def test_current_data_is_analysed_now_without_a_note() -> None:
    at, note = analysis_time(NAIVE_NOW - timedelta(seconds=40), NOW, 15.0)
    assert (at, note) == (NAIVE_NOW, None)


def test_data_that_ended_13_hours_ago_is_analysed_where_it_ends() -> None:
    """Regression (issue 12): analysed 13 h after the data ended, idle sessions and hot
    links had vanished while fragmentation and quota read as current, with no word."""
    newest = NAIVE_NOW - timedelta(hours=13)
    at, note = analysis_time(newest, NOW, 15.0)
    assert at == newest
    assert note is not None and "13.0 h ago" in note and "--at" in note
    assert "\n" not in note


def test_a_long_scrape_interval_is_not_stale_data() -> None:
    """Five intervals of 5 minutes: data 20 minutes old is current at that pace."""
    at, note = analysis_time(NAIVE_NOW - timedelta(minutes=20), NOW, 300.0)
    assert (at, note) == (NAIVE_NOW, None)
    assert analysis_time(None, NOW, 15.0) == (NAIVE_NOW, None)

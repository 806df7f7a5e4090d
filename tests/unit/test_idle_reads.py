"""The idle fold's read bound (gpuscope/analytics/detectors/idle_reads.py): the earliest
saved ``lookback_from`` of the keys that can have samples in the fold's range (told by
their series' ``last_seen``), and of the recent keys whose spacing the state lacks; the
whole look-back where one of those has no bound or the state lacks a key that can have
samples (its earlier samples were never folded)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.analytics.detectors.idle_reads import fold_bound, fresh_keys, read_from
from gpuscope.collector.storage.writer_log import LAST_SEEN_LAG_S

AT = datetime(2026, 12, 7, 12, 0)
LOOKBACK = timedelta(minutes=45)
_TS = pa.timestamp("us")


def _state(rows: list[tuple[str, datetime, datetime | None, float | None]]) -> pa.Table:
    """A saved state: (uuid, last_sample_ts, lookback_from, spacing) a key."""
    return pa.table({
        "uuid": pa.array([r[0] for r in rows], pa.string()),
        "last_sample_ts": pa.array([r[1] for r in rows], _TS),
        "lookback_from": pa.array([r[2] for r in rows], _TS),
        "spacing": pa.array([r[3] for r in rows], pa.float64()),
    })  # fmt: skip


STATE = _state([
    ("GPU-a", AT - timedelta(seconds=5), AT - timedelta(minutes=3), 15.0),
    ("GPU-b", AT - timedelta(seconds=10), AT - timedelta(minutes=9), 60.0),
    # a workload that ended 25 minutes ago: sampled within the look-back, no new samples
    ("GPU-c", AT - timedelta(minutes=25), AT - timedelta(minutes=28), 15.0),
    # sampled last before the look-back
    ("GPU-d", AT - timedelta(hours=2), AT - timedelta(hours=3), None),
])  # fmt: skip


def test_the_bound_is_the_earliest_lookback_from_of_the_keys_that_can_have_samples() -> None:
    assert fold_bound(STATE, AT, {"GPU-a", "GPU-b"}, LOOKBACK) == AT - timedelta(minutes=9)
    assert fold_bound(STATE, AT, {"GPU-a"}, LOOKBACK) == AT - timedelta(minutes=3)


def test_a_key_that_stopped_does_not_drag_the_bound_back() -> None:
    """GPU-c keeps its spacing and bound from the state: its 28 minutes of look-back are
    not read for the others' sake (before schema v10 they were, every fold)."""
    assert fold_bound(STATE, AT, {"GPU-a", "GPU-b"}, LOOKBACK) > AT - timedelta(minutes=28)


def test_no_key_with_new_samples_reads_no_look_back() -> None:
    assert fold_bound(STATE, AT, set(), LOOKBACK) == AT
    assert read_from(AT, AT, LOOKBACK) == AT


def test_a_recent_key_without_a_spacing_is_read_from_its_bound() -> None:
    """A state saved before schema v10 has no spacing: the key's look-back is read as
    before, from its own bound, even without new samples."""
    state = _state([
        ("GPU-a", AT - timedelta(seconds=5), AT - timedelta(minutes=3), 15.0),
        ("GPU-c", AT - timedelta(minutes=25), AT - timedelta(minutes=28), None),
    ])  # fmt: skip
    assert fold_bound(state, AT, {"GPU-a"}, LOOKBACK) == AT - timedelta(minutes=28)


def test_a_key_without_a_bound_reads_the_look_back_whole() -> None:
    state = _state([("GPU-a", AT - timedelta(seconds=5), None, 15.0)])
    assert fold_bound(state, AT, {"GPU-a"}, LOOKBACK) is None
    assert read_from(None, AT, LOOKBACK) == AT - LOOKBACK
    # without new samples its spacing is known: nothing is read for it
    assert fold_bound(state, AT, set(), LOOKBACK) == AT


def test_a_key_the_state_lacks_reads_the_look_back_whole() -> None:
    """A fractional pod's key whose inventory record came after its first samples: none of
    its samples were folded, so no bound speaks for them."""
    fresh = {"GPU-a", "GPU-b|ml/nb-0/notebook"}
    assert fold_bound(STATE, AT, fresh, LOOKBACK) is None
    assert read_from(fold_bound(STATE, AT, fresh, LOOKBACK), AT, LOOKBACK) == AT - LOOKBACK


def test_the_bound_never_reads_before_the_look_back() -> None:
    assert read_from(AT - timedelta(hours=5), AT, LOOKBACK) == AT - LOOKBACK
    assert read_from(AT - timedelta(minutes=9), AT, LOOKBACK) == AT - timedelta(minutes=9)


def test_fresh_keys_widen_by_the_writers_lag() -> None:
    """A series whose ``last_seen`` is within LAST_SEEN_LAG_S before the fold's start may
    have samples after it (the writer folds last_seen once a minute); one seen before
    that has none."""
    lag = timedelta(seconds=LAST_SEEN_LAG_S)
    busy = pa.table({
        "key": ["GPU-a", "GPU-a", "GPU-b", "GPU-c", "GPU-d|ml/p/c"],
        "last_seen": pa.array(
            [AT - timedelta(hours=1), AT + timedelta(seconds=30), AT - lag, AT - lag - timedelta(seconds=1),
             AT - timedelta(seconds=1)], _TS),
    })  # fmt: skip
    assert fresh_keys(busy, AT) == {"GPU-a", "GPU-b", "GPU-d|ml/p/c"}

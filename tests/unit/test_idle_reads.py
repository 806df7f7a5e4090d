"""The idle fold's read bound (gpuscope/analytics/detectors/idle_reads.py): from the saved
state's per-key ``lookback_from``, unless a busy key of the run is not in that state (its
earlier samples were never folded, so the fold must read the whole look-back for it)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.analytics.detectors.idle_reads import next_bound, read_from, saved_bound

AT = datetime(2026, 12, 7, 12, 0)
LOOKBACK = timedelta(minutes=45)


def _state(rows: list[tuple[str, datetime, datetime | None]]) -> pa.Table:
    """A saved state: (uuid, last_sample_ts, lookback_from) a key."""
    return pa.table({
        "uuid": pa.array([r[0] for r in rows], pa.string()),
        "last_sample_ts": pa.array([r[1] for r in rows], pa.timestamp("us")),
        "lookback_from": pa.array([r[2] for r in rows], pa.timestamp("us")),
    })  # fmt: skip


STATE = _state([
    ("GPU-a", AT - timedelta(seconds=5), AT - timedelta(minutes=3)),
    ("GPU-b", AT - timedelta(seconds=10), AT - timedelta(minutes=9)),
    # sampled last before the look-back: it bounds nothing
    ("GPU-c", AT - timedelta(hours=2), AT - timedelta(hours=3)),
])  # fmt: skip


def test_the_bound_is_the_earliest_lookback_from_of_the_keys_sampled_in_the_look_back() -> None:
    assert next_bound(STATE, AT, LOOKBACK) == AT - timedelta(minutes=9)


def test_a_recent_key_without_a_bound_reads_the_look_back_whole() -> None:
    state = _state([("GPU-a", AT - timedelta(seconds=5), None)])
    assert next_bound(state, AT, LOOKBACK) is None
    assert read_from(None, AT, LOOKBACK) == AT - LOOKBACK


def test_every_busy_key_in_the_state_keeps_the_bound() -> None:
    keys = ["GPU-a", "GPU-b", "GPU-a"]  # a key once a busy series: repeats are fine
    assert saved_bound(STATE, AT, keys, LOOKBACK) == AT - timedelta(minutes=9)
    assert saved_bound(STATE, AT, [], LOOKBACK) == AT - timedelta(minutes=9)


def test_a_busy_key_the_state_lacks_reads_the_look_back_whole() -> None:
    """A fractional pod's key whose inventory record came after its first samples: none of
    its samples were folded, so no bound speaks for them."""
    keys = ["GPU-a", "GPU-b", "GPU-b|ml/nb-0/notebook"]
    assert saved_bound(STATE, AT, keys, LOOKBACK) is None
    assert read_from(saved_bound(STATE, AT, keys, LOOKBACK), AT, LOOKBACK) == AT - LOOKBACK


def test_the_bound_never_reads_before_the_look_back() -> None:
    assert read_from(AT - timedelta(hours=5), AT, LOOKBACK) == AT - LOOKBACK
    assert read_from(AT - timedelta(minutes=9), AT, LOOKBACK) == AT - timedelta(minutes=9)

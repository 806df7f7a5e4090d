"""The weekly report's hourly use, judged a day at a time, equals the one-query answer.

``hourly_use`` (gpuscope/analytics/report/inputs.py) reads the fortnight a day at a time, each
day with a margin of buckets either side for the gap rule: a gap in data is bridged (idle
through it) only when the buckets with data on its sides are idle and at most
MAX_BRIDGED_GAP apart. These tests put gaps of every length around that limit across
the chunks' midnights, idle or busy on either side, and hold the chunked answer equal to
one chunk over the whole range.
"""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.report.inputs import chunk_for, create_held, hourly_use
from gpuscope.analytics.report.week import Week
from gpuscope.collector.storage.store import Store
from tests.integration import report_week as rw

WEEK = Week(2025, 10)
#: gap lengths in minutes around the longest bridged gap (2 h)
GAPS = [20, 100, 115, 120, 125, 130, 135, 140, 300]


def _utilization(store: Store, spells: list[tuple[int, int, int, float]]) -> None:
    """Replace the constructed fortnight's roll-ups: every GPU at 0.02 (idle) but for
    ``spells`` (gpu, start minute from W10 - 1 h, minutes, value; NaN: no data)."""
    con = store.cursor()
    sids = dict(
        con.execute(f"SELECT uuid, series_id FROM series WHERE metric = '{rw.UTIL}'").fetchall()
    )
    con.execute("DELETE FROM rollup_5m_rows")
    base = rw.W10 - timedelta(hours=1)
    rows: dict[str, list[Any]] = {k: [] for k in ("series_id", "bucket", "v")}
    for gpu in range(8):
        values = [0.02] * (4 * 24 * 12)  # four days of buckets
        for g, start, minutes, v in spells:
            if g == gpu:
                for b in range(start // 5, min(len(values), (start + minutes) // 5)):
                    values[b] = v
        for b, v in enumerate(values):
            if not math.isnan(v):  # NaN: no data
                rows["series_id"].append(sids[rw.uuid(gpu)])
                rows["bucket"].append(base + timedelta(minutes=5 * b))
                rows["v"].append(v)
    con.register("r", pa.table(rows))
    con.execute(
        "INSERT INTO rollup_5m_rows (series_id, bucket, max, sum, count) "
        "SELECT series_id, bucket, v, v * 20, 20 FROM r"
    )
    con.close()


def _both(store: Store) -> tuple[pl.DataFrame, pl.DataFrame]:
    con = store.cursor()
    params: dict[str, Any] = {
        "lo": WEEK.previous().start, "start": WEEK.start, "end": WEEK.end,
        "frontier": rw.W11, "threshold": 0.05, "memory": False,
    }  # fmt: skip
    create_held(con, params)
    keys = ["hour", "namespace", "pod", "project"]
    daily = hourly_use(con, params, chunk=timedelta(days=1)).sort(keys)
    whole = hourly_use(con, params, chunk=timedelta(days=30)).sort(keys)
    con.close()
    return daily, whole


def _assert_equal(daily: pl.DataFrame, whole: pl.DataFrame) -> None:
    assert daily.select("hour", "namespace", "pod").equals(whole.select("hour", "namespace", "pod"))
    for c in ("allocated", "used", "idle", "no_data"):
        assert daily[c].to_list() == pytest.approx(whole[c].to_list(), abs=1e-9), c


@pytest.fixture(scope="module")
def fortnight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rw.build(tmp_path_factory.mktemp("chunks") / "f.duckdb")


def test_gaps_across_midnight_either_side_of_the_limit(fortnight: Path, tmp_path: Path) -> None:
    """On GPUs 0, 2 and 5 (held then), each gap length centred on a midnight of W10,
    idle on both sides, busy before, or busy after: bridged or not, as in one query."""
    path = tmp_path / "g.duckdb"
    path.write_bytes(fortnight.read_bytes())
    spells = []
    for day, minutes in enumerate(GAPS[:3]):
        for gpu, busy in ((0, None), (2, "before"), (5, "after")):
            mid = 60 + day * 24 * 60  # W10 + day, in minutes from W10 - 1 h
            start = mid - minutes // 2 // 5 * 5
            spells.append((gpu, start, minutes, float("nan")))
            if busy == "before":
                spells.append((gpu, start - 30, 30, 0.9))
            if busy == "after":
                spells.append((gpu, start + minutes, 30, 0.9))
    with Store.open(path) as store:
        _utilization(store, spells)
        daily, whole = _both(store)
    assert whole["idle"].sum() > 0 and whole["no_data"].sum() > 0
    _assert_equal(daily, whole)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    spells=st.lists(
        st.tuples(
            st.sampled_from([0, 1, 2, 4, 5]),
            st.integers(0, 3 * 24 * 12).map(lambda b: b * 5),
            st.sampled_from(GAPS),
            st.sampled_from([float("nan"), float("nan"), 0.9, 0.0]),
        ),
        min_size=1, max_size=12,
    )
)  # fmt: skip
def test_random_gaps_and_busy_spells(fortnight: Path, tmp_path: Path, spells: Any) -> None:
    path = tmp_path / "r.duckdb"  # the same folder for every example
    path.unlink(missing_ok=True)
    path.write_bytes(fortnight.read_bytes())
    with Store.open(path) as store:
        _utilization(store, spells)
        daily, whole = _both(store)
    path.unlink()
    _assert_equal(daily, whole)


def test_chunks_are_sized_by_the_gpus_held() -> None:
    """A day at a time for 10,000 GPUs (2.9 M pieces a day), the fortnight in one query for
    a small cluster (each query has a fixed cost), whole days in between."""
    assert chunk_for(10_000) == timedelta(days=1)
    assert chunk_for(20_000) == timedelta(days=1)
    assert chunk_for(1_000) == timedelta(days=10)
    assert chunk_for(104) == timedelta(days=14)
    assert chunk_for(0) == timedelta(days=14)

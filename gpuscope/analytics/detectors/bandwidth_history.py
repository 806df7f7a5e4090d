"""The bandwidth rule over a range: which IB ports were hot in every window.

:func:`bandwidth_history` judges every window of a range (a full re-analysis after a rule
change, a report) as :func:`gpuscope.analytics.detectors.bandwidth.run_bandwidth` judges
the window ending then (the ``bandwidth_hotspot`` rule), without a run per window: the
5-minute roll-ups first rule out the ports that cannot be hot (``port_candidates`` in
sql/bandwidth.sql), then the raw steps of the others are read a chunk of windows at a time
(``port_history``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple

import duckdb

from gpuscope.analytics.detectors.bandwidth import (
    COVERAGE,
    EPOCH,
    HOT_SHARE,
    Q,
    read_lookback,
)
from gpuscope.analytics.rollups import rollup_5m_frontier
from gpuscope.collector.querying.fleet_questions import BUCKET_S
from gpuscope.collector.storage.store import utc
from gpuscope.collector.storage.writer_log import seen_bound
from gpuscope.core.settings import AnalyticsSettings

#: Windows :func:`bandwidth_history` judges in one query (4 hours at 5-minute steps).
CHUNK_WINDOWS = 48


class HotPort(NamedTuple):
    """An IB port hot in one window of :func:`bandwidth_history`."""

    node: str
    device: str
    port: str
    ratio: float
    direction: str


def bandwidth_history(
    con: duckdb.DuckDBPyConnection,
    start: datetime,
    end: datetime,
    settings: AnalyticsSettings,
    step: timedelta = timedelta(minutes=5),
    *,
    chunk_windows: int | None = None,
    prefilter: bool = True,
) -> list[tuple[datetime, list[HotPort]]]:
    """Hot IB ports of every window ending at ``start + k * step`` (``k >= 1``, up to ``end``).

    Each window is judged as :func:`run_bandwidth` judges the window ending then (the
    ``bandwidth_hotspot`` rule), but the whole range is read once: a sample's step is
    computed once and counted in every window it falls in, where running the detector per
    window would read each window's samples again (2,016 runs for a week at 5 minutes).
    Every window end is listed, with an empty list when nothing was hot.

    First the 5-minute roll-ups bound each port's traffic in each window from above
    (``port_candidates``): a port whose bound stays under the hot line in every window of
    a chunk cannot be hot there, and its raw samples are not read (``prefilter=False``
    reads every port, for tests that hold the two equal). Most ports of a fabric are
    nowhere near their line rate, so a week of 10,000 ports reads the raw steps of the
    few that come close. The range is then read :data:`CHUNK_WINDOWS` windows at a time
    (``chunk_windows``): each window is judged from its own samples (and the look-back
    before it), so chunks give the one-pass answer in memory bounded by the chunk.
    """
    start, end = utc(start), utc(end)
    if step <= timedelta(0):
        raise ValueError("step must be positive")
    n = int((end - start) / step)
    if n <= 0:
        return []
    chunk = chunk_windows or CHUNK_WINDOWS
    links = candidate_links(con, start, end, settings, step, chunk) if prefilter else {}
    hot: dict[int, list[HotPort]] = {}
    for k in range(0, (n + chunk - 1) // chunk):
        if prefilter and k not in links:
            continue
        lo = start + k * chunk * step
        read = None if not prefilter else sorted(links[k])
        for j, port in _port_history(con, lo, min(chunk, n - k * chunk), settings, step, read):
            hot.setdefault(k * chunk + j, []).append(port)
    return [(start + k * step, hot.get(k, [])) for k in range(1, n + 1)]


def candidate_links(
    con: duckdb.DuckDBPyConnection,
    start: datetime,
    end: datetime,
    settings: AnalyticsSettings,
    step: timedelta = timedelta(minutes=5),
    chunk_windows: int = CHUNK_WINDOWS,
) -> dict[int, set[int]]:
    """The ports that could be hot in some window of each chunk of
    :func:`bandwidth_history` (chunk number -> their rate gauges' series ids), bounded
    from the 5-minute roll-ups (``port_candidates`` in sql/bandwidth.sql says why the
    bound never leaves a hot window out)."""
    start, end = utc(start), utc(end)
    n = int((end - start) / step)
    window = timedelta(minutes=settings.ib_hot_window_minutes)
    params: dict[str, Any] = {
        "start_s": (start - EPOCH).total_seconds(),
        "end": start + n * step,
        "read_lo": start - window - read_lookback(window),
        "seen_lo": seen_bound(start - window - read_lookback(window)),
        "step": step.total_seconds(),
        "window": window.total_seconds(),
        "n": n,
        "hot": settings.ib_hot_ratio,
        "coverage": COVERAGE,
        "frontier": rollup_5m_frontier(con),
    }
    links: dict[int, set[int]] = {}
    for j, link in con.execute(Q["port_candidates"], params).fetchall():
        links.setdefault((int(j) - 1) // chunk_windows, set()).add(int(link))
    return links


def _port_history(
    con: duckdb.DuckDBPyConnection,
    start: datetime,
    n: int,
    settings: AnalyticsSettings,
    step: timedelta,
    links: list[int] | None,
) -> list[tuple[int, HotPort]]:
    """``port_history`` over the ``n`` windows after ``start``: (window, hot port) pairs,
    windows numbered from 1; ``links``: only the ports of these rate gauges (None: all)."""
    window = timedelta(minutes=settings.ib_hot_window_minutes)
    lookback = read_lookback(window)
    params: dict[str, Any] = {
        "start_s": (start - EPOCH).total_seconds(),
        "end": start + n * step,
        "read_lo": start - window - lookback,
        "seen_lo": seen_bound(start - window - lookback),
        "step": step.total_seconds(),
        "window": window.total_seconds(),
        "lookback": lookback.total_seconds(),
        "n": n,
        "hot": settings.ib_hot_ratio,
        "hot_share": HOT_SHARE,
        "coverage": COVERAGE,
        "all_links": links is None,
        "links": links or [],
        "bucket_s": BUCKET_S,  # a fleet summary's sample: one bucket's increase
    }
    return [
        (int(j), HotPort(node, device, port, float(ratio), direction))
        for j, node, device, port, ratio, direction in con.execute(
            Q["port_history"], params
        ).fetchall()
    ]

"""The replay itself: where each policy would have stopped each session, and what it would
have freed and cut off. Pure: frames in (analytics/idle_whatif/read.py), figures out.

For an idle point of N minutes (plus its warning), a session is stopped at the first
instant it had been idle N minutes by the idle detector's definition: inside one idle run
(no busy bucket, no unknown one: a gap the detector would not bridge restarts the idle
clock), ``stop = max(run start + N, session start + start-up grace)`` and the run must last
past it. The detector says the same: a workload is idle at ``t`` when its idle-since is
at or before ``t - window`` and it is past its grace. For a time limit of H hours, at
``start + H`` while the session was still held.

Per stopped session (all clipped to the replayed range [start, end)):

- ``gpu_hours_freed``: GPU-hours it held from the stop to its real end (its deletion, or
  the range's end); a session stopped before the range frees all its hours in it;
- ``busy_gpu_hours_after_stop``: GPU-hours of its busy buckets after the stop (the work
  the policy would have cut off; a time limit falling inside a busy run takes its part);
- ``came_back``: it was busy again after the stop (its owner came back).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl

from gpuscope.analytics.idle_whatif.points import Point
from gpuscope.analytics.idle_whatif.read import ReplayInputs, labels_of

#: Columns of a replay's per-session frame.
SESSION_COLUMNS = ("pid", "stop", "gpu_hours_freed", "busy_gpu_hours_after_stop", "came_back")
_US = pl.Datetime("us")


def selected(inputs: ReplayInputs, point: Point, namespaces: tuple[str, ...] = ()) -> pl.DataFrame:
    """The sessions a point replays: held in the range, in ``namespaces`` (the replay's own
    filter; empty: all) and selected by the point."""
    s = inputs.sessions.filter(pl.col("in_range"))
    if namespaces:
        s = s.filter(pl.col("namespace").is_in(list(namespaces)))
    if point.selective:
        keep = [
            point.covers(ns, labels_of(text))
            for ns, text in s.select("namespace", "pod_labels").iter_rows()
        ]
        s = s.filter(pl.Series(keep, dtype=pl.Boolean))
    return s


def _stops(
    inputs: ReplayInputs, sessions: pl.DataFrame, point: Point, grace: timedelta
) -> pl.DataFrame:
    """(pid, stop) of every session the point stops before the range's end."""
    end = pl.lit(inputs.end).cast(_US)
    after = pl.duration(microseconds=int(point.stop_after / timedelta(microseconds=1)))
    if point.kind == "time_limit":
        real_end = pl.coalesce(pl.col("ended"), end)
        return (
            sessions.select("pid", (pl.col("started") + after).alias("stop"), real_end.alias("x"))
            .filter((pl.col("stop") < pl.col("x")) & (pl.col("stop") < end))
            .select("pid", "stop")
        )
    grace_us = pl.duration(microseconds=int(grace / timedelta(microseconds=1)))
    idle = inputs.runs.filter(pl.col("state") == "I").join(
        sessions.select("pid", "started"), on="pid", how="inner"
    )
    stop = pl.max_horizontal(pl.col("t0") + after, pl.col("started") + grace_us)
    return (
        idle.with_columns(stop.alias("stop"))
        .filter((pl.col("stop") < pl.col("t1")) & (pl.col("stop") < end))
        .group_by("pid")
        .agg(pl.col("stop").min())
    )


def _seconds(expr: pl.Expr) -> pl.Expr:
    return expr.dt.total_microseconds().cast(pl.Float64) / 1e6


def per_session(
    inputs: ReplayInputs,
    point: Point,
    grace: timedelta,
    namespaces: tuple[str, ...] = (),
) -> pl.DataFrame:
    """One row per stopped session (:data:`SESSION_COLUMNS`) with its namespace, pod and
    owner."""
    sessions = selected(inputs, point, namespaces)
    stops = _stops(inputs, sessions, point, grace)
    start = pl.lit(inputs.start).cast(_US)
    end = pl.lit(inputs.end).cast(_US)
    freed = (
        inputs.held.join(stops, on="pid", how="inner")
        .with_columns(
            (
                pl.col("share")
                * _seconds(
                    pl.col("e").clip(upper_bound=end)
                    - pl.max_horizontal("s", "stop", start).clip(upper_bound=end)
                ).clip(lower_bound=0.0)
                / 3600.0
            ).alias("h")
        )
        .group_by("pid")
        .agg(pl.col("h").sum().alias("gpu_hours_freed"))
    )
    lo_in = pl.max_horizontal("t0", start)
    hi_in = pl.col("t1").clip(upper_bound=end)
    part = (
        pl.when(pl.col("t0") >= pl.col("stop"))
        .then(1.0)
        .otherwise(
            _seconds(hi_in - pl.max_horizontal("stop", start)).clip(lower_bound=0.0)
            / _seconds(hi_in - lo_in).clip(lower_bound=1e-9)
        )
    )
    busy = (
        inputs.runs.filter(pl.col("state") == "B")
        .join(stops, on="pid", how="inner")
        .filter((pl.col("t1") > pl.col("stop")) & (pl.col("t0") < end))
        .with_columns((pl.col("gpu_hours") * part).alias("h"))
        .group_by("pid")
        .agg(
            pl.col("h").sum().alias("busy_gpu_hours_after_stop"),
            pl.len().alias("n"),
        )
    )
    out = (
        stops.join(freed, on="pid", how="left")
        .join(busy, on="pid", how="left")
        .with_columns(
            pl.col("gpu_hours_freed").fill_null(0.0),
            pl.col("busy_gpu_hours_after_stop").fill_null(0.0),
            (pl.col("n").fill_null(0) > 0).alias("came_back"),
        )
        .select(*SESSION_COLUMNS)
    )
    return out.join(
        sessions.select("pid", "namespace", "pod", "owner", "project"), on="pid", how="left"
    ).sort("pid")


def totals(rows: pl.DataFrame) -> dict[str, Any]:
    """A point's headline figures from its per-session rows."""
    stopped = rows.height
    back = int(rows["came_back"].sum()) if stopped else 0
    return {
        "sessions_stopped": stopped,
        "stopped_then_busy": back,
        "comeback_share": round(back / stopped, 4) if stopped else 0.0,
        "gpu_hours_freed": round(float(rows["gpu_hours_freed"].sum()), 4) if stopped else 0.0,
        "busy_gpu_hours_after_stop": (
            round(float(rows["busy_gpu_hours_after_stop"].sum()), 4) if stopped else 0.0
        ),
    }


def split(rows: pl.DataFrame, by: str) -> list[dict[str, Any]]:
    """The same figures per ``by`` (namespace, owner), most GPU-hours freed first."""
    out = []
    for (key,), part in rows.group_by(by):
        out.append({by: key, **totals(part)})
    out.sort(key=lambda r: (-r["gpu_hours_freed"], str(r[by])))
    return out


def cut_off(rows: pl.DataFrame, limit: int) -> list[dict[str, Any]]:
    """Whom the policy cut off: stopped sessions busy again later, most work cut first."""
    back = rows.filter(pl.col("came_back")).sort(
        ["busy_gpu_hours_after_stop", "namespace", "pod"], descending=[True, False, False]
    )
    return [
        {
            "namespace": ns,
            "pod": pod,
            "owner": owner,
            "stopped_at": _iso(stop),
            "busy_gpu_hours_after_stop": round(float(busy), 4),
        }
        for ns, pod, owner, stop, busy in back.head(limit)
        .select("namespace", "pod", "owner", "stop", "busy_gpu_hours_after_stop")
        .iter_rows()
    ]


def _iso(t: datetime) -> str:
    return t.replace(tzinfo=None).isoformat() + "Z"

"""The weekly report's tables from GPU-hours per hour and pod: pure polars functions.

gpuscope/analytics/report/data.py fetches the rows from the store; everything here is a function of
frames and the week, so each table's arithmetic can be read (and tested) on its own.
Definitions of allocated, used, idle and no data are in report_data's docstring.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import polars as pl

from gpuscope.analytics.report.week import Week

#: GPU-hour amounts below this are rounding noise of fractional sums.
EPS = 1e-9
SUMS = ("allocated", "used", "idle", "no_data")


def ratio(num: str, den: str) -> pl.Expr:
    return pl.when(pl.col(den) > EPS).then(pl.col(num) / pl.col(den)).otherwise(None)


def rates(df: pl.DataFrame) -> pl.DataFrame:
    """Efficiency and idle share over the allocated GPU-hours that have data."""
    known = pl.col("allocated") - pl.col("no_data")
    return df.with_columns(
        pl.when(known > EPS).then(pl.col("used") / known).otherwise(None).alias("efficiency"),
        pl.when(known > EPS).then(pl.col("idle") / known).otherwise(None).alias("idle_share"),
    )


def sum_by(df: pl.DataFrame, *keys: str) -> pl.DataFrame:
    return df.group_by(list(keys)).agg(pl.col(c).sum() for c in SUMS)


def gpu_hours_names(df: pl.DataFrame, prefix: str = "") -> pl.DataFrame:
    return df.rename({c: f"{prefix}{c}_gpu_hours" for c in SUMS if c in df.columns})


def with_cost(df: pl.DataFrame, price: float | None, *columns: str) -> pl.DataFrame:
    if price is None:
        return df
    return df.with_columns(
        (pl.col(c) * price).alias(c.replace("gpu_hours", "cost")) for c in columns
    )


def breakdown(
    this: pl.DataFrame, prev: pl.DataFrame, key: str, keys: pl.DataFrame, price: float | None
) -> pl.DataFrame:
    """Per ``key``: this week's sums and rates, last week's, and the change. With no
    allocation stored for the previous week at all, the changes are empty (null), as in
    the cluster table: "no previous week" is not "zero last week"."""
    now = rates(sum_by(this, key))
    before = rates(sum_by(prev, key)).select(
        key,
        pl.col("allocated").alias("previous_allocated_gpu_hours"),
        pl.col("efficiency").alias("previous_efficiency"),
    )
    out = keys.join(now, on=key, how="left").join(before, on=key, how="left")
    out = out.with_columns(pl.col(c).fill_null(0.0) for c in SUMS)
    # a key new this week changed from 0; without any previous week there is no change
    previous = pl.col("previous_allocated_gpu_hours").fill_null(0.0) if prev.height else None
    out = out.with_columns(
        (pl.col("allocated") - previous if previous is not None else pl.lit(None))
        .cast(pl.Float64)
        .alias("allocated_change_gpu_hours"),
        (pl.col("efficiency") - pl.col("previous_efficiency")).alias("efficiency_change"),
    )
    out = gpu_hours_names(out).sort("allocated_gpu_hours", key, descending=[True, False])
    return with_cost(out, price, "allocated_gpu_hours", "idle_gpu_hours")


def cluster_table(
    this: pl.DataFrame,
    prev: pl.DataFrame,
    cap_this: float | None,
    cap_prev: float | None,
    price: float | None,
) -> pl.DataFrame:
    """The headline numbers as rows: metric, unit, this week, previous week, change."""

    def figures(df: pl.DataFrame, capacity: float | None) -> dict[str, float | None]:
        sums = {c: float(df[c].sum()) for c in SUMS}
        known = sums["allocated"] - sums["no_data"]
        out: dict[str, float | None] = {
            "capacity_gpu_hours": capacity,
            **{f"{c}_gpu_hours": v for c, v in sums.items()},
            "unallocated_gpu_hours": None if capacity is None else capacity - sums["allocated"],
            "allocation_ratio": sums["allocated"] / capacity if capacity else None,
            "efficiency": sums["used"] / known if known > EPS else None,
            "idle_share": sums["idle"] / known if known > EPS else None,
        }
        if price is not None:
            out["allocated_cost"] = sums["allocated"] * price
            out["idle_cost"] = sums["idle"] * price
        return out

    now, before = figures(this, cap_this), figures(prev, cap_prev)
    seen_before = prev.height > 0
    rows = []
    for name, value in now.items():
        old = before[name] if seen_before else None
        unit = (
            "ratio"
            if name in ("allocation_ratio", "efficiency", "idle_share")
            else ("money" if name.endswith("cost") else "GPU-hours")
        )
        change = value - old if value is not None and old is not None else None
        rows.append((name, unit, value, old, change))
    return pl.DataFrame(
        rows,
        schema={
            "metric": pl.String,
            "unit": pl.String,
            "this_week": pl.Float64,
            "previous_week": pl.Float64,
            "change": pl.Float64,
        },
        orient="row",
    )


def week_hours(week: Week) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "hour": pl.datetime_range(
                week.start, week.end, "1h", closed="left", eager=True, time_unit="us"
            )
        }
    )


def quota_table(
    this: pl.DataFrame,
    guarantees: pl.DataFrame,
    week: Week,
    over_quota: dict[str, tuple[float, float]] | None = None,
) -> pl.DataFrame:
    """Per project: its guarantee over the week against the GPU-hours it held, hour by hour.

    ``over_quota`` (project -> GPU-hours over the guarantee, hours over it) is the quota
    detector's over-use integrated over the week
    (:func:`gpuscope.analytics.queueing.quota.over_quota_hours`);
    it replaces the hourly estimate so the report and the detector share one definition.
    """
    alloc = sum_by(this, "hour", "project").select("hour", "project", "allocated")
    projects = pl.concat([guarantees.select("project"), alloc.select("project")]).unique()
    grid = week_hours(week).join(projects, how="cross")
    hourly = (
        grid.join(guarantees, on=["hour", "project"], how="left")
        .join(alloc, on=["hour", "project"], how="left")
        .with_columns(pl.col("guaranteed", "allocated").fill_null(0.0))
    )
    over = (pl.col("allocated") - pl.col("guaranteed")).clip(lower_bound=0.0)
    out = hourly.group_by("project").agg(
        pl.col("guaranteed").mean().alias("guaranteed_gpus"),
        pl.col("guaranteed").sum().alias("guaranteed_gpu_hours"),
        pl.col("allocated").sum().alias("allocated_gpu_hours"),
        (pl.col("allocated").sum() / week.hours).alias("average_gpus"),
        pl.col("allocated").max().alias("peak_hour_gpus"),
        (over > EPS).sum().cast(pl.Float64).alias("hours_over_guarantee"),
        over.sum().alias("gpu_hours_over_guarantee"),
    )
    out = out.with_columns(
        ratio("allocated_gpu_hours", "guaranteed_gpu_hours").alias("use_of_guarantee")
    )
    if over_quota is not None:
        detector = pl.DataFrame(
            [(p, g, h) for p, (g, h) in over_quota.items()],
            schema={"project": pl.Utf8, "gpu_hours_over": pl.Float64, "hours_over": pl.Float64},
            orient="row",
        )
        out = (
            out.join(detector, on="project", how="left")
            .with_columns(
                pl.col("hours_over").fill_null(0.0).alias("hours_over_guarantee"),
                pl.col("gpu_hours_over").fill_null(0.0).alias("gpu_hours_over_guarantee"),
            )
            .drop("hours_over", "gpu_hours_over")
        )
    return out.sort("guaranteed_gpus", "project", descending=[True, False])


def gap_table(cluster_hours: pl.DataFrame) -> pl.DataFrame:
    """Runs of hours in which GPUs were held but not one of them had a sample."""
    dark = cluster_hours.filter(
        (pl.col("allocated") > EPS) & (pl.col("no_data") >= pl.col("allocated") * (1 - 1e-9))
    ).sort("hour")
    rows: list[list[Any]] = []
    for hour, no_data in dark.select("hour", "no_data").iter_rows():
        if rows and rows[-1][1] == hour:
            rows[-1][1] = hour + timedelta(hours=1)
            rows[-1][3] += no_data
        else:
            rows.append([hour, hour + timedelta(hours=1), 0.0, no_data])
    for row in rows:
        row[2] = (row[1] - row[0]).total_seconds() / 3600
    return pl.DataFrame(
        rows,
        schema={
            "start": pl.Datetime("us"),
            "end": pl.Datetime("us"),
            "hours": pl.Float64,
            "allocated_gpu_hours_without_data": pl.Float64,
        },
        orient="row",
    )


def actions_summary(actions: pl.DataFrame) -> pl.DataFrame:
    mode = pl.when(pl.col("dry_run")).then(pl.lit("dry-run")).otherwise(pl.lit("executed"))
    failed = pl.col("result").str.to_lowercase().is_in(["failed", "error", "refused"])
    return (
        actions.with_columns(mode.alias("mode"))
        .group_by("action", "mode")
        .agg(
            pl.len().cast(pl.Int64).alias("actions"),
            failed.sum().cast(pl.Int64).alias("failed"),
            pl.col("gpus").sum().alias("gpus"),
            pl.col("gpu_hours_freed").sum().alias("gpu_hours_freed"),
        )
        .sort("mode", "gpu_hours_freed", "action", descending=[True, True, False])
    )


def notes_for(
    cluster: pl.DataFrame, gaps: pl.DataFrame, seen_before: bool, has_capacity: bool
) -> list[str]:
    notes = []
    for start, end, hours, gpu_hours in gaps.iter_rows():
        notes.append(
            f"No utilization data from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC "
            f"({hours:g} h): the {gpu_hours:.1f} GPU-hours held then are reported as "
            "'no data', not as idle."
        )
    values = dict(cluster.select("metric", "this_week").iter_rows())
    no_data, allocated = values["no_data_gpu_hours"] or 0.0, values["allocated_gpu_hours"] or 0.0
    if no_data > EPS:
        notes.append(
            f"{no_data:.1f} of {allocated:.1f} allocated GPU-hours "
            f"({no_data / allocated:.1%}) had no utilization samples: counted as 'no data', "
            "neither idle nor used, and left out of efficiency."
        )
    if not seen_before:
        notes.append("No allocations are stored for the previous week: changes are not shown.")
    if not has_capacity:
        notes.append("No node inventory covers the week: capacity is unknown.")
    return notes

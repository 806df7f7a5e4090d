"""The weekly report's numbers: every table it shows, computed from the store.

Definitions (the report states them too):

* **allocated** GPU-hours: time a pod held a GPU (``workload_intervals``), times its share
  of the GPU (a fractional pod its fraction, from the pod's inventory record);
* **used**: allocated GPU-hours weighted by the GPU's mean utilization
  (``gpuscope_gpu_utilization_ratio``) in each 5-minute bucket; a shared GPU's utilization
  is split over its holders by their shares;
* **idle**: allocated GPU-hours in 5-minute buckets where the GPU stayed under
  ``analytics.idle_utilization_below`` throughout (its highest sample under it);
* **no data**: allocated GPU-hours in buckets with no sample of the GPU. Unknown is not
  idle: these hours are neither idle nor used, and efficiency leaves them out
  (``efficiency = used / (allocated - no data)``);
* **capacity**: allocatable GPUs of the nodes in the inventory history, hour by hour.

The heavy part (cutting a fortnight of allocations into 5-minute pieces and joining each
to its GPU's utilization) is one DuckDB query over the 5-minute roll-ups (raw samples past
their frontier) that returns GPU-hours per hour and pod; polars aggregates those to every
table. The previous week is read in the same pass, for the changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import duckdb
import polars as pl

from analytics.report_fragmentation import fragmentation_over
from analytics.report_sql import Q, frame, run
from analytics.report_week import Week
from collector.schema import GET_META
from collector.store import utc
from gpuscope.settings import Settings

EPOCH = datetime(1970, 1, 1)
#: GPU-hour amounts below this are rounding noise of fractional sums.
EPS = 1e-9
SUMS = ("allocated", "used", "idle", "no_data")
#: Tables of a report, in the order the report shows them.
TABLES = (
    "cluster",
    "daily",
    "hourly",
    "projects",
    "namespaces",
    "idle_sessions",
    "quotas",
    "fragmentation",
    "ib_hotspots",
    "actions_summary",
    "actions",
    "data_gaps",
)


@dataclass(frozen=True, slots=True)
class WeeklyReport:
    """A week's report: its tables (polars frames, flat, one per section) and notes."""

    week: Week
    generated_at: datetime
    idle_threshold: float
    price_per_gpu_hour: float | None
    currency: str
    dashboard_url: str
    tables: dict[str, pl.DataFrame]
    #: Things a reader must know to read the numbers right (missing data first).
    notes: tuple[str, ...]

    def metric(self, name: str, column: str = "this_week") -> Any:
        """A value of the cluster table (``column``: this_week, previous_week, change)."""
        row = self.tables["cluster"].filter(pl.col("metric") == name)
        return row[column][0] if row.height else None


def _ratio(num: str, den: str) -> pl.Expr:
    return pl.when(pl.col(den) > EPS).then(pl.col(num) / pl.col(den)).otherwise(None)


def _rates(df: pl.DataFrame) -> pl.DataFrame:
    """Efficiency and idle share over the allocated GPU-hours that have data."""
    known = pl.col("allocated") - pl.col("no_data")
    return df.with_columns(
        pl.when(known > EPS).then(pl.col("used") / known).otherwise(None).alias("efficiency"),
        pl.when(known > EPS).then(pl.col("idle") / known).otherwise(None).alias("idle_share"),
    )


def _sum_by(df: pl.DataFrame, *keys: str) -> pl.DataFrame:
    return df.group_by(list(keys)).agg(pl.col(c).sum() for c in SUMS)


def _gpu_hours_names(df: pl.DataFrame, prefix: str = "") -> pl.DataFrame:
    return df.rename({c: f"{prefix}{c}_gpu_hours" for c in SUMS if c in df.columns})


def _with_cost(df: pl.DataFrame, price: float | None, *columns: str) -> pl.DataFrame:
    if price is None:
        return df
    return df.with_columns(
        (pl.col(c) * price).alias(c.replace("gpu_hours", "cost")) for c in columns
    )


def _breakdown(
    this: pl.DataFrame, prev: pl.DataFrame, key: str, keys: pl.DataFrame, price: float | None
) -> pl.DataFrame:
    """Per ``key``: this week's sums and rates, last week's, and the change."""
    now = _rates(_sum_by(this, key))
    before = _rates(_sum_by(prev, key)).select(
        key,
        pl.col("allocated").alias("previous_allocated_gpu_hours"),
        pl.col("efficiency").alias("previous_efficiency"),
    )
    out = keys.join(now, on=key, how="left").join(before, on=key, how="left")
    out = out.with_columns(pl.col(c).fill_null(0.0) for c in SUMS)
    out = out.with_columns(
        (pl.col("allocated") - pl.col("previous_allocated_gpu_hours").fill_null(0.0)).alias(
            "allocated_change_gpu_hours"
        ),
        (pl.col("efficiency") - pl.col("previous_efficiency")).alias("efficiency_change"),
    )
    out = _gpu_hours_names(out).sort("allocated_gpu_hours", key, descending=[True, False])
    return _with_cost(out, price, "allocated_gpu_hours", "idle_gpu_hours")


def _cluster(
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


def _hours(week: Week) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "hour": pl.datetime_range(
                week.start, week.end, "1h", closed="left", eager=True, time_unit="us"
            )
        }
    )


def _quotas(this: pl.DataFrame, guarantees: pl.DataFrame, week: Week) -> pl.DataFrame:
    """Per project: its guarantee over the week against the GPU-hours it held, hour by hour."""
    alloc = _sum_by(this, "hour", "project").select("hour", "project", "allocated")
    projects = pl.concat([guarantees.select("project"), alloc.select("project")]).unique()
    grid = _hours(week).join(projects, how="cross")
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
        _ratio("allocated_gpu_hours", "guaranteed_gpu_hours").alias("use_of_guarantee")
    )
    return out.sort("guaranteed_gpus", "project", descending=[True, False])


def _gaps(cluster_hours: pl.DataFrame) -> pl.DataFrame:
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


def _actions_summary(actions: pl.DataFrame) -> pl.DataFrame:
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


def _notes(
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


def build_report(
    con: duckdb.DuckDBPyConnection, week: Week, settings: Settings, *, now: datetime
) -> WeeklyReport:
    """The report of ``week`` from the store on ``con`` (read only but for a temp table).

    ``now`` is when it is generated (it must be after the week); the previous week is read
    too, for the changes.
    """
    now = utc(now)
    week.check_over(now)
    rs, an = settings.report, settings.analytics
    price = rs.price_per_gpu_hour
    frontier_row = con.execute(GET_META, ["rollup_5m_until"]).fetchone()
    params: dict[str, Any] = {
        "lo": week.previous().start,
        "start": week.start,
        "end": week.end,
        "frontier": utc(frontier_row[0]) if frontier_row else EPOCH,
        "threshold": an.idle_utilization_below,
        "hot": an.ib_hot_ratio,
    }
    run(con, Q["create_held"], **params)
    try:
        hourly = frame(con, Q["hourly_use"], **params)
        pods = frame(con, Q["pods"], **params)
    finally:
        con.execute("DROP TABLE IF EXISTS report_held")
    capacity = frame(con, Q["capacity"], **params)
    guarantees = frame(con, Q["guarantees"], **params)
    ib = frame(con, Q["ib_hot_ports"], **params)
    actions = frame(con, Q["actions"], **params)
    step = timedelta(hours=rs.fragmentation_step_hours)
    fragmentation = fragmentation_over(con, week, an, step)

    start = pl.lit(week.start).cast(pl.Datetime("us"))
    hourly = hourly.with_columns(pl.col("hour").cast(pl.Datetime("us")))
    this, prev = hourly.filter(pl.col("hour") >= start), hourly.filter(pl.col("hour") < start)
    capacity = capacity.with_columns(pl.col("hour").cast(pl.Datetime("us")))
    cap_this = capacity.filter(pl.col("hour") >= start)["capacity"].sum()
    cap_prev = capacity.filter(pl.col("hour") < start)["capacity"].sum()
    has_capacity = cap_this > EPS
    cluster = _cluster(
        this,
        prev,
        float(cap_this) if has_capacity else None,
        float(cap_prev) if cap_prev > EPS else None,
        price,
    )

    per_hour = _hours(week).join(_sum_by(this, "hour"), on="hour", how="left")
    per_hour = per_hour.join(capacity, on="hour", how="left").with_columns(
        pl.col(*SUMS).fill_null(0.0)
    )
    day = pl.col("hour").dt.truncate("1d").alias("day")
    daily = (
        _rates(
            per_hour.group_by(day).agg(pl.col("capacity").sum(), *(pl.col(c).sum() for c in SUMS))
        )
        .with_columns(
            pl.when(pl.col("allocated") > EPS)
            .then(1 - pl.col("no_data") / pl.col("allocated"))
            .otherwise(None)
            .alias("data_coverage"),
            pl.when(pl.col("capacity") > EPS).then(pl.col("capacity")).otherwise(None),
        )
        .sort("day")
    )
    daily = _gpu_hours_names(daily.rename({"capacity": "capacity_gpu_hours"}))
    hourly_gpus = per_hour.rename({c: f"{c}_gpus" for c in (*SUMS, "capacity")}).sort("hour")

    projects_keys = pl.concat([hourly.select("project"), guarantees.select("project")]).unique()
    projects = _breakdown(this, prev, "project", projects_keys, price)
    ns_project = _sum_by(hourly, "namespace", "project").sort("allocated", descending=True)
    ns_keys = ns_project.group_by("namespace", maintain_order=True).agg(pl.col("project").first())
    namespaces = _breakdown(this, prev, "namespace", ns_keys, price)

    idle = _rates(_sum_by(this, "namespace", "pod")).filter(pl.col("idle") > EPS)
    idle = idle.join(pods.drop("project"), on=["namespace", "pod"], how="left")
    idle = (
        _gpu_hours_names(idle)
        .sort("idle_gpu_hours", "namespace", "pod", descending=[True, False, False])
        .head(rs.top_n)
    )
    idle = idle.select(
        "namespace",
        "pod",
        "owner",
        "kind",
        "interactive",
        "nodes",
        "gpus",
        "allocated_gpu_hours",
        "idle_gpu_hours",
        "no_data_gpu_hours",
        "idle_share",
        "efficiency",
        "first_held",
        "last_held",
    )
    idle = _with_cost(
        idle.join(
            _sum_by(this, "namespace", "pod", "project").select("namespace", "pod", "project"),
            on=["namespace", "pod"],
            how="left",
        ),
        price,
        "idle_gpu_hours",
    )

    gaps = _gaps(per_hour)
    tables: dict[str, pl.DataFrame] = {
        "cluster": cluster,
        "daily": daily,
        "hourly": hourly_gpus,
        "projects": projects,
        "namespaces": namespaces,
        "idle_sessions": idle,
        "quotas": _quotas(this, guarantees, week),
        "fragmentation": fragmentation,
        "ib_hotspots": ib.head(rs.top_n),
        "actions_summary": _actions_summary(actions),
        "actions": actions,
        "data_gaps": gaps,
    }
    notes = _notes(cluster, gaps, prev.height > 0 and prev["allocated"].sum() > EPS, has_capacity)
    return WeeklyReport(
        week=week,
        generated_at=now,
        idle_threshold=an.idle_utilization_below,
        price_per_gpu_hour=price,
        currency=rs.currency,
        dashboard_url=rs.dashboard_url,
        tables=tables,
        notes=tuple(notes),
    )

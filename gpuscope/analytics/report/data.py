"""The weekly report's numbers: every table it shows, computed from the store.

Definitions (the report states them too):

* **allocated** GPU-hours: time a pod held a GPU (``workload_intervals``), times its share
  of the GPU (a fractional pod its fraction, from the pod's inventory record);
* **used**: allocated GPU-hours weighted by the GPU's mean utilization
  (``gpuscope_gpu_utilization_ratio``) in each 5-minute bucket; a shared GPU's utilization
  is split over its holders by their shares;
* **idle**: allocated GPU-hours in 5-minute buckets where the holder stayed under
  ``analytics.idle_utilization_below`` throughout, by the idle detector's definition: the
  busy signal is SM activity where the GPU has it, else NVML utilization (plus memory
  activity with ``idle_include_memory_activity``); a fractional pod is judged on its own
  utilization over its share where the agents report it;
* **no data**: allocated GPU-hours in buckets with no sample of the GPU, but for a gap
  with idle data on both sides, which is idle (the pod was idle through it: the rule of
  ``analytics/detectors/idle_gaps.py``, shared with the idle detector). Unknown is not idle: these
  hours are neither idle nor used, and efficiency leaves them out
  (``efficiency = used / (allocated - no data)``);
* **capacity**: allocatable GPUs of the nodes in the inventory history, hour by hour.

Under fleet summaries (``collector.query.summaries``, docs/scale.md) the store holds one
interval per workload, not per GPU: it counts as the GPUs the workload holds
(gpuscope/collector/storage/held_gpus.py), each judged by the workload's busy peak in the
bucket (the highest busy signal of any of its GPUs). Allocated and no-data GPU-hours are
the same as direct scraping's; a workload is idle in a bucket when its peak is under the
threshold (every GPU it holds is then idle); **used** takes its GPUs' mean utilization
in each bucket (over the bucket and its GPUs) for every GPU it holds, so it sums to what
the GPUs' own series give (:data:`SUMMARIES_NOTE` says so in the report).

The heavy part (cutting a fortnight of allocations into 5-minute pieces and joining each
to its GPU's utilization) is one DuckDB query a chunk of days over the 5-minute roll-ups
(raw samples past their frontier) that returns GPU-hours per hour and pod
(report/inputs.py reads it beside the allocation sections); polars aggregates those to
every table. The previous week is read in the same pass, for the changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import polars as pl

from gpuscope.analytics.report.inputs import create_held, hourly_use, read_inputs
from gpuscope.analytics.report.tables import (
    EPS,
    SUMS,
    actions_summary,
    breakdown,
    cluster_table,
    gap_table,
    gpu_hours_names,
    notes_for,
    quota_table,
    rates,
    sum_by,
    week_hours,
    with_cost,
)
from gpuscope.analytics.report.week import Week
from gpuscope.analytics.rollups import rollup_5m_frontier
from gpuscope.collector.storage.store import utc
from gpuscope.core.settings import Settings

#: What a report says when some of its GPUs' data are fleet summaries.
SUMMARIES_NOTE = (
    "Fleet summaries (collector.query.summaries): a workload's GPUs are counted from its "
    "summary, each taken at the mean utilization of its GPUs in every 5-minute bucket "
    "('used' GPU-hours sum to what per-GPU series give); allocated, idle (the workload's "
    "busy peak under the threshold: every GPU it holds idle) and no-data GPU-hours count "
    "every GPU it holds; a workload idle on some of its GPUs only counts as busy."
)

#: Tables of a report, in the order the report shows them.
TABLES = (
    "cluster",
    "daily",
    "hourly",
    "projects",
    "namespaces",
    "idle_sessions",
    "idle_policies",
    "quotas",
    "fragmentation",
    "topology_slots",
    "topology_domains",
    "whatif",
    "whatif_allocation",
    "whatif_topology",
    "whatif_capacity",
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
    #: What the What-if section must say besides its table (a subset replayed, or why
    #: nothing was); empty when every policy was replayed.
    whatif_note: str = ""
    #: The price is gpuscope's default for the cluster's GPU models (no site price set).
    price_is_estimate: bool = False
    whatif_verdict: str = ""
    #: Why the topology-aware What-if replayed nothing (a week over its budget), else "".
    whatif_topology_note: str = ""
    #: The idle-policy section's headline: the recommended threshold and its rule.
    idle_policy_text: str = ""
    #: The capacity What-if's answers as sentences, or why it was not searched.
    whatif_capacity_note: str = ""

    def metric(self, name: str, column: str = "this_week") -> Any:
        """A value of the cluster table (``column``: this_week, previous_week, change)."""
        row = self.tables["cluster"].filter(pl.col("metric") == name)
        return row[column][0] if row.height else None


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
    params: dict[str, Any] = {
        "lo": week.previous().start,
        "start": week.start,
        "end": week.end,
        "frontier": rollup_5m_frontier(con),
        "threshold": an.idle_utilization_below,
        "memory": an.idle_include_memory_activity,
        "hot": an.ib_hot_ratio,
    }
    use, alloc = read_inputs(con, week, settings, params)
    price = rs.price_per_gpu_hour if use.estimated_price is None else use.estimated_price
    estimated = use.estimated_price is not None
    hourly, capacity, guarantees = use.hourly, use.capacity, use.guarantees
    whatif, whatif_allocation, whatif_note, whatif_verdict = alloc.whatif
    whatif_topology, whatif_topology_note = alloc.whatif_topology
    whatif_capacity, whatif_capacity_note = alloc.whatif_capacity

    start = pl.lit(week.start).cast(pl.Datetime("us"))
    hourly = hourly.with_columns(pl.col("hour").cast(pl.Datetime("us")))
    this, prev = hourly.filter(pl.col("hour") >= start), hourly.filter(pl.col("hour") < start)
    capacity = capacity.with_columns(pl.col("hour").cast(pl.Datetime("us")))
    cap_this = capacity.filter(pl.col("hour") >= start)["capacity"].sum()
    cap_prev = capacity.filter(pl.col("hour") < start)["capacity"].sum()
    has_capacity = cap_this > EPS
    cluster = cluster_table(
        this,
        prev,
        float(cap_this) if has_capacity else None,
        float(cap_prev) if cap_prev > EPS else None,
        price,
    )

    per_hour = week_hours(week).join(sum_by(this, "hour"), on="hour", how="left")
    per_hour = per_hour.join(capacity, on="hour", how="left").with_columns(
        pl.col(*SUMS).fill_null(0.0)
    )
    day = pl.col("hour").dt.truncate("1d").alias("day")
    daily = (
        rates(
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
    daily = gpu_hours_names(daily.rename({"capacity": "capacity_gpu_hours"}))
    hourly_gpus = per_hour.rename({c: f"{c}_gpus" for c in (*SUMS, "capacity")}).sort("hour")

    projects_keys = pl.concat([hourly.select("project"), guarantees.select("project")]).unique()
    projects = breakdown(this, prev, "project", projects_keys, price)
    ns_project = sum_by(hourly, "namespace", "project").sort("allocated", descending=True)
    ns_keys = ns_project.group_by("namespace", maintain_order=True).agg(pl.col("project").first())
    namespaces = breakdown(this, prev, "namespace", ns_keys, price)

    idle = rates(sum_by(this, "namespace", "pod")).filter(pl.col("idle") > EPS)
    idle = idle.join(use.pods.drop("project"), on=["namespace", "pod"], how="left")
    idle = (
        gpu_hours_names(idle)
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
    idle = with_cost(
        idle.join(
            sum_by(this, "namespace", "pod", "project").select("namespace", "pod", "project"),
            on=["namespace", "pod"],
            how="left",
        ),
        price,
        "idle_gpu_hours",
    )

    gaps = gap_table(per_hour)
    tables: dict[str, pl.DataFrame] = {
        "cluster": cluster,
        "daily": daily,
        "hourly": hourly_gpus,
        "projects": projects,
        "namespaces": namespaces,
        "idle_sessions": idle,
        "idle_policies": alloc.idle_policies[0],
        "quotas": quota_table(this, guarantees, week, alloc.over_quota),
        "fragmentation": alloc.fragmentation,
        "topology_slots": alloc.topology_slots,
        "topology_domains": alloc.topology_domains,
        "whatif": whatif,
        "whatif_allocation": whatif_allocation,
        "whatif_topology": whatif_topology,
        "whatif_capacity": whatif_capacity,
        "ib_hotspots": alloc.ib.head(rs.top_n),
        "actions_summary": actions_summary(use.actions),
        "actions": use.actions,
        "data_gaps": gaps,
    }
    notes = notes_for(
        cluster, gaps, prev.height > 0 and prev["allocated"].sum() > EPS, has_capacity
    )
    if use.summary_gpus > EPS:
        notes.append(SUMMARIES_NOTE)
    return WeeklyReport(
        week=week,
        generated_at=now,
        idle_threshold=an.idle_utilization_below,
        price_per_gpu_hour=price,
        currency="USD" if estimated else rs.currency,
        dashboard_url=rs.dashboard_url,
        tables=tables,
        notes=tuple(notes),
        whatif_note=whatif_note,
        whatif_topology_note=whatif_topology_note,
        idle_policy_text=alloc.idle_policies[1],
        whatif_capacity_note=whatif_capacity_note,
        price_is_estimate=estimated,
        whatif_verdict=whatif_verdict,
    )


def pod_usage(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, settings: Settings
) -> pl.DataFrame:
    """GPU-hours per pod over ``[start, end)`` by the report's definitions (allocated,
    used, idle, no_data): the report's numbers for any window, so they can be checked
    against the detectors' on the same one (tests/integration/test_consistency.py)."""
    an = settings.analytics
    params: dict[str, Any] = {
        "lo": utc(start),
        "start": utc(start),
        "end": utc(end),
        "frontier": rollup_5m_frontier(con),
        "threshold": an.idle_utilization_below,
        "memory": an.idle_include_memory_activity,
    }
    create_held(con, params)
    try:
        hourly = hourly_use(con, params)
    finally:
        con.execute("DROP TABLE IF EXISTS report_held")
    return sum_by(hourly, "namespace", "pod")

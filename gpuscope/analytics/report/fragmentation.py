"""Fragmentation over a week: the fragmentation analysis at every inventory change.

Fragmentation is a property of an allocation state, and the state changes only when the
inventory does (a node or pod appears, changes or goes). So the week is evaluated at its
start and at every instant an inventory version begins or ends inside it, each row
weighted by how long that state lasted (``hours``): the week's worst is the worst state it
had, however briefly, and its mean is time-weighted. (Sampling every few hours missed a
state that lasted the week's last hours: "worst 13 %" for a week that ended at 54 %.)

The state at an instant is the one the scheduled detector would have seen then: the
inventory versions valid at that instant, the GPU indices the agents reported for the
pods (the inventory knows a fractional pod's share, not which GPU it landed on), through
:func:`gpuscope.analytics.placement.allocation.state_from_records` and measured by
:func:`gpuscope.analytics.placement.fragmentation.analyze_fragmentation`, read by
:func:`gpuscope.analytics.inventory.analysis_at` (the scheduled detector's own reader), so a
change in the allocation model reaches the report unchanged. An instant without any node in
the inventory is left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import duckdb
import polars as pl

from gpuscope.analytics.inventory import analysis_at
from gpuscope.analytics.placement.fragmentation import analyze_fragmentation
from gpuscope.analytics.report.sql import Q, run
from gpuscope.analytics.report.week import Week
from gpuscope.core.settings import AnalyticsSettings

if TYPE_CHECKING:
    from gpuscope.analytics.report.states import WeekState

#: Columns of the fragmentation table, in order.
COLUMNS: dict[str, type[pl.DataType]] = {
    "at": pl.Datetime,
    "hours": pl.Float64,
    "total_gpus": pl.Int64,
    "free_gpus": pl.Float64,
    "whole_free_gpus": pl.Int64,
    "fgd_fragmented_gpus": pl.Float64,
    "fgd_fragmentation_ratio": pl.Float64,
    "stranded_gpu_capacity": pl.Float64,
    "largest_placeable_job_gpus": pl.Int64,
    "pending_tasks": pl.Int64,
}


def fragmentation_at(
    con: duckdb.DuckDBPyConnection, at: datetime, settings: AnalyticsSettings
) -> dict[str, Any] | None:
    """The fragmentation summary of the inventory state at ``at`` (None: no nodes then)."""
    analysis = analysis_at(con, at, settings)
    if analysis is None:
        return None
    summary = analysis.summary
    return {"at": at} | {k: summary[k] for k in COLUMNS if k not in ("at", "hours")}


def change_points(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> list[datetime]:
    """``start`` and every instant in (start, end) at which an inventory version of a node
    or pod begins or ends: the instants at which the allocation state can change."""
    rows = run(con, Q["inventory_changes"], start=start, end=end).fetchall()
    return [start, *(r[0] for r in rows)]


def fragmentation_over(
    con: duckdb.DuckDBPyConnection,
    week: Week,
    settings: AnalyticsSettings,
    states: Iterable[WeekState] | None = None,
) -> pl.DataFrame:
    """One row per inventory state of the week that has nodes: its start (``at``), how
    long it lasted inside the week (``hours``) and its fragmentation summary. ``states``:
    the week's states already read (:func:`~gpuscope.analytics.report.states.week_states`,
    shared with the topology section); else they are read here."""
    if states is None:
        from gpuscope.analytics.report.states import week_states  # it builds on this module

        states = week_states(con, week)
    rows = []
    for s in states:
        summary = analyze_fragmentation(s.state, at=s.at, settings=settings).summary
        row = {"at": s.at} | {k: summary[k] for k in COLUMNS if k not in ("at", "hours")}
        row["hours"] = s.hours
        rows.append(row)
    return pl.DataFrame(rows, schema=COLUMNS, orient="row")


def weighted_mean(frame: pl.DataFrame, column: str = "fgd_fragmentation_ratio") -> float | None:
    """The time-weighted mean of ``column`` over the week's states (None: no state)."""
    if not frame.height:
        return None
    hours = float(frame["hours"].sum())
    if hours <= 0:
        return None
    return float((frame[column] * frame["hours"]).sum()) / hours

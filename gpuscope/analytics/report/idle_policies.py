"""The weekly report's idle-policy section: the week replayed under idle thresholds and
time limits (``gpuscope whatif idle``), with the recommendation and its chart.

The figures are :func:`gpuscope.analytics.idle_whatif.figures.idle_whatif`'s for the week,
the ones the CLI and ``GET /api/v1/whatif/idle`` give. One table, ``idle_policies``: a row
per idle threshold (the ladder and the configured policies) and per time limit, with the
sessions each would have stopped, how many of those came back, the GPU-hours freed and the
busy GPU-hours cut off; ``recommended`` marks the rule's pick, ``configured`` what is set.
The chart puts the idle thresholds' GPU-hours freed against the sessions they cut off that
came back, the recommended and configured points marked.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import duckdb
import polars as pl

from gpuscope.analytics.idle_whatif.figures import idle_whatif
from gpuscope.analytics.report.week import Week
from gpuscope.core.settings import Settings

if TYPE_CHECKING:
    from gpuscope.analytics.report.data import WeeklyReport

log = logging.getLogger(__name__)

COLUMNS: dict[str, type[pl.DataType]] = {
    "policy": pl.String,
    "kind": pl.String,
    "minutes": pl.Float64,
    "warning_minutes": pl.Float64,
    "source": pl.String,
    "recommended": pl.Boolean,
    "configured": pl.Boolean,
    "sessions_stopped": pl.Int64,
    "stopped_then_busy": pl.Int64,
    "comeback_ratio": pl.Float64,
    "gpu_hours_freed": pl.Float64,
    "busy_gpu_hours_after_stop": pl.Float64,
    "freed_cost": pl.Float64,
}


def _label(e: dict[str, Any], kind: str) -> str:
    amount = f"{e['idle_minutes']:g} min idle" if kind == "idle" else f"{e['hours']:g} h limit"
    if e["warning_minutes"]:
        amount += f" + {e['warning_minutes']:g} min warning"
    if e.get("policy"):
        return f"policy {e['policy']}: {amount}"
    if e["source"] == "detector":
        return f"detector setting: {amount}"
    return amount


def _rows(out: dict[str, Any]) -> list[dict[str, Any]]:
    rec = out["recommendation"]
    rows = []
    for kind, entries in (("idle", out["thresholds"]), ("time_limit", out["time_limits"])):
        for e in entries:
            minutes = e["idle_minutes"] if kind == "idle" else e["hours"] * 60
            picked = (
                kind == "idle"
                and rec.get("idle_minutes") == e["idle_minutes"]
                and rec.get("warning_minutes") == e["warning_minutes"]
                and not e["configured"]
            )
            rows.append(
                {
                    "policy": _label(e, kind),
                    "kind": kind,
                    "minutes": float(minutes),
                    "warning_minutes": float(e["warning_minutes"]),
                    "source": e["source"],
                    "recommended": picked,
                    "configured": bool(e["configured"]),
                    "sessions_stopped": e["sessions_stopped"],
                    "stopped_then_busy": e["stopped_then_busy"],
                    "comeback_ratio": e["comeback_share"],
                    "gpu_hours_freed": e["gpu_hours_freed"],
                    "busy_gpu_hours_after_stop": e["busy_gpu_hours_after_stop"],
                    "freed_cost": e["cost_freed"],
                }
            )
    return rows


def idle_policies_over(
    con: duckdb.DuckDBPyConnection, week: Week, settings: Settings
) -> tuple[pl.DataFrame, str]:
    """The section's table and its headline (the recommendation and its rule)."""
    out = idle_whatif(con, week.start, week.end, settings)
    table = pl.DataFrame(_rows(out), schema=COLUMNS)
    if out["price_per_gpu_hour"] is None:  # no price: no money column, as every section
        table = table.drop("freed_cost")
    rec = out["recommendation"]
    text = f"{rec['text']} Rule: {rec['rule']}."
    if not out["sessions"]:
        text = "No interactive sessions held GPUs this week: no idle policy to weigh."
    return table, text


def idle_policies_chart(report: WeeklyReport) -> str | None:
    """GPU-hours freed against sessions cut off that came back, one point per idle
    threshold (labelled with its minutes); the recommended point a star, the configured
    ones diamonds."""
    from gpuscope.analytics.report.charts import COLOURS, _figure, _uri

    t = report.tables.get("idle_policies")
    if t is None or t.height == 0:
        return None
    idle = t.filter(pl.col("kind") == "idle").sort("minutes")
    if idle.height == 0 or idle["sessions_stopped"].sum() == 0:
        return None
    fig, ax = _figure(height=3.8)
    ladder = idle.filter(~pl.col("configured"))
    ax.plot(
        ladder["stopped_then_busy"].to_list(),
        ladder["gpu_hours_freed"].to_list(),
        marker="o",
        color=COLOURS["allocated"],
        label="idle thresholds",
    )
    seen = set()
    for row in idle.iter_rows(named=True):  # a configured point on a rung is labelled once
        if (row["minutes"], row["warning_minutes"]) in seen:
            continue
        seen.add((row["minutes"], row["warning_minutes"]))
        wait = f"+{row['warning_minutes']:g}" if row["warning_minutes"] else ""
        ax.annotate(
            f"{row['minutes']:g}{wait} min",
            (row["stopped_then_busy"], row["gpu_hours_freed"]),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=8,
        )
    rec = idle.filter(pl.col("recommended"))
    if rec.height:
        ax.scatter(
            rec["stopped_then_busy"].to_list(),
            rec["gpu_hours_freed"].to_list(),
            marker="*",
            s=260,
            color=COLOURS["used"],
            zorder=5,
            label="recommended",
        )
    conf = idle.filter(pl.col("configured"))
    if conf.height:
        ax.scatter(
            conf["stopped_then_busy"].to_list(),
            conf["gpu_hours_freed"].to_list(),
            marker="D",
            s=70,
            color=COLOURS["idle"],
            zorder=5,
            label="configured",
        )
    ax.set_xlabel("sessions cut off that came back (stopped, then busy again)")
    ax.set_ylabel("GPU-hours freed")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=-0.5)
    ax.set_title("Idle thresholds over the week: GPU-hours freed against sessions cut off")
    ax.legend(loc="lower right", frameon=False)
    return _uri(fig)

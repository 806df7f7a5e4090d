"""The weekly report as one self-contained HTML page (Jinja2 template, charts inline).

Numbers are formatted by column name, so every table reads the same way: GPU-hours and
GPUs with one decimal, ratios as percentages, money with the configured currency, a
missing value as an em dash (never as 0: "no previous week" is not "zero last week").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import polars as pl
from jinja2 import Environment, PackageLoader, select_autoescape

from gpuscope.analytics.report.charts import render_charts
from gpuscope.analytics.report.data import WeeklyReport
from gpuscope.analytics.report.fragmentation import weighted_mean
from gpuscope.analytics.report.whatif_topology import whatif_topology_line

_RATIOS = ("efficiency", "idle_share", "ratio", "use_of_guarantee", "data_coverage")
_COUNTS = (
    "actions",
    "failed",
    "total_gpus",
    "whole_free_gpus",
    "largest_placeable_job_gpus",
    "pending_tasks",
    "rank",
    "jobs_started",
    "jobs_never_started",
    "sessions_stopped",
    "stopped_then_busy",
    "gpus_added",
    "gpus",
)
#: Rows of a table shown in the page at most (the CSV beside it has every row).
MAX_ROWS = 50
#: Section title and the sentence that says what it shows, by table.
SECTIONS: dict[str, tuple[str, str]] = {
    "cluster": ("Cluster", "The week against the week before."),
    "daily": ("Day by day", "GPU-hours held per day, split by what the GPUs did."),
    "hourly": ("Hour by hour", "Hourly means of GPUs offered, held, used and idle."),
    "projects": ("Projects", "GPU-hours per project, with the change from the previous week."),
    "namespaces": ("Namespaces", "GPU-hours per namespace."),
    "idle_sessions": (
        "Top idle workloads",
        "The workloads that held GPUs idle the longest, and who owns them.",
    ),
    "idle_policies": (
        "Idle policies: what each threshold would have freed",
        "The week's interactive sessions replayed as if a policy had stopped each at the "
        "first instant it had been idle for N minutes (by the idle detector's definition, "
        "gaps included, at 5-minute resolution), or at an age (time limits): the sessions "
        "it would have stopped, how many came back (busy again later: the policy's cost), "
        "the GPU-hours freed from each stop to the session's real end, and the busy "
        "GPU-hours it would have cut off. Per namespace and owner: gpuscope whatif idle.",
    ),
    "quotas": ("Quota use", "Each project's guarantee against the GPUs it held, hour by hour."),
    "fragmentation": (
        "Fragmentation",
        "FGD fragmentation of free GPU capacity at every inventory change of the week "
        "(each state weighted by how long it lasted; the worst is the worst state).",
    ),
    "topology_slots": (
        "Topology: multi-node slots",
        "Jobs of 16 and 64 GPUs that fit at once with each inside one domain (leaf switch, "
        "rack, NVLink domain), per level, at every inventory change of the week.",
    ),
    "topology_domains": (
        "Worst-fragmented domains",
        "The domains whose free GPUs spent the most GPU-hours where the domain could not "
        "hold one two-node job of node-sized pods.",
    ),
    "whatif": (
        "What if",
        "The week's pods replayed on the same nodes under each placement policy (arrivals, "
        "sizes and run times as stored; a pod that fits nowhere waits), three times: as "
        "stored and twice with arrivals moved by up to 15 minutes. A policy is named only "
        "when it beats the others by more than the spread of those replays. Rank 1 would "
        "have started the most jobs; GPUs recovered are its GPUs allocated when arrivals "
        "stopped less what the real scheduler had allocated then.",
    ),
    "whatif_topology": (
        "What if: topology-aware placement",
        "The week's multi-node jobs (pod groups) replayed whole on the same nodes, each kept "
        "inside one domain of the level they ask for (else the finest), under Kueue TAS "
        "BestFit and KAI's fullest domain beside the topology-blind LeastAllocated and "
        "MostAllocated; other GPU pods as one-pod jobs. Same trace for every policy.",
    ),
    "whatif_capacity": (
        "What if: more GPUs",
        "The week's pods replayed under LeastAllocated on the cluster as it was, then with "
        "whole nodes of one of its GPU models added (its most common node shape), searching "
        "for the fewest GPUs that would have cut queued GPU-hours by half and by 90 %. Same "
        "arrivals and run times; added nodes there all week.",
    ),
    "ib_hotspots": (
        "InfiniBand hot spots",
        "Ports whose busier direction ran over the hot "
        "threshold of their link rate, in 5-minute buckets.",
    ),
    "actions_summary": (
        "Actions",
        "What the policies did (or, in dry run, would have done) and the GPU-hours it freed.",
    ),
    "actions": ("Action log", "Every action of the week."),
    "data_gaps": ("Missing data", "Hours in which GPUs were held but none had a sample."),
}


def format_cell(column: str, value: Any, currency: str) -> str:
    """One value as the page shows it, by the kind its column name says it is."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.strftime("%a %Y-%m-%d %H:%M")
    if not isinstance(value, int | float):
        return str(value)
    signed = "change" in column
    sign = "+" if signed else ""
    column = column.replace("_change", "").replace("change_", "")
    if column.endswith(_RATIOS):
        return f"{value * 100:{sign}.1f} {'pts' if signed else '%'}"
    if column.endswith("cost"):
        return f"{value:{sign},.2f} {currency}"
    if column in _COUNTS:
        return f"{int(value):,}"
    if column.endswith("bytes_per_second"):
        return f"{value / 1e9:,.1f} GB/s"
    return f"{value:{sign},.1f}"


def _cluster_rows(report: WeeklyReport) -> list[list[str]]:
    rows = []
    for metric, unit, this, prev, change in report.tables["cluster"].iter_rows():
        col = "cost" if unit == "money" else ("ratio" if unit == "ratio" else "gpu_hours")
        rows.append(
            [
                metric.replace("_", " "),
                format_cell(col, this, report.currency),
                format_cell(col, prev, report.currency),
                format_cell(f"{col}_change", change, report.currency),
            ]
        )
    return rows


def table_view(df: pl.DataFrame, currency: str) -> dict[str, Any]:
    """Headers and formatted rows of a table (the first :data:`MAX_ROWS`)."""
    shown = df.head(MAX_ROWS)
    return {
        "headers": [c.replace("_", " ") for c in df.columns],
        "rows": [
            [format_cell(c, v, currency) for c, v in zip(df.columns, row, strict=True)]
            for row in shown.iter_rows()
        ],
        "numeric": [df[c].dtype.is_numeric() for c in df.columns],
        "more": df.height - shown.height,
    }


def slots_64(df: pl.DataFrame | None) -> list[tuple[str, int, float]]:
    """Per level: (level, fewest 64-GPU slots of the week, time-weighted mean)."""
    if df is None or not df.height:
        return []
    out = []
    for level in sorted(set(df["level"].to_list())):
        rows = df.filter(pl.col("level") == level)
        hours = float(rows["hours"].sum())
        mean = float((rows["slots_64"] * rows["hours"]).sum()) / hours if hours > 0 else 0.0
        out.append((level, int(rows["slots_64"].min() or 0), mean))  # type: ignore[arg-type]
    return out


def slots_64_lines(df: pl.DataFrame | None) -> list[tuple[str, int, float]]:
    """:func:`slots_64` with the levels that read the same (same fewest, same mean to one
    decimal) said once: ``("rack, zone", fewest, mean)``."""
    groups: dict[tuple[int, str], list[str]] = {}
    means: dict[tuple[int, str], float] = {}
    for level, fewest, mean in slots_64(df):
        key = (fewest, f"{mean:.1f}")
        groups.setdefault(key, []).append(level)
        means.setdefault(key, mean)
    return [(", ".join(levels), key[0], means[key]) for key, levels in groups.items()]


def render_html(report: WeeklyReport) -> str:
    """The whole page: no external script, style sheet, font or image."""
    env = Environment(
        loader=PackageLoader("gpuscope.analytics.report", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    tables = {
        name: table_view(df, report.currency)
        for name, df in report.tables.items()
        if name not in ("cluster", "hourly", "whatif_allocation")
    }
    frag = report.tables["fragmentation"]
    whatif = report.tables["whatif"]
    return env.get_template("report.html.j2").render(
        report=report,
        topo_slots=slots_64_lines(report.tables.get("topology_slots")),
        topo_whatif=whatif_topology_line(report.tables.get("whatif_topology")),
        week_end=report.week.end,
        cluster=_cluster_rows(report),
        tables=tables,
        sections=SECTIONS,
        charts=render_charts(report),
        frag_mean=weighted_mean(frag),
        frag_max=frag["fgd_fragmentation_ratio"].max() if frag.height else None,
        whatif_best=whatif.row(0, named=True) if whatif.height > 1 else None,
        whatif_actual=whatif.row(-1, named=True) if whatif.height > 1 else None,
        fmt=lambda column, value: format_cell(column, value, report.currency),
    )

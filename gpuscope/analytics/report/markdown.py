"""The weekly report's short summary for chat: a few lines of Markdown and where the rest is.

Chat readers skim: the headline numbers with their change, what needs a decision (missing
data, the idlest sessions and their owners, over-quota projects, hot links) and the link.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import polars as pl

from gpuscope.analytics.report.data import WeeklyReport
from gpuscope.analytics.report.fragmentation import weighted_mean
from gpuscope.analytics.report.html import format_cell, slots_64_lines
from gpuscope.analytics.report.tables import EPS
from gpuscope.analytics.report.whatif_topology import whatif_topology_line

#: Items listed per line at most.
TOP = 3


def _change(report: WeeklyReport, metric: str, column: str) -> str:
    change = report.metric(metric, "change")
    return "" if change is None else f" ({format_cell(column, change, report.currency)})"


def whatif_line(report: WeeklyReport) -> str | None:
    """The What-if section in one line: its verdict, a policy that beats the others beyond
    the spread across seeds or that none would have mattered (None: nothing replayed)."""
    if report.tables["whatif"].height < 2 or not report.whatif_verdict:
        return None
    return f"- What if: {report.whatif_verdict}"


def render_markdown(report: WeeklyReport, html: Path | None = None) -> str:
    """The summary; ``html`` is where the full report is (named on the last line)."""

    def fmt(column: str, value: object) -> str:
        return format_cell(column, value, report.currency)

    w = report.week
    lines = [
        f"**GPU utilization, week {w.label}** "
        f"({w.start:%a %d %b} to {w.end - timedelta(days=1):%a %d %b %Y}, UTC)",
        "",
        f"- Allocated {fmt('gpu_hours', report.metric('allocated_gpu_hours'))} GPU-hours"
        f"{_change(report, 'allocated_gpu_hours', 'gpu_hours_change')}, "
        f"used {fmt('gpu_hours', report.metric('used_gpu_hours'))}, "
        f"idle {fmt('gpu_hours', report.metric('idle_gpu_hours'))}; "
        f"efficiency {fmt('efficiency', report.metric('efficiency'))}"
        f"{_change(report, 'efficiency', 'efficiency_change')}",
    ]
    if report.price_per_gpu_hour is not None:
        lines.append(
            f"- Cost: {fmt('cost', report.metric('allocated_cost'))} allocated, "
            f"{fmt('cost', report.metric('idle_cost'))} of it on idle GPUs"
            + (" (estimate: default price per GPU model; set report.price_per_gpu_hour)"
               if report.price_is_estimate else "")
        )  # fmt: skip
    lines += [f"- ⚠ {note}" for note in report.notes]
    idle = report.tables["idle_sessions"].head(TOP)
    if idle.height:
        items = [
            f"{ns}/{pod} ({owner or 'owner unknown'}) {fmt('gpu_hours', h)} GPU-h"
            for ns, pod, owner, h in idle.select(
                "namespace", "pod", "owner", "idle_gpu_hours"
            ).iter_rows()
        ]
        lines.append("- Idlest: " + "; ".join(items))
    if report.idle_policy_text and report.tables["idle_policies"].height:
        lines.append(f"- Idle policy: {report.idle_policy_text}")
    over = report.tables["quotas"].filter(pl.col("gpu_hours_over_guarantee") > EPS)
    if over.height:
        items = [
            f"{p} {fmt('hours', h)} h ({fmt('gpu_hours', g)} GPU-h)"
            for p, h, g in over.select(
                "project", "hours_over_guarantee", "gpu_hours_over_guarantee"
            )
            .head(TOP)
            .iter_rows()
        ]
        lines.append("- Over guarantee: " + "; ".join(items))
    ib = report.tables["ib_hotspots"].head(TOP)
    if ib.height:
        items = [
            f"{n} {d}/{p} {fmt('hours', h)} h"
            for n, d, p, h in ib.select("node", "device", "port", "hot_hours").iter_rows()
        ]
        lines.append("- InfiniBand hot: " + "; ".join(items))
    acts = report.tables["actions_summary"]
    if acts.height:
        parts = []
        for mode in ("executed", "dry-run"):
            rows = acts.filter(pl.col("mode") == mode)
            if rows.height:
                verb = "freed" if mode == "executed" else "would have freed"
                parts.append(
                    f"{rows['actions'].sum()} {mode} ({verb} "
                    f"{fmt('gpu_hours', rows['gpu_hours_freed'].sum())} GPU-h)"
                )
        lines.append("- Actions: " + "; ".join(parts))
    frag = report.tables["fragmentation"]
    if frag.height:
        lines.append(
            f"- Fragmentation: mean {fmt('ratio', weighted_mean(frag))} (time-weighted), "
            f"worst {fmt('ratio', frag['fgd_fragmentation_ratio'].max())} of free GPU capacity"
        )
    for level, fewest, mean in slots_64_lines(report.tables.get("topology_slots")):
        lines.append(f"- 64-GPU slots ({level}): mean {mean:.1f}, fewest {fewest}")
    worst = report.tables.get("topology_domains")
    if worst is not None and worst.height:
        top = worst.row(0, named=True)
        lines.append(
            f"- Worst-fragmented domain: {top['domain']} ({top['level']}), "
            f"{fmt('gpu_hours', top['stranded_gpu_hours'])} free GPU-h with no two-node slot"
        )
    line = whatif_line(report)
    if line:
        lines.append(line)
    topo = whatif_topology_line(report.tables.get("whatif_topology"))
    if topo or report.whatif_topology_note:
        lines.append(f"- What if, topology-aware: {topo or report.whatif_topology_note}")
    if report.whatif_capacity_note:
        lines.append(f"- What if, more GPUs: {report.whatif_capacity_note}")
    links = []
    if html is not None:
        links.append(f"Report: {html}")
    if report.dashboard_url:
        links.append(f"Dashboard: {report.dashboard_url}")
    if links:
        lines += ["", " · ".join(links)]
    return "\n".join(lines) + "\n"

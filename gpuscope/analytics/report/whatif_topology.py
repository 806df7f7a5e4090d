"""The weekly report's topology-aware What-if: what a topology-aware policy would have
started of the week's multi-node jobs.

The week's stored history (the same rows the What-if section replays, read once) goes
through :func:`gpuscope.analytics.whatif.gangs.history_trace` and
:func:`~gpuscope.analytics.whatif.gangs.gang_figures`, the functions ``gpuscope whatif --db``
runs, so the figures are the command's for the same week: per policy (topology-blind
``leastallocated`` and ``mostallocated``, Kueue TAS ``tas-bestfit``, KAI ``kai-fullest``)
the multi-node jobs (pod groups) started, how many inside one domain, how many waited or
never started, and their mean wait, and a last row for what really happened
(:mod:`gpuscope.analytics.whatif.gangs_actual`). Domains come from the week's node labels (the store
keeps no Topology objects).

Cost: one gang replay per policy, a waiting job tried again whenever a job ends; the
demo's week (2,391 jobs, 34 nodes) takes well under a second in all. A week of more than
:data:`BUDGET_JOB_NODES` jobs x nodes is not replayed; the section says so and points to
``gpuscope whatif --db``, which replays any week.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from gpuscope.analytics.report.whatif import WHAT_HAPPENED
from gpuscope.analytics.whatif.gangs import gang_figures, history_trace
from gpuscope.analytics.whatif.gangs_actual import gangs_what_happened
from gpuscope.analytics.whatif.history import History
from gpuscope.core.settings import AnalyticsSettings

COLUMNS: dict[str, type[pl.DataType]] = {
    "policy": pl.String,
    "level": pl.String,
    "multi_node_jobs": pl.Int64,
    "multi_node_started": pl.Int64,
    "multi_node_in_one_domain": pl.Int64,
    "multi_node_spread": pl.Int64,
    "multi_node_waited": pl.Int64,
    "multi_node_never_started": pl.Int64,
    "mean_multi_node_wait_hours": pl.Float64,
}
#: Jobs x nodes the section replays at most: a job's placement scans the nodes, and a
#: waiting one is tried again at each end. On a loaded 2-core machine the synthetic trace
#: of 128 nodes and 5,070 jobs (650,000) took 3 s for the four policies; 512 nodes and
#: 20,106 jobs of an over-subscribed week 84 s.
BUDGET_JOB_NODES = 1_000_000
#: The topology-blind policy the headline compares with: kube-scheduler's default scoring.
BLIND = "leastallocated"
AWARE = ("tas-bestfit", "kai-fullest")


def whatif_topology_over(
    history: History, settings: AnalyticsSettings, budget: int = BUDGET_JOB_NODES
) -> tuple[pl.DataFrame, str]:
    """One row per policy (empty when the week has no pods or GPU nodes, or is over the
    budget), and the note saying why a week was not replayed ("" otherwise)."""
    empty = pl.DataFrame(schema=COLUMNS)
    if not history.events or not history.inventory.gpu_capacity:
        return empty, ""
    trace = history_trace(history, labels=settings.topology_labels)
    if len(trace.jobs) * len(trace.nodes) > budget:
        return empty, (
            f"{len(trace.jobs):,} jobs on {len(trace.nodes):,} nodes: too many to replay "
            f"within the report's time; `gpuscope whatif --db PATH --week WEEK` replays them."
        )
    figures = gang_figures(trace, actual=gangs_what_happened(history, trace))
    s = figures["summary"]
    rows = [
        {"policy": name, "level": s["level"], "multi_node_jobs": s["multi_node_jobs"]}
        | {k: p[k] for k in list(COLUMNS)[3:]}
        for name, p in [*figures["policies"].items(), (WHAT_HAPPENED, s["what_happened"])]
    ]
    return pl.DataFrame(rows, schema=COLUMNS, orient="row"), ""


def whatif_topology_line(table: pl.DataFrame | None) -> str | None:
    """The section's headline: the best topology-aware policy against the default's
    (None without a table; a sentence saying so when the week ran no multi-node job)."""
    if table is None or not table.height:
        return None
    rows = {r["policy"]: r for r in table.iter_rows(named=True)}
    total = int(next(iter(rows.values()))["multi_node_jobs"])
    level = next(iter(rows.values()))["level"] or "one node"
    if not total:
        return "No multi-node job (pod group) in the week: nothing for topology to change."
    best = max(AWARE, key=lambda p: (rows[p]["multi_node_in_one_domain"], -AWARE.index(p)))
    aware, blind = rows[best], rows[BLIND]

    def waited(r: dict[str, Any]) -> str:
        if not r["multi_node_started"]:
            return f"{r['multi_node_never_started']} never started"
        return (
            f"{r['multi_node_never_started']} never started, mean wait "
            f"{r['mean_multi_node_wait_hours']:.1f} h of those started"
        )

    line = (
        f"Of {total} multi-node job{'s' if total != 1 else ''}, {best} would have started "
        f"{aware['multi_node_in_one_domain']} inside one {level} domain ({waited(aware)}); "
        f"{BLIND}, topology-blind, {blind['multi_node_in_one_domain']} inside one and "
        f"{blind['multi_node_spread']} spread over domains ({waited(blind)})"
    )
    real = rows.get(WHAT_HAPPENED)
    if real is None:
        return line + "."
    return (
        f"{line}; what happened: {real['multi_node_in_one_domain']} inside one and "
        f"{real['multi_node_spread']} spread ({waited(real)})."
    )

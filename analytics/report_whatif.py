"""The weekly report's What-if section: the week's stored history replayed per policy.

The replay is :func:`analytics.whatif.week.replay_window`, the same one
``gpuscope whatif --db`` and ``GET /api/v1/whatif`` run, so the section's figures are
theirs for the same week. Two tables:

- ``whatif``: one row per policy (jobs started, GPUs allocated when arrivals stop, GPUs
  recovered against what happened, queued GPU-hours, fragmentation), ranked: rank 1 is
  the policy that would have started the most jobs (ties: most GPUs allocated when
  arrivals stop, then fewest queued GPU-hours), and a last row for what really happened;
- ``whatif_allocation``: GPUs allocated at each hour of the week, per policy and for what
  happened (the chart's lines).

Time budget: a replay costs about 3-4 s per policy per 1,000 GPUs of a busy week
(docs/analytics.md, What-if speed). A week with more than :data:`FULL_REPLAY_EVENTS` pod
arrivals is replayed under :data:`LARGE_WEEK_POLICIES` only, and the section says so.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, datetime, timedelta

import duckdb
import polars as pl

from analytics.report_week import Week
from analytics.whatif.history import History, read_history
from analytics.whatif.policies import POLICIES
from analytics.whatif.week import WindowReplay, replay_history
from gpuscope.settings import AnalyticsSettings

#: Label of the row and line for what the real scheduler did.
WHAT_HAPPENED = "what happened"
#: Above this many pod arrivals in the week, only :data:`LARGE_WEEK_POLICIES` are replayed.
FULL_REPLAY_EVENTS = 20_000
#: The default scheduler as run, plain packing, and FGD: the comparison a reader wants first.
LARGE_WEEK_POLICIES = ("leastallocated", "mostallocated", "fgd")

COLUMNS: dict[str, type[pl.DataType]] = {
    "policy": pl.String,
    "rank": pl.Int64,
    "jobs_started": pl.Float64,
    "jobs_never_started": pl.Float64,
    "allocated_gpus": pl.Float64,
    "allocation_ratio": pl.Float64,
    "gpus_recovered": pl.Float64,
    "queued_gpu_hours": pl.Float64,
    "fgd_fragmentation_ratio": pl.Float64,
}
ALLOCATION_COLUMNS: dict[str, type[pl.DataType]] = {
    "policy": pl.String,
    "at": pl.Datetime,
    "allocated_gpus": pl.Float64,
}


def _naive(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC).replace(tzinfo=None)


def _hours(week: Week) -> list[datetime]:
    return [week.start + timedelta(hours=h) for h in range(int(week.hours) + 1)]


def _sampled(times: list[float], values: list[float], at: list[datetime]) -> list[float]:
    """The value in force at each instant (the last change at or before it; 0 before any)."""
    out = []
    for t in at:
        i = bisect_right(times, t.replace(tzinfo=UTC).timestamp())
        out.append(values[i - 1] if i else 0.0)
    return out


def real_allocation(history: History) -> tuple[list[float], list[float]]:
    """GPUs the real scheduler had allocated on schedulable nodes, at every change."""
    open_nodes = {n.name for n in history.inventory.nodes if n.schedulable}
    changes: list[tuple[float, float]] = []
    for h in history.pods:
        if h.started is None or h.pod.node not in open_nodes:
            continue
        gpus = h.pod.gpu_request + (h.pod.gpu_fraction or 0.0) * max(1, h.pod.fraction_devices)
        changes.append((h.started, gpus))
        if h.ended is not None:
            changes.append((h.ended, -gpus))
    changes.sort()
    times, values, total = [], [], 0.0
    for t, d in changes:
        total += d
        times.append(t)
        values.append(total)
    return times, values


def _policy_rows(replayed: WindowReplay) -> list[dict[str, object]]:
    figures = replayed.figures
    policies = figures["policies"]
    best = figures["summary"]["most_jobs_policy"]
    rest = sorted(
        (n for n in policies if n != best),
        key=lambda n: (
            -policies[n]["jobs_started"],
            -policies[n]["allocated_gpus"],
            policies[n]["queued_gpu_hours"],
        ),
    )
    rows: list[dict[str, object]] = []
    for rank, name in enumerate([best, *rest], start=1):
        p = policies[name]
        rows.append({"policy": name, "rank": rank} | {k: p[k] for k in list(COLUMNS)[2:]})
    actual = figures["summary"]["what_happened"]
    rows.append(
        {
            "policy": WHAT_HAPPENED,
            "rank": None,
            "jobs_started": actual["jobs_started"],
            "jobs_never_started": actual["jobs_never_started"],
            "allocated_gpus": actual["allocated_gpus"],
            "allocation_ratio": actual["allocation_ratio"],
            "gpus_recovered": 0.0,
            "queued_gpu_hours": actual["queued_gpu_hours"],
            "fgd_fragmentation_ratio": None,
        }
    )
    return rows


def whatif_over(
    con: duckdb.DuckDBPyConnection, week: Week, settings: AnalyticsSettings
) -> tuple[pl.DataFrame, pl.DataFrame, str]:
    """The section's two tables and its note (empty, or why not every policy ran, or why
    nothing could be replayed)."""
    empty = (
        pl.DataFrame(schema=COLUMNS),
        pl.DataFrame(schema=ALLOCATION_COLUMNS),
    )
    history = read_history(con, week.start, week.end)
    arrivals = len(history.events)
    policies = POLICIES if arrivals <= FULL_REPLAY_EVENTS else LARGE_WEEK_POLICIES
    note = ""
    if arrivals > FULL_REPLAY_EVENTS:
        note = (
            f"{arrivals:,} pods arrived this week (more than {FULL_REPLAY_EVENTS:,}): only "
            f"{', '.join(policies)} were replayed, to keep the report's time; "
            "`gpuscope whatif --db` replays every policy."
        )
    replayed = replay_history(history, policies, coverage=settings.fgd_task_coverage)
    if replayed is None:
        return *empty, "No pods and GPU nodes are stored for the week: nothing to replay."
    hours = _hours(week)
    series = []
    for r in replayed.results:
        times = [s.time for s in r.timeline]
        values = [s.allocated_gpus for s in r.timeline]
        series += [
            (r.policy, t, v) for t, v in zip(hours, _sampled(times, values, hours), strict=True)
        ]
    times, values = real_allocation(replayed.history)
    series += [
        (WHAT_HAPPENED, t, v) for t, v in zip(hours, _sampled(times, values, hours), strict=True)
    ]
    table = pl.DataFrame(_policy_rows(replayed), schema=COLUMNS, orient="row")
    allocation = pl.DataFrame(series, schema=ALLOCATION_COLUMNS, orient="row")
    return table, allocation, note

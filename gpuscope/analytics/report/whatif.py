"""The weekly report's What-if section: the week's stored history replayed per policy.

The replay is :func:`gpuscope.analytics.whatif.week.replay_window`, the same one
``gpuscope whatif --db`` and ``GET /api/v1/whatif`` run, so the section's figures are
theirs for the same week. Two tables:

- ``whatif``: one row per policy (jobs started, GPUs allocated when arrivals stop, GPUs
  recovered against what happened, queued GPU-hours, fragmentation; means over
  :data:`~gpuscope.analytics.whatif.week.WEEK_SEEDS` replays), ranked: rank 1 is the
  policy that would have started the most jobs (ties: most GPUs allocated when arrivals
  stop, then fewest queued GPU-hours), and a last row for what really happened;

The section's headline is the verdict (whatif/verdict.py), not the ranking: a policy is
named only where it beats the others by more than the spread across the seeds' replays,
else the section says no policy would have made a material difference.
- ``whatif_allocation``: GPUs allocated at each hour of the week, per policy and for what
  happened (the chart's lines).

Time budget: the report aims at under 30 s for a 10,000-GPU week (bench/report.py), and a
replay costs about 2,000-3,000 pods a second per policy (docs/analytics.md, What-if
speed). So the section replays at most :data:`REPLAY_BUDGET_PODS` pod placements: every
policy for a week of up to 6,666 pods, fewer for a busier week, in the order of
:data:`REPORT_POLICIES` (FGD, the default scheduler as run, then plain packing), and none
for a week of more pods than the budget; the section then says so and points to
``gpuscope whatif --db``, which replays them all.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, datetime, timedelta

import duckdb
import polars as pl

from gpuscope.analytics.report.week import Week
from gpuscope.analytics.whatif.calibration import describe
from gpuscope.analytics.whatif.history import History, read_history
from gpuscope.analytics.whatif.inputs import FIRST_SEED
from gpuscope.analytics.whatif.policies import POLICIES
from gpuscope.analytics.whatif.week import WEEK_SEEDS, WindowReplay, replay_history
from gpuscope.core.settings import AnalyticsSettings

#: Label of the row and line for what the real scheduler did.
WHAT_HAPPENED = "what happened"
#: Pod placements the section may replay (pods in the week times policies).
REPLAY_BUDGET_PODS = 40_000
#: Policies in the order a busy week drops them last to first: FGD (the likeliest to start
#: the most), kube-scheduler's default as users run it, plain packing, then the rest.
REPORT_POLICIES = ("fgd", "leastallocated", "bestfit", "mostallocated", "dotprod", "random")

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


def policies_for(
    pods: int, budget: int = REPLAY_BUDGET_PODS, seeds: int = 1
) -> tuple[tuple[str, ...], str]:
    """The policies a week of ``pods`` is replayed under, ``seeds`` times each, within
    ``budget``, and what the section must say about those left out (module docstring)."""
    n = min(len(POLICIES), budget // (pods * seeds)) if pods else len(POLICIES)
    chosen = tuple(p for p in POLICIES if p in REPORT_POLICIES[:n])
    if n == len(POLICIES):
        return chosen, ""
    rerun = f"`gpuscope whatif --db PATH --week WEEK` replays {'them' if n else 'every policy'}"
    if n == 0:
        return chosen, (
            f"{pods:,} pods in the week: too many to replay within the report's time "
            f"(at most {budget:,} pod placements); {rerun}."
        )
    left = ", ".join(p for p in REPORT_POLICIES if p not in chosen)
    return chosen, (
        f"{pods:,} pods in the week: replayed under {', '.join(chosen)} only, within the "
        f"report's time (at most {budget:,} pod placements); not {left}: {rerun}."
    )


def whatif_over(
    con: duckdb.DuckDBPyConnection,
    week: Week,
    settings: AnalyticsSettings,
    budget: int = REPLAY_BUDGET_PODS,
    history: History | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, str, str]:
    """The section's two tables, its note (empty, or why not every policy ran, or why
    nothing could be replayed) and its verdict (whatif/verdict.py: the policy that beats
    the others beyond the spread across seeds, or that none would have mattered)."""
    empty = (
        pl.DataFrame(schema=COLUMNS),
        pl.DataFrame(schema=ALLOCATION_COLUMNS),
    )
    if history is None:  # the report reads it once for this and the topology what-if
        history = read_history(con, week.start, week.end)
    policies, note = policies_for(len(history.events), budget, WEEK_SEEDS)
    if not policies:
        return *empty, note, ""
    replayed = replay_history(
        history, policies, coverage=settings.fgd_task_coverage, calibrate=settings.whatif_policy
    )
    if replayed is None:
        nothing = "No pods and GPU nodes are stored for the week: nothing to replay."
        return *empty, nothing, ""
    hours = _hours(week)
    series = []
    for r in replayed.results:
        if r.seed != FIRST_SEED:  # the chart draws the week as stored
            continue
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
    verdict: str = replayed.figures["summary"]["verdict"]["text"]
    cal = replayed.figures["summary"].get("calibration")
    if cal:  # how far the replay of the policy that ran is from the week: first
        verdict = f"{describe(cal)} {verdict}"
    return table, allocation, note, verdict

"""A stored window replayed under each policy, beside what really happened.

One function for every reader of the stored history (``gpuscope whatif --db``, the weekly
report's What-if section, ``GET /api/v1/whatif``), so the three always give the same
figures for the same week: :func:`replay_window` reads the window's history
(:func:`~gpuscope.analytics.whatif.history.read_history`), replays it under each policy
(:func:`~gpuscope.analytics.whatif.inputs.run_history`), summarises the results and adds, per
policy, ``gpus_recovered``: GPUs it would have had allocated when arrivals stopped, less
what the real scheduler had allocated then
(:func:`~gpuscope.analytics.whatif.history.what_happened`).

The summary also names ``most_jobs_policy``: the policy that would have started the most
jobs, ties broken by the most GPUs allocated when arrivals stop, then the fewest queued
GPU-hours, then the order the policies were asked for; and the ``verdict``
(:mod:`~gpuscope.analytics.whatif.verdict`): the policy that beats the others by more than
the spread across seeds, or that none would have made a material difference. Readers
headline the verdict, never the ranking alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from gpuscope.analytics.whatif.calibration import DEFAULT_POLICY, calibration, tolerance
from gpuscope.analytics.whatif.history import History, read_history, what_happened
from gpuscope.analytics.whatif.inputs import FIRST_SEED, run_history
from gpuscope.analytics.whatif.results import PolicyResult, summarize
from gpuscope.analytics.whatif.verdict import verdict

#: Replays of a stored window per policy: the first as stored, the others with arrivals
#: jittered; their spread is what a difference between policies must exceed.
WEEK_SEEDS = 3


@dataclass(frozen=True, slots=True)
class WindowReplay:
    """The window's history, every policy's result and the summarised figures
    (``{"policies": {...}, "summary": {...}}`` as ``gpuscope whatif --json`` prints)."""

    history: History
    results: tuple[PolicyResult, ...]
    figures: dict[str, Any]

    @property
    def most_jobs_policy(self) -> str | None:
        name: str | None = self.figures["summary"]["most_jobs_policy"]
        return name


def most_jobs(policies: dict[str, dict[str, Any]]) -> str | None:
    """The policy that started the most jobs (tie-breaks: module docstring)."""
    order = list(policies)
    if not order:
        return None
    return min(
        order,
        key=lambda n: (
            -policies[n]["jobs_started"],
            -policies[n]["allocated_gpus"],
            policies[n]["queued_gpu_hours"],
            order.index(n),
        ),
    )


def replay_window(
    con: duckdb.DuckDBPyConnection,
    start: datetime,
    end: datetime,
    policies: Sequence[str],
    *,
    seeds: int = WEEK_SEEDS,
    drop: bool = False,
    coverage: float = 0.95,
    calibrate: str = DEFAULT_POLICY,
) -> WindowReplay | None:
    """``[start, end)`` (naive UTC, as the store's) replayed under ``policies``; None when
    the window has no pod or no GPU node to replay."""
    history = read_history(con, start, end)
    return replay_history(
        history, policies, seeds=seeds, drop=drop, coverage=coverage, calibrate=calibrate
    )


def replay_history(
    history: History,
    policies: Sequence[str],
    *,
    seeds: int = WEEK_SEEDS,
    drop: bool = False,
    coverage: float = 0.95,
    calibrate: str = DEFAULT_POLICY,
) -> WindowReplay | None:
    """A window already read (:func:`replay_window`), for a caller that first looks at its
    size to choose the policies. ``calibrate``: the policy that really ran, replayed
    beside them (once, when not among them) and held against what happened."""
    if not history.events or not history.inventory.gpu_capacity:
        return None
    results = run_history(history, policies, seeds=seeds, drop=drop, coverage=coverage)
    baseline = (
        next((r for r in results if r.policy == calibrate and r.seed == FIRST_SEED), None)
        or run_history(history, [calibrate], seeds=1, drop=drop, coverage=coverage)[0]
    )
    # the figures are the week as stored (the first seed); the jittered seeds only give
    # the verdict the spread a difference must exceed
    figures = summarize([r for r in results if r.seed == FIRST_SEED])
    stop = max(e.arrive for e in history.events)
    actual = what_happened(history, stop)
    # a window built from events alone (no pods recorded) has nothing to calibrate against
    cal = calibration(history, baseline, actual) if history.pods else None
    for p in figures["policies"].values():
        p["gpus_recovered"] = round(p["allocated_gpus"] - actual["allocated_gpus"], 3)
    figures["summary"].update(
        {
            "nodes": len(history.inventory.nodes),
            "tasks": len(history.events),
            "seeds": seeds,
            "dropped_when_unplaceable": drop,
            "arrivals_stop": stop,
            "what_happened": actual,
            "most_jobs_policy": most_jobs(figures["policies"]),
            "calibration": cal,
            "verdict": verdict(results, tolerance(cal)).as_dict(),
        }
    )
    return WindowReplay(history, tuple(results), figures)

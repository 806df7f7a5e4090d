"""Quota over-use and fairness: who runs over their guarantee while others wait.

Guaranteed quotas (Kueue ClusterQueues, KAI Queues, ResourceQuotas, the config) promise each
project a number of GPUs. A project may borrow idle GPUs beyond its guarantee; that is
healthy until another project wants GPUs *within* its own guarantee and cannot get them.
Then the borrowed GPUs are reclaimable, and an operator (or the scheduler's reclaim) should
take them back. This detector says when that is the case and how many GPUs it is about.

Definitions (all as of the time analysed, from the inventory history):

* ``guaranteed_gpus``: a project's guarantee; a project's ResourceQuotas over several
  namespaces add up, two sources describing one project count once (the larger).
  A project with no quota has a guarantee of 0, so all it uses is over quota.
* ``used_gpus``: GPUs held by its pods bound to a node and not finished (Running, or Pending
  while containers start); a fractional pod counts its fraction times its devices; MIG
  instances are not counted (a slice is not a GPU).
* ``pending_gpus``: GPUs asked for by its Pending pods not yet bound to a node.
* ``over_quota_gpus = max(0, used - guaranteed)``.
* A project *waits under its guarantee* when it has pending demand and uses less than its
  guarantee; its ``entitled_gpus = min(pending, guaranteed - used)`` is the demand the
  guarantee promises it.
* ``reclaimable_gpus`` of an over-quota project: the waiting projects' total entitlement
  shared over the over-quota projects in proportion to their over-use, and never more than
  its own over-use: ``over * min(1, entitled_total / over_total)``. With one borrower that
  is ``min(over-use, waiting entitlement)``; with several, each gives back its share, so
  the reclaim never exceeds what the waiting projects are owed.
* Fairness: ``share_of_gpu_hours`` (a project's GPU-hours over the window from
  ``workload_intervals``, fractions weighted, over everyone's) against ``guaranteed_share``
  (its guarantee over all guarantees); ``fairness_ratio`` is their quotient (> 1: it got
  more than its guaranteed share).

Everything that scales with the cluster (pods, intervals, inventory history) is done by one
DuckDB query; Python only shares out the reclaim over the (few) projects.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from importlib.resources import files
from typing import Any

import duckdb

from analytics.base import Analysis
from collector.store import utc
from gpuscope.records import Finding, finding_id
from gpuscope.settings import AnalyticsSettings

KINDS: tuple[str, ...] = ("quota_overuse",)
#: GPU amounts below this are rounding noise of fractional sums, not over-use.
EPSILON = 1e-6


def _load_queries(name: str) -> dict[str, str]:
    text = files("analytics").joinpath("sql", name).read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    return {n: body.strip() for n, body in zip(parts[1::2], parts[2::2], strict=True)}


Q = _load_queries("quota.sql")


def _gpus(value: float) -> float | int:
    """A GPU amount for JSON: a whole number as an int, else rounded to 3 decimals."""
    rounded = round(float(value), 3)
    return int(rounded) if rounded.is_integer() else rounded


def run_quota(
    con: duckdb.DuckDBPyConnection,
    at: datetime,
    settings: AnalyticsSettings,
    *,
    window: timedelta = timedelta(days=7),
) -> Analysis:
    """Quota use per project as of ``at`` and ``quota_overuse`` findings.

    ``con`` is a cursor on the store (read-only use); ``window`` is the span of the
    fairness view (GPU-hours over ``[at - window, at]``). Pure: the same store and time
    give the same answer. ``settings`` has no quota thresholds yet; it is taken so every
    detector is called alike.
    """
    del settings  # no quota thresholds yet; kept for a uniform detector signature
    at = utc(at)
    rows = con.execute(Q["quota_projects"], {"at": at, "lo": at - window}).fetchall()
    projects: dict[str, dict[str, Any]] = {}
    for project, guaranteed, used, pending, pending_pods, pending_since, hours in rows:
        projects[project] = {
            "guaranteed": float(guaranteed),
            "used": float(used),
            "pending": float(pending),
            "pending_pods": int(pending_pods),
            "pending_since": pending_since,
            "hours": float(hours),
            "over": max(0.0, float(used) - float(guaranteed)),
        }
    waiting = {
        name: min(p["pending"], p["guaranteed"] - p["used"])
        for name, p in projects.items()
        if p["pending"] > EPSILON and p["guaranteed"] - p["used"] > EPSILON
    }
    entitled_total = sum(waiting.values())
    over_total = sum(p["over"] for p in projects.values() if p["over"] > EPSILON)
    scale = min(1.0, entitled_total / over_total) if over_total > EPSILON else 0.0
    if not projects:
        # no quota, pod or workload known as of ``at`` (no inventory yet): nothing to say,
        # and no gauge may claim 0 GPUs guaranteed or used before the data exists
        return Analysis(kinds=KINDS, findings=[], summary={})
    total_hours = sum(p["hours"] for p in projects.values())
    total_guaranteed = sum(p["guaranteed"] for p in projects.values())

    findings: list[Finding] = []
    summary_projects: dict[str, dict[str, Any]] = {}
    for name, p in projects.items():
        reclaimable = p["over"] * scale if p["over"] > EPSILON else 0.0
        share = p["hours"] / total_hours if total_hours > 0 else 0.0
        g_share = p["guaranteed"] / total_guaranteed if total_guaranteed > 0 else 0.0
        summary_projects[name] = {
            "guaranteed_gpus": _gpus(p["guaranteed"]),
            "used_gpus": _gpus(p["used"]),
            "over_quota_gpus": _gpus(p["over"]),
            "pending_gpus": _gpus(p["pending"]),
            "reclaimable_gpus": _gpus(reclaimable),
            "gpu_hours": round(p["hours"], 3),
            "share_of_gpu_hours": round(share, 4),
            "guaranteed_share": round(g_share, 4),
            "fairness_ratio": round(share / g_share, 4) if g_share > 0 else None,
        }
        if reclaimable <= EPSILON:
            continue
        waits = [
            {
                "project": w,
                "entitled_gpus": _gpus(waiting[w]),
                "pending_gpus": _gpus(projects[w]["pending"]),
                "pending_pods": projects[w]["pending_pods"],
                "guaranteed_gpus": _gpus(projects[w]["guaranteed"]),
                "used_gpus": _gpus(projects[w]["used"]),
                "waiting_since": projects[w]["pending_since"].isoformat(),
            }
            for w in sorted(waiting)
        ]
        subject = {"project": name}
        findings.append(
            Finding(
                id=finding_id("quota_overuse", subject),
                kind="quota_overuse",
                severity="warning",
                subject=subject,
                # the over-use became reclaimable when the earliest waiting pod started to wait
                since=min(projects[w]["pending_since"] for w in waiting),
                observed_at=at,
                evidence={
                    "guaranteed_gpus": _gpus(p["guaranteed"]),
                    "used_gpus": _gpus(p["used"]),
                    "over_quota_gpus": _gpus(p["over"]),
                    "reclaimable_gpus": _gpus(reclaimable),
                    "waiting_entitled_gpus": _gpus(entitled_total),
                    "waiting_projects": waits,
                },
                recommendation={
                    "action": "reclaim",
                    "target": {"project": name, "gpus": _gpus(reclaimable)},
                },
            )
        )
    summary: dict[str, Any] = {
        "projects": summary_projects,
        "total_guaranteed_gpus": _gpus(total_guaranteed),
        "total_used_gpus": _gpus(sum(p["used"] for p in projects.values())),
        "total_over_quota_gpus": _gpus(over_total),
        "total_pending_gpus": _gpus(sum(p["pending"] for p in projects.values())),
        "total_reclaimable_gpus": _gpus(min(entitled_total, over_total)),
        "total_gpu_hours": round(total_hours, 3),
        "projects_over_quota": sum(1 for p in projects.values() if p["over"] > EPSILON),
        "projects_waiting": len(waiting),
        "window_hours": round(window.total_seconds() / 3600, 3),
    }
    return Analysis(kinds=KINDS, findings=findings, summary=summary)

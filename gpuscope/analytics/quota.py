"""Quota over-use and fairness: who runs over their guarantee, and whether that is what a
waiting job waits on.

Guaranteed quotas (Kueue ClusterQueues, KAI Queues, ResourceQuotas, the config) promise each
project a number of GPUs. A project may borrow quota others leave unused; that is healthy
until another project wants GPUs *within* its own guarantee and the unused quota left is
not enough. Then borrowed GPUs are reclaimed, as Kueue's ``reclaimWithinCohort`` and
KAI-Scheduler's reclaim do: by preempting whole jobs of the borrowers.

Definitions (all as of the time analysed, from the inventory history; one SQL block,
``quota_state`` in gpuscope/analytics/sql/quota.sql, serves this detector and the weekly report):

* ``guaranteed_gpus``: a project's guarantee; a project's ResourceQuotas over several
  namespaces add up, two sources describing one project count once (the larger).
  A project with no quota has a guarantee of 0, so all it uses is over quota.
* ``used_gpus``: GPUs held by its pods bound to a node and not finished; a fractional pod
  counts its fraction times its devices; MIG instances are not counted.
* ``pending_gpus``: GPUs asked for by its Pending pods not yet bound to a node.
* ``over_quota_gpus = max(0, used - guaranteed)``.
* Unused quota: ``free_quota = max(0, sum(guaranteed) - sum(used))``, the guarantees
  nobody uses, less what borrowers already took. All quotas form one cohort (gpuscope sees
  no cohort names).
* *Admissible capacity* of a project: ``guaranteed + min(borrowing_limit, free quota of
  the others)`` (Kueue's nominal quota plus what it may borrow). A pending job waits on
  quota only when ``used + request`` exceeds it.
* A project waiting *within* its guarantee (``entitled = min(pending, guaranteed - used)``)
  that finds the unused quota short is owed ``need = entitled_total - free_quota``: the
  borrowers give that back (gpuscope/analytics/quota_reclaim.py: shares by ``over_quota_weight``,
  victims as whole jobs). A ``quota_overuse`` warning names each borrower's victims.
* A waiting project whose request is admissible does not wait on quota: the finding (info,
  no reclaim) names the real blocker from the placement analysis at the same time:
  ``fragmentation`` (enough free GPUs, none placeable together), ``capacity`` (not enough
  free GPUs), or ``placement`` (the GPUs are there: CPU, memory, taints or the scheduler).
* Fairness: ``share_of_gpu_hours`` (a project's GPU-hours over the window from
  ``workload_intervals``) against ``guaranteed_share``; ``fairness_ratio`` their quotient.

Where gpuscope differs from Kueue and KAI on purpose: docs/analytics.md.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from importlib.resources import files
from typing import Any

import duckdb

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.quota_reclaim import victims, weighted_shares
from gpuscope.collector.store import utc
from gpuscope.core.records import Finding, Severity, finding_id
from gpuscope.core.settings import AnalyticsSettings

KINDS: tuple[str, ...] = ("quota_overuse",)
#: GPU amounts below this are rounding noise of fractional sums, not over-use.
EPSILON = 1e-6


def _load_queries(name: str) -> dict[str, str]:
    text = files("gpuscope.analytics").joinpath("sql", name).read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    named = {n: body.strip() for n, body in zip(parts[1::2], parts[2::2], strict=True)}
    block = named.pop("quota_state")
    return {n: body.replace("{quota_state}", block) for n, body in named.items()}


Q = _load_queries("quota.sql")


def _gpus(value: float) -> float | int:
    """A GPU amount for JSON: a whole number as an int, else rounded to 3 decimals."""
    rounded = round(float(value), 3)
    return int(rounded) if rounded.is_integer() else rounded


def _projects(
    con: duckdb.DuckDBPyConnection, at: datetime, lo: datetime
) -> dict[str, dict[str, Any]]:
    projects: dict[str, dict[str, Any]] = {}
    rows = con.execute(Q["quota_projects"], {"at": at, "lo": lo}).fetchall()
    for (project, guaranteed, used, pending, pending_pods, pending_since, hours,
         borrowing_limit, weight, largest) in rows:  # fmt: skip
        projects[project] = {
            "guaranteed": float(guaranteed), "used": float(used), "pending": float(pending),
            "pending_pods": int(pending_pods), "pending_since": pending_since,
            "hours": float(hours), "over": max(0.0, float(used) - float(guaranteed)),
            "borrowing_limit": math.inf if borrowing_limit is None else float(borrowing_limit),
            "weight": 1.0 if weight is None or weight <= 0 else float(weight),
            "largest": float(largest),
        }  # fmt: skip
    return projects


def _placement_blocker(
    con: duckdb.DuckDBPyConnection, at: datetime, settings: AnalyticsSettings
) -> dict[str, Any]:
    """The placement view at ``at``: what the fragmentation analysis says is free."""
    from gpuscope.analytics.report.fragmentation import analysis_at

    found = analysis_at(con, at, settings)
    s = found.summary if found is not None else {}
    return {
        "free_gpus": float(s.get("free_gpus", 0.0)),
        "largest_placeable_job_gpus": float(s.get("largest_placeable_job_gpus", 0)),
    }


def _blocker(request: float, placement: dict[str, Any]) -> str:
    if request <= placement["largest_placeable_job_gpus"] + EPSILON:
        return "placement"
    if request <= placement["free_gpus"] + EPSILON:
        return "fragmentation"
    return "capacity"


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
    give the same answer. ``settings`` serve the placement view of a waiting job.
    """
    at = utc(at)
    projects = _projects(con, at, at - window)
    if not projects:
        # no quota, pod or workload known as of ``at`` (no inventory yet): nothing to say,
        # and no gauge may claim 0 GPUs guaranteed or used before the data exists
        return Analysis(kinds=KINDS, findings=[], summary={})
    total_guaranteed = sum(p["guaranteed"] for p in projects.values())
    total_used = sum(p["used"] for p in projects.values())
    free_quota = max(0.0, total_guaranteed - total_used)
    unused = {n: max(0.0, p["guaranteed"] - p["used"]) for n, p in projects.items()}
    over = {n: p["over"] for n, p in projects.items() if p["over"] > EPSILON}
    over_total = sum(over.values())

    waiting: dict[str, dict[str, Any]] = {}
    for name, p in projects.items():
        if p["pending"] <= EPSILON:
            continue
        entitled = max(0.0, min(p["pending"], p["guaranteed"] - p["used"]))
        others_free = max(0.0, free_quota - unused[name]) if free_quota > 0 else 0.0
        admissible = p["guaranteed"] + min(p["borrowing_limit"], others_free)
        waiting[name] = {
            "entitled": entitled,
            "admissible": admissible,
            "quota_blocked": p["used"] + p["largest"] > admissible + EPSILON,
        }
    entitled_total = sum(w["entitled"] for w in waiting.values())
    need = max(0.0, entitled_total - free_quota) if entitled_total > EPSILON else 0.0
    shares = weighted_shares(over, {n: projects[n]["weight"] for n in over}, need)
    placement: dict[str, Any] | None = None
    for name, w in waiting.items():
        if w["entitled"] > EPSILON and need > EPSILON:
            w["blocker"] = "quota"  # owed GPUs that borrowers hold
        elif w["quota_blocked"]:
            w["blocker"] = "quota_borrowing"  # wants more than it may borrow: owed nothing
        else:
            placement = placement or _placement_blocker(con, at, settings)
            w["blocker"] = _blocker(projects[name]["largest"], placement)

    borrowed: dict[str, list[dict[str, Any]]] = {}
    takers = [n for n, s in shares.items() if s > EPSILON]
    if takers:
        cur = con.execute(Q["borrowed_pods"], {"at": at, "projects": takers})
        names = [d[0] for d in cur.description or ()]
        for row in cur.fetchall():
            rec = dict(zip(names, row, strict=True))
            borrowed.setdefault(rec["project"], []).append(rec)

    findings: list[Finding] = []
    summary_projects: dict[str, dict[str, Any]] = {}
    total_hours = sum(p["hours"] for p in projects.values())
    for name, p in projects.items():
        reclaim = shares.get(name, 0.0)
        share = p["hours"] / total_hours if total_hours > 0 else 0.0
        g_share = p["guaranteed"] / total_guaranteed if total_guaranteed > 0 else 0.0
        summary_projects[name] = {
            "guaranteed_gpus": _gpus(p["guaranteed"]),
            "used_gpus": _gpus(p["used"]),
            "over_quota_gpus": _gpus(p["over"]),
            "pending_gpus": _gpus(p["pending"]),
            "reclaimable_gpus": _gpus(reclaim),
            "over_quota_weight": p["weight"],
            "gpu_hours": round(p["hours"], 3),
            "share_of_gpu_hours": round(share, 4),
            "guaranteed_share": round(g_share, 4),
            "fairness_ratio": round(share / g_share, 4) if g_share > 0 else None,
        }
        if name in waiting:
            summary_projects[name]["waiting_on"] = waiting[name]["blocker"]
        finding = _finding(name, p, projects, waiting, reclaim, borrowed.get(name, []),
                           entitled_total, free_quota, at)  # fmt: skip
        if finding is not None:
            findings.append(finding)
    summary: dict[str, Any] = {
        "projects": summary_projects,
        "total_guaranteed_gpus": _gpus(total_guaranteed),
        "total_used_gpus": _gpus(total_used),
        "total_over_quota_gpus": _gpus(over_total),
        "total_pending_gpus": _gpus(sum(p["pending"] for p in projects.values())),
        "total_reclaimable_gpus": _gpus(sum(shares.values())),
        "unused_quota_gpus": _gpus(free_quota),
        "total_gpu_hours": round(total_hours, 3),
        "projects_over_quota": len(over),
        "projects_waiting": sum(1 for w in waiting.values() if w["entitled"] > EPSILON),
        "projects_waiting_on_quota": sum(1 for w in waiting.values() if w["blocker"] == "quota"),
        "window_hours": round(window.total_seconds() / 3600, 3),
    }
    return Analysis(kinds=KINDS, findings=findings, summary=summary)


def _finding(
    name: str,
    p: dict[str, Any],
    projects: dict[str, dict[str, Any]],
    waiting: dict[str, dict[str, Any]],
    reclaim: float,
    pods: list[dict[str, Any]],
    entitled_total: float,
    free_quota: float,
    at: datetime,
) -> Finding | None:
    """A borrower's finding: a reclaim (warning) when a project within its guarantee is
    owed its GPUs; else, when one within its guarantee waits on something else, an info
    naming that blocker (the over-use is not what it waits on)."""
    if p["over"] <= EPSILON:
        return None
    owed = {w: v for w, v in waiting.items() if v["entitled"] > EPSILON}
    if reclaim <= EPSILON and not owed:
        return None
    waits = [
        {
            "project": w,
            "entitled_gpus": _gpus(v["entitled"]),
            "pending_gpus": _gpus(projects[w]["pending"]),
            "largest_pending_gpus": _gpus(projects[w]["largest"]),
            "pending_pods": projects[w]["pending_pods"],
            "guaranteed_gpus": _gpus(projects[w]["guaranteed"]),
            "used_gpus": _gpus(projects[w]["used"]),
            "admissible_gpus": _gpus(v["admissible"]),
            "waiting_on": v["blocker"],
            "waiting_since": projects[w]["pending_since"].isoformat(),
        }
        for w, v in sorted(owed.items())
    ]
    chosen = victims(pods, reclaim)
    evidence: dict[str, Any] = {
        "guaranteed_gpus": _gpus(p["guaranteed"]),
        "used_gpus": _gpus(p["used"]),
        "over_quota_gpus": _gpus(p["over"]),
        "over_quota_weight": p["weight"],
        "reclaimable_gpus": _gpus(reclaim),
        "waiting_entitled_gpus": _gpus(entitled_total),
        "unused_quota_gpus": _gpus(free_quota),
        "waiting_projects": waits,
    }
    severity: Severity = "info"
    recommendation = None
    if reclaim > EPSILON:
        severity = "warning"
        freed = sum(v["gpus"] for v in chosen)
        evidence["victims"] = chosen
        recommendation = {
            "action": "reclaim",
            "target": {"project": name, "gpus": _gpus(reclaim), "frees_gpus": _gpus(freed),
                       "victims": chosen},
        }  # fmt: skip
    subject = {"project": name}
    return Finding(
        id=finding_id("quota_overuse", subject),
        kind="quota_overuse",
        severity=severity,
        subject=subject,
        # the over-use became relevant when the earliest waiting pod started to wait
        since=min(projects[w]["pending_since"] for w in owed) if owed else at,
        observed_at=at,
        evidence=evidence,
        recommendation=recommendation,
    )


def over_quota_hours(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime
) -> dict[str, tuple[float, float]]:
    """Per project over ``[start, end)``: (GPU-hours over its guarantee, hours over it), by
    this detector's definition at every instant the pods or quotas change."""
    rows = con.execute(Q["over_quota_over"], {"start": utc(start), "end": utc(end)}).fetchall()
    return {p: (float(g or 0.0), float(h or 0.0)) for p, g, h in rows}

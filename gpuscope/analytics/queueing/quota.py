"""Quota over-use and fairness: who runs over their guarantee, and what a waiting job
waits on under the scheduler that decides.

The queue model (gpuscope/analytics/queueing/queues.py) charges every pod to the quota that covers
it (a Kueue ClusterQueue through the pod's LocalQueue, a KAI Queue, a ResourceQuota, a
guarantee from the settings) and judges each pending job as that scheduler would: it
fits the quota (it waits for a node), or the quota holds it back, with the jobs the
scheduler would preempt for it, if any, and the rule that decides (docs/analytics.md,
"Queues", with each scheduler's docs as the reference). This module turns that into
per-project figures and ``quota_overuse`` findings:

* ``guaranteed_gpus``: a ClusterQueue's nominal quota (its GPU flavors added up), a KAI
  Queue's quota, a namespace's ResourceQuota (a hard cap), a configured guarantee; a
  project no quota covers is ``unmanaged`` and never over a guarantee.
* ``used_gpus``: GPUs held by its pods bound to a node and not finished; a fractional pod
  counts its fraction times its devices; MIG instances are not counted.
* ``over_quota_gpus = max(0, used - guaranteed)`` (borrowed GPUs, for a ClusterQueue).
* A finding names victims only where the scheduler would take them (``warning``, action
  ``reclaim``); where a job waits within its guarantee while others borrow and the
  scheduler would take nothing (Kueue's default ``reclaimWithinCohort: Never``, a
  ClusterQueue in another cohort...), the borrowers of its pool get an ``info`` finding
  that says which rule decides.
* Fairness: ``share_of_gpu_hours`` (a project's GPU-hours over the window from
  ``workload_intervals``) against ``guaranteed_share``; ``fairness_ratio`` their quotient.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import duckdb

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.queueing.queue_fair import FairSharing
from gpuscope.analytics.queueing.queue_flavors import flavor_quotas
from gpuscope.analytics.queueing.queues import Charger, Project, QueueState, QueueVerdict, judge
from gpuscope.collector.storage.held_gpus import with_held_gpus
from gpuscope.collector.storage.store import utc
from gpuscope.core.records import Finding, finding_id
from gpuscope.core.settings import AnalyticsSettings

if TYPE_CHECKING:
    from gpuscope.analytics.inventory import InventoryReads

KINDS: tuple[str, ...] = ("quota_overuse",)
#: GPU amounts below this are rounding noise of fractional sums, not over-use.
EPSILON = 1e-6
#: Where a placement view says what a job quota admits waits on.
Placement = Callable[[], Mapping[str, Any]]


def _load_queries(name: str) -> dict[str, str]:
    text = files("gpuscope.analytics").joinpath("sql", name).read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    named = {n: body.strip() for n, body in zip(parts[1::2], parts[2::2], strict=True)}
    block = named.pop("quota_state")
    return {n: with_held_gpus(body.replace("{quota_state}", block)) for n, body in named.items()}


Q = _load_queries("quota.sql")


def _gpus(value: float) -> float | int:
    """A GPU amount for JSON: a whole number as an int, else rounded to 3 decimals."""
    rounded = round(float(value), 3)
    return int(rounded) if rounded.is_integer() else rounded


def _placement_blocker(
    con: duckdb.DuckDBPyConnection,
    at: datetime,
    settings: AnalyticsSettings,
    inventory: InventoryReads | None,
) -> dict[str, Any]:
    """The placement view at ``at``: what the fragmentation analysis says is free."""
    from gpuscope.analytics.inventory import InventoryReads

    found = (inventory or InventoryReads()).analysis(con, at, settings)
    return dict(found.summary) if found is not None else {}


def _blocker(request: float, placement: Mapping[str, Any]) -> str:
    if request <= float(placement.get("largest_placeable_job_gpus", 0)) + EPSILON:
        return "placement"
    if request <= float(placement.get("free_gpus", 0.0)) + EPSILON:
        return "fragmentation"
    return "capacity"


def _records(con: duckdb.DuckDBPyConnection, name: str, at: datetime) -> list[dict[str, Any]]:
    """Records valid at ``at``, each with ``_seen_from`` (unix seconds its version began)."""
    return [
        {**json.loads(text), "_seen_from": float(seen)}
        for text, seen in con.execute(Q[name], {"at": at}).fetchall()
    ]


def run_quota(
    con: duckdb.DuckDBPyConnection,
    at: datetime,
    settings: AnalyticsSettings,
    *,
    window: timedelta = timedelta(days=7),
    inventory: InventoryReads | None = None,
) -> Analysis:
    """Quota use per project as of ``at`` and ``quota_overuse`` findings.

    ``con`` is a cursor on the store (read-only use); ``window`` is the span of the
    fairness view (GPU-hours over ``[at - window, at]``). Pure: the same store and time
    give the same answer. ``settings`` serve the placement view of a waiting job;
    ``inventory``, a run's reads of the state at ``at``, shares it with the other readers.
    """
    at = utc(at)
    pods = _records(con, "pods_at", at)
    quotas = _records(con, "quotas_at", at)
    charger = Charger(quotas)
    hours: dict[str, float] = {}
    rows = con.execute(Q["pod_gpu_hours"], {"at": at, "lo": at - window}).fetchall()
    for namespace, _pod, agent_project, record, gpu_hours in rows:
        project = charger.charge(json.loads(record))[0] if record else agent_project or namespace
        hours[project] = hours.get(project, 0.0) + float(gpu_hours or 0.0)
    if not pods and not quotas and not hours:
        # no quota, pod or workload known as of ``at`` (no inventory yet): nothing to say,
        # and no gauge may claim 0 GPUs guaranteed or used before the data exists
        return Analysis(kinds=KINDS, findings=[], summary={})
    free, capacity = math.inf, None
    if charger.kai:
        (found,) = con.execute(Q["gpus_at"], {"at": at}).fetchone() or (0.0,)
        capacity = float(found)
        held = sum(_held(p) for p in pods)
        free = max(0.0, capacity - held)
    labels = None
    if any(len(flavor_quotas(q)) > 1 for q in charger.cqs.values()):
        # which of its queue's Kueue flavors a running pod is of: its node's labels
        labels = {str(n.get("name")): n.get("labels") or {} for n in _records(con, "nodes_at", at)}
    state = judge(
        pods,
        quotas,
        free_gpus=free,
        capacity_gpus=capacity,
        node_labels=labels,
        fair_sharing=kueue_fair_sharing(settings),
    )
    cache: dict[str, Any] = {}

    def placement() -> Mapping[str, Any]:
        if "p" not in cache:
            cache["p"] = _placement_blocker(con, at, settings, inventory)
        return dict(cache["p"])

    return quota_analysis(state, at, placement, hours=hours, window=window)


def kueue_fair_sharing(settings: AnalyticsSettings) -> FairSharing:
    """Kueue's fair sharing configuration as the settings give it."""
    return FairSharing(settings.kueue_fair_sharing, tuple(settings.kueue_fair_sharing_strategies))


def _held(pod: Mapping[str, Any]) -> float:
    if not pod.get("node") or pod.get("phase") not in ("Running", "Pending"):
        return 0.0
    return float(pod.get("gpu_request") or 0) + float(pod.get("gpu_fraction") or 0.0) * float(
        pod.get("fraction_devices") or 1
    )


def quota_analysis(
    state: QueueState,
    at: datetime,
    placement: Placement,
    *,
    hours: Mapping[str, float] | None = None,
    window: timedelta | None = None,
) -> Analysis:
    """Figures and findings of a judged queue state (store or ``--objects`` files alike)."""
    hours = dict(hours or {})
    projects = dict(state.projects)
    for name in hours:
        projects.setdefault(name, Project(name, "unmanaged"))
    verdicts = state.verdicts
    taken: dict[str, list[tuple[QueueVerdict, Any]]] = {}
    for v in verdicts:
        for victim in v.victims:
            if math.isinf(victim.start_time):
                # a job still pending, which the model admitted earlier this round: the
                # verdict says Kueue would preempt it then; there is nothing to evict now
                continue
            owner = _owner(projects, victim)
            taken.setdefault(owner, []).append((v, victim))
    managed = {n: p for n, p in projects.items() if p.managed}
    total_guaranteed = sum(p.guaranteed for p in managed.values())
    total_hours = sum(hours.values())
    by_project: dict[str, list[QueueVerdict]] = {}
    for v in verdicts:
        by_project.setdefault(v.project, []).append(v)
    summary_projects: dict[str, dict[str, Any]] = {}
    for name, p in sorted(projects.items()):
        if not (p.managed or p.held_gpus or p.pending or hours.get(name)):
            continue
        share = hours.get(name, 0.0) / total_hours if total_hours > 0 else 0.0
        g_share = p.guaranteed / total_guaranteed if total_guaranteed > 0 and p.managed else 0.0
        entry: dict[str, Any] = {
            "scheduler": p.scheduler,
            "cohort": p.cohort,
            "guaranteed_gpus": _gpus(p.guaranteed),
            "used_gpus": _gpus(p.held_gpus),
            "over_quota_gpus": _gpus(p.over),
            "pending_gpus": _gpus(p.pending),
            "reclaimable_gpus": _gpus(sum(victim.gpus for _, victim in taken.get(name, []))),
            "over_quota_weight": p.weight,
            "gpu_hours": round(hours.get(name, 0.0), 3),
            "share_of_gpu_hours": round(share, 4),
            "guaranteed_share": round(g_share, 4),
            "fairness_ratio": round(share / g_share, 4) if g_share > 0 else None,
        }
        if name in state.fair_shares:  # KAI's, as its proportion plugin divides GPUs
            entry["fair_share_gpus"] = _gpus(state.fair_shares[name])
        mine = by_project.get(name, [])
        if mine:
            held = [v for v in mine if v.waits_on == "quota"]
            first = held[0] if held else mine[0]
            entry["waiting_on"] = (
                "quota" if held else _blocker(max(v.gpus for v in mine), placement())
            )
            entry["rule"] = first.rule
        summary_projects[name] = entry
    waits = {n: (e["waiting_on"], e["rule"]) for n, e in summary_projects.items() if "rule" in e}
    findings = _findings(projects, verdicts, taken, waits, at)
    summary: dict[str, Any] = {
        "projects": summary_projects,
        "pending_jobs": [_verdict_json(v) for v in verdicts],
        "total_guaranteed_gpus": _gpus(total_guaranteed),
        "total_used_gpus": _gpus(sum(p.held_gpus for p in projects.values())),
        "total_over_quota_gpus": _gpus(sum(p.over for p in projects.values())),
        "total_pending_gpus": _gpus(sum(p.pending for p in projects.values())),
        "total_reclaimable_gpus": _gpus(sum(v.gpus for vs in taken.values() for _, v in vs)),
        # guarantees nobody uses, over all quotas (each lends only within its own pool)
        "unused_quota_gpus": _gpus(
            sum(max(0.0, p.guaranteed - p.held_gpus) for p in managed.values())
        ),
        "total_gpu_hours": round(total_hours, 3),
        "projects_over_quota": sum(1 for p in projects.values() if p.over > EPSILON),
        "projects_waiting": len({v.project for v in verdicts if _within(projects, v)}),
        "projects_waiting_on_quota": len({v.project for v in verdicts if v.waits_on == "quota"}),
    }
    if window is not None:
        summary["window_hours"] = round(window.total_seconds() / 3600, 3)
    return Analysis(kinds=KINDS, findings=findings, summary=summary)


def _owner(projects: Mapping[str, Project], victim: Any) -> str:
    for name, p in projects.items():
        if any(j.namespace == victim.namespace and j.job == victim.job for j in p.victims):
            return name
    return str(victim.namespace)


def _within(projects: Mapping[str, Project], v: QueueVerdict) -> bool:
    """A job that waits within its queue's guarantee (what a reclaim is about)."""
    p = projects[v.project]
    return p.managed and p.held_gpus + v.gpus <= p.guaranteed + EPSILON


def _pool(p: Project) -> tuple[str, str] | None:
    """Where a project's unused quota can go: its Kueue cohort tree, its KAI parent,
    the settings' one pool; None for a hard cap or nothing."""
    if p.scheduler == "kueue":
        return ("kueue", p.root) if p.root else None
    if p.scheduler == "kai":
        return ("kai", p.cohort)
    if p.scheduler == "config":
        return ("config", "")
    return None


def _verdict_json(v: QueueVerdict) -> dict[str, Any]:
    return {
        "namespace": v.namespace,
        "job": v.job,
        "pods": list(v.pods),
        "project": v.project,
        "local_queue": v.local_queue,
        "scheduler": v.scheduler,
        "cohort": v.cohort,
        "flavor": v.flavor,
        "gpus": _gpus(v.gpus),
        "priority": v.priority,
        "waits_on": v.waits_on,
        "rule": v.rule,
        "reason": v.reason,
        "victims": [j.as_json() for j in v.victims],
    }


def _findings(
    projects: Mapping[str, Project],
    verdicts: Iterable[QueueVerdict],
    taken: Mapping[str, list[tuple[QueueVerdict, Any]]],
    waits: Mapping[str, tuple[str, str]],
    at: datetime,
) -> list[Finding]:
    """A warning for each project the scheduler would preempt jobs of; an info for each
    borrower in the pool of a job that waits within its guarantee while the scheduler
    takes nothing back for it (the rule says why)."""
    # jobs that wait within their guarantee with nobody taken for them, by pool (once:
    # a cluster has thousands of queues and jobs)
    owed_in: dict[tuple[str, str], list[QueueVerdict]] = {}
    for v in verdicts:
        where = _pool(projects[v.project])
        if where is not None and not v.victims and _within(projects, v):
            owed_in.setdefault(where, []).append(v)
    findings: list[Finding] = []
    for name, p in sorted(projects.items()):
        mine = taken.get(name, [])
        pool = _pool(p)
        owed = [v for v in owed_in.get(pool, []) if v.project != name] if pool else []
        if not mine and not (p.over > EPSILON and owed):
            continue
        victims = [victim.as_json() for _, victim in mine]
        waiting = sorted({id(v): v for v, _ in mine}.values(), key=lambda v: (v.namespace, v.job))
        if not mine:
            waiting = owed
        since_values = [projects[v.project].pending_since for v in waiting]
        since = min((s for s in since_values if s is not None), default=None)
        evidence: dict[str, Any] = {
            "scheduler": p.scheduler,
            "cohort": p.cohort,
            "guaranteed_gpus": _gpus(p.guaranteed),
            "used_gpus": _gpus(p.held_gpus),
            "over_quota_gpus": _gpus(p.over),
            "over_quota_weight": p.weight,
            "reclaimable_gpus": _gpus(sum(v["gpus"] for v in victims)),
            "waiting_jobs": [_verdict_json(v) for v in waiting],
            # per waiting project (what the alert's summary counts)
            "waiting_projects": [
                {
                    "project": w,
                    "waiting_on": waits[w][0],
                    "rule": waits[w][1],
                    "guaranteed_gpus": _gpus(projects[w].guaranteed),
                    "used_gpus": _gpus(projects[w].held_gpus),
                    "pending_gpus": _gpus(projects[w].pending),
                }
                for w in sorted({v.project for v in waiting})
            ],
            "rules": sorted({v.rule for v in waiting}),
        }
        recommendation = None
        if victims:
            evidence["victims"] = victims
            freed = sum(v["gpus"] for v in victims)
            recommendation = {
                "action": "reclaim",
                "target": {
                    "project": name,
                    "gpus": _gpus(freed),
                    "frees_gpus": _gpus(freed),
                    "victims": victims,
                    "rules": evidence["rules"],
                },
            }
        subject = {"project": name}
        findings.append(
            Finding(
                id=finding_id("quota_overuse", subject),
                kind="quota_overuse",
                severity="warning" if victims else "info",
                subject=subject,
                since=_time(since, at),
                observed_at=at,
                evidence=evidence,
                recommendation=recommendation,
            )
        )
    return findings


def _time(since: float | None, at: datetime) -> datetime:
    if since is None:
        return at
    from datetime import UTC

    return datetime.fromtimestamp(since, UTC).replace(tzinfo=None)


def over_quota_hours(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime
) -> dict[str, tuple[float, float]]:
    """Per project over ``[start, end)``: (GPU-hours over its guarantee, hours over it), by
    this detector's definition at every instant the pods or quotas change."""
    rows = con.execute(Q["over_quota_over"], {"start": utc(start), "end": utc(end)}).fetchall()
    return {p: (float(g or 0.0), float(h or 0.0)) for p, g, h in rows}

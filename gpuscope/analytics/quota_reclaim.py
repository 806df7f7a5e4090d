"""Which borrowed GPUs to take back, as whole jobs: the reclaim half of the quota detector.

Kueue (``reclaimWithinCohort``) and KAI-Scheduler reclaim by preempting whole workloads of
the queues that borrow, never "4 GPUs": a gang-scheduled job that loses one pod loses all
of them. So a reclaim names its victims: jobs (the pods of one controller; a pod with no
controller is its own job) of the over-quota projects, cheapest to lose first.

* How much each over-quota project gives back: the reclaim is shared out so that what each
  keeps over its guarantee is in proportion to its ``over_quota_weight`` (default 1), as
  KAI divides the over-quota pool by weight: the project furthest over its weighted share
  gives back first. Nobody gives back more than its own over-use.
* Which jobs: never a protected pod's job, nor one with a pod holding devices through a
  standalone DRA ResourceClaim other running pods also reserve (it stays allocated:
  preempting the pod frees nothing);
  preemptible jobs first, then lower priority,
  then the most recently started (what Kueue preempts first); whole jobs, until what they
  free covers the project's share. A job bigger than the share still goes whole: that is
  what the scheduler would do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Bisection steps for the weighted level (converges far below a thousandth of a GPU).
_STEPS = 60


def weighted_shares(
    over: Mapping[str, float], weights: Mapping[str, float], need: float
) -> dict[str, float]:
    """How much of ``need`` each project gives back: ``max(0, over - level * weight)``
    with the level at which the total is ``min(need, sum(over))``."""
    total = sum(over.values())
    if need <= 0 or total <= 0:
        return dict.fromkeys(over, 0.0)
    if need >= total:
        return dict(over)
    lo, hi = 0.0, max(o / max(weights[p], 1e-9) for p, o in over.items())
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        given = sum(max(0.0, o - mid * max(weights[p], 1e-9)) for p, o in over.items())
        lo, hi = (mid, hi) if given > need else (lo, mid)
    return {p: max(0.0, o - hi * max(weights[p], 1e-9)) for p, o in over.items()}


def _jobs(pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for p in pods:
        name = f"{p['owner_kind']}/{p['owner_name']}" if p["owner_name"] else f"Pod/{p['pod']}"
        job = jobs.setdefault(
            (p["namespace"], name),
            {"namespace": p["namespace"], "job": name, "pods": [], "gpus": 0.0,
             "preemptible": True, "priority": p["priority"], "start_time": 0.0,
             "protected": False},
        )  # fmt: skip
        job["pods"].append(p["pod"])
        job["gpus"] += p["gpus"]
        job["preemptible"] = job["preemptible"] and bool(p["preemptible"])
        job["priority"] = max(job["priority"], p["priority"])
        job["start_time"] = max(job["start_time"], p["start_time"])
        # a pod holding devices through a shared standalone DRA claim frees none when preempted
        job["protected"] = (
            job["protected"] or bool(p["protected"]) or bool(p.get("standalone_claims"))
        )
    return list(jobs.values())


def victims(pods: Sequence[Mapping[str, Any]], gpus: float) -> list[dict[str, Any]]:
    """Whole jobs from ``pods`` (one project's) that free at least ``gpus``, cheapest to
    lose first; fewer when the unprotected jobs do not hold that much."""
    if gpus <= 1e-6:
        return []
    order = sorted(
        (j for j in _jobs(pods) if not j["protected"] and j["gpus"] > 0),
        key=lambda j: (not j["preemptible"], j["priority"], -j["start_time"], j["job"]),
    )
    chosen: list[dict[str, Any]] = []
    freed = 0.0
    for job in order:
        if freed >= gpus - 1e-6:
            break
        chosen.append(
            {"namespace": job["namespace"], "job": job["job"], "pods": sorted(job["pods"]),
             "gpus": round(job["gpus"], 3), "preemptible": job["preemptible"],
             "priority": job["priority"]}
        )  # fmt: skip
        freed += job["gpus"]
    return chosen

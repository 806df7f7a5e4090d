"""How far the replay of the policy that really ran is from what really happened.

Why: the what-if ranks policies by replaying a window under each. A ranking means
nothing unless the replay of the cluster's own policy reproduces the window first: on the
demo's week it once sat 18.6 % of capacity away from reality hour by hour, so every
difference between policies was inside its own error. Every what-if over a stored window
now replays the policy that ran (``leastallocated``, kube-scheduler's default profile,
unless told otherwise: ``mostallocated`` for KAI-Scheduler's default binpack) and
compares, from the same rows:

- ``hourly_allocation_mae_gpus`` / ``_share``: the mean, over the window's hours (from
  where its stored history begins), of
  |replayed - real| time-weighted allocated GPUs in the hour (share: of capacity);
- ``allocated_at_stop_error_share``: allocated GPUs when arrivals stop, replayed less
  real, over capacity;
- ``jobs_started`` and ``queued_gpu_hours``, replayed and real, and their errors;
- ``multi_node_jobs_started``: pod groups of two or more whole-GPU pods all of whose pods
  started, replayed and real.

:func:`tolerance` turns these into the error a difference between two policies must exceed
beside the seeds' spread (:mod:`gpuscope.analytics.whatif.verdict`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuscope.analytics.domains.topology_groups import pod_groups
from gpuscope.analytics.whatif.history import History
from gpuscope.analytics.whatif.results import PolicyResult

#: The policy a window is calibrated with unless told otherwise: kube-scheduler's default.
DEFAULT_POLICY = "leastallocated"
SECONDS_PER_HOUR = 3600.0


def _base(key: str) -> str:
    """A replayed placement's pod (a preempted pod's replacement carries a suffix)."""
    return key.split("#", 1)[0]


def _add(hours: list[float], start: float, end: float, gpus: float, t0: float) -> None:
    """Spread ``gpus`` held over [start, end) onto the hourly buckets from ``t0``."""
    n = len(hours)
    lo, hi = max(start, t0), min(end, t0 + n * SECONDS_PER_HOUR)
    if hi <= lo or gpus <= 0:
        return
    first, last = int((lo - t0) // SECONDS_PER_HOUR), int((hi - t0 - 1e-9) // SECONDS_PER_HOUR)
    for b in range(first, min(last, n - 1) + 1):
        b0 = t0 + b * SECONDS_PER_HOUR
        overlap = min(hi, b0 + SECONDS_PER_HOUR) - max(lo, b0)
        hours[b] += gpus * overlap / SECONDS_PER_HOUR


def hours_of(history: History) -> int:
    """The window's hours from where its stored history begins."""
    return max(1, int((history.end - history.first) // SECONDS_PER_HOUR))


def real_hourly(history: History) -> list[float]:
    """Allocated GPUs in each hour of the window, time-weighted, as it happened."""
    out = [0.0] * hours_of(history)
    for h in history.pods:
        if h.started is not None:
            end = history.end if h.ended is None else h.ended
            _add(out, h.started, end, h.pod.gpus, history.first)
    return out


def replay_hourly(history: History, result: PolicyResult) -> list[float]:
    """The same for one replay, from its placements."""
    gpus = {e.key: e.request.gpu_milli / 1000 for e in history.events}
    out = [0.0] * hours_of(history)
    for p in result.placements:
        end = history.end if p.end is None else p.end
        _add(out, p.start, end, gpus.get(_base(p.key), 0.0), history.first)
    return out


def _groups(history: History) -> list[list[str]]:
    """Pod groups of two or more whole-GPU pods present in the window, as their pod keys
    (the groups the topology analysis finds: :func:`~gpuscope.analytics.domains.
    topology_groups.pod_groups`)."""
    groups = pod_groups([h.pod for h in history.pods])
    keys = [[f"{g.namespace}/{m}" for m in g.members] for g in groups]
    return [k for k in keys if len(k) >= 2]


def multi_node_started(history: History, started: Iterable[str]) -> int:
    """Pod groups (of two or more whole-GPU pods) all of whose pods started."""
    done = set(started)
    return sum(1 for keys in _groups(history) if all(k in done for k in keys))


def calibration(
    history: History, result: PolicyResult, actual: Mapping[str, float]
) -> dict[str, Any]:
    """The replay of the policy that ran (``result``) against ``actual``
    (:func:`~gpuscope.analytics.whatif.history.what_happened`), as ``summary.calibration``."""
    capacity = history.inventory.gpu_capacity or 1
    real, replayed = real_hourly(history), replay_hourly(history, result)
    mae = sum(abs(a - b) for a, b in zip(real, replayed, strict=True)) / len(real)
    real_started = [h.key for h in history.pods if h.started is not None]
    replay_started = [_base(p.key) for p in result.placements]
    queued_real, queued_replay = float(actual["queued_gpu_hours"]), result.queued_gpu_hours
    jobs_real = int(actual["jobs_started"])
    return {
        "policy": result.policy,
        "hours": len(real),
        "hourly_allocation_mae_gpus": round(mae, 3),
        "hourly_allocation_mae_share": round(mae / capacity, 6),
        "mean_allocated_gpus": round(sum(replayed) / len(replayed), 3),
        "mean_allocated_gpus_real": round(sum(real) / len(real), 3),
        "allocated_at_stop_gpus": round(result.allocated_gpus, 3),
        "allocated_at_stop_gpus_real": round(float(actual["allocated_gpus"]), 3),
        "allocated_at_stop_error_share": round(
            (result.allocated_gpus - float(actual["allocated_gpus"])) / capacity, 6
        ),
        "jobs_started": result.jobs_started,
        "jobs_started_real": jobs_real,
        "jobs_started_error": result.jobs_started - jobs_real,
        "queued_gpu_hours": round(queued_replay, 3),
        "queued_gpu_hours_real": round(queued_real, 3),
        "queued_gpu_hours_error_share": round(
            (queued_replay - queued_real) / queued_real if queued_real else 0.0, 6
        ),
        "multi_node_jobs_started": multi_node_started(history, replay_started),
        "multi_node_jobs_started_real": multi_node_started(history, real_started),
    }


def tolerance(cal: Mapping[str, Any] | None) -> dict[str, float]:
    """Per verdict measure, the error of the calibrated replay: a difference between
    policies no larger than it is not the policies' doing."""
    if not cal:
        return {}
    return {
        "jobs_started": float(abs(cal["jobs_started_error"])),
        "queued_gpu_hours": abs(float(cal["queued_gpu_hours"]) - cal["queued_gpu_hours_real"]),
    }


def describe(cal: Mapping[str, Any]) -> str:
    """One line for the text output and the report."""
    return (
        f"Calibration: the replay of {cal['policy']} (the policy that ran) is "
        f"{100 * cal['hourly_allocation_mae_share']:.1f} % of capacity from what happened "
        f"hour by hour ({cal['mean_allocated_gpus']:,.1f} allocated GPUs on average against "
        f"{cal['mean_allocated_gpus_real']:,.1f}); {cal['jobs_started']:,} jobs started "
        f"against {cal['jobs_started_real']:,}; {cal['queued_gpu_hours']:,.0f} GPU-hours "
        f"queued against {cal['queued_gpu_hours_real']:,.0f}; "
        f"{cal['multi_node_jobs_started']} multi-node jobs started against "
        f"{cal['multi_node_jobs_started_real']}."
    )

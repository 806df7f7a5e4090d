"""The replay's records: one :class:`PolicyResult` per policy and seed, and their summary."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Whole-GPU job sizes whose headroom a result reports.
HEADROOM_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster after one event (``fgd_ratio`` only on sampled events)."""

    time: float
    arrived_gpus: float
    allocated_gpus: float
    queued: int
    fgd_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where and when one pod ran: its node, the GPU indices it took, start and end
    (None: still running when the replay ended)."""

    key: str
    node: str
    gpus: tuple[int, ...]
    start: float
    end: float | None


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """What one policy did with one arrival sequence.

    ``allocation_ratio``: allocated GPUs / GPU capacity when arrivals stop;
    ``unallocated_gpus``: capacity less allocated then. ``queued_gpu_hours``: GPUs times
    hours each pod waited (to its start, or to the end for those that never started).
    ``headroom``: k-GPU jobs that would fit on one node each when arrivals stop.
    """

    policy: str
    seed: int
    capacity_gpus: int
    arrived_gpus: float
    allocated_gpus: float
    jobs_arrived: int
    jobs_started: int
    jobs_never_started: int
    queued_gpu_hours: float
    fgd_ratio: float
    headroom: tuple[tuple[int, int], ...]
    timeline: tuple[Sample, ...]
    placements: tuple[Placement, ...] = ()
    #: Pods ended early because a higher-priority pod preempted them.
    jobs_preempted: int = 0

    @property
    def allocation_ratio(self) -> float:
        return self.allocated_gpus / self.capacity_gpus if self.capacity_gpus else 0.0

    @property
    def unallocated_gpus(self) -> float:
        return self.capacity_gpus - self.allocated_gpus

    def allocation_at(self, arrived_share: float) -> float:
        """Allocation ratio once arrivals reached ``arrived_share`` of capacity (the FGD
        paper's x-axis): the last sample at or below it."""
        value = 0.0
        for s in self.timeline:
            if s.arrived_gpus > arrived_share * self.capacity_gpus + 1e-9:
                break
            value = s.allocated_gpus / self.capacity_gpus if self.capacity_gpus else 0.0
        return value


def summarize(results: Sequence[PolicyResult]) -> dict[str, Any]:
    """``{"policies": {name: figures averaged over seeds}, "summary": {...}}``."""
    by_policy: dict[str, list[PolicyResult]] = {}
    for r in results:
        by_policy.setdefault(r.policy, []).append(r)
    policies: dict[str, Any] = {}
    for name, runs in by_policy.items():
        ratios = [r.allocation_ratio for r in runs]
        policies[name] = {
            "allocation_ratio": round(statistics.fmean(ratios), 6),
            "allocation_ratio_min": round(min(ratios), 6),
            "allocation_ratio_max": round(max(ratios), 6),
            "allocated_gpus": round(statistics.fmean(r.allocated_gpus for r in runs), 3),
            "unallocated_gpus": round(statistics.fmean(r.unallocated_gpus for r in runs), 3),
            "jobs_arrived": round(statistics.fmean(r.jobs_arrived for r in runs), 1),
            "jobs_started": round(statistics.fmean(r.jobs_started for r in runs), 1),
            "jobs_never_started": round(statistics.fmean(r.jobs_never_started for r in runs), 1),
            "jobs_preempted": round(statistics.fmean(r.jobs_preempted for r in runs), 1),
            "queued_gpu_hours": round(statistics.fmean(r.queued_gpu_hours for r in runs), 3),
            "fgd_fragmentation_ratio": round(statistics.fmean(r.fgd_ratio for r in runs), 6),
            "headroom_jobs": {
                str(k): round(statistics.fmean(dict(r.headroom)[k] for r in runs), 1)
                for k in HEADROOM_SIZES
            },
            "seeds": [r.seed for r in runs],
        }
    first = results[0] if results else None
    best = max(policies, key=lambda n: policies[n]["allocation_ratio"]) if policies else None
    summary = {
        "capacity_gpus": first.capacity_gpus if first else 0,
        "arrived_gpus": round(statistics.fmean(r.arrived_gpus for r in results), 3)
        if results
        else 0.0,
        "best_policy": best,
        "policies": list(policies),
    }
    return {"policies": policies, "summary": summary}

"""What the real scheduler did with a stored week's multi-node jobs, in the figures the
topology-aware replay gives per policy (:mod:`gpuscope.analytics.whatif.gangs`).

From the same rows as the replay's trace: a multi-node job (pod group) *started* when every
pod of it seen in the week started (its start: the last of theirs; a gang runs once all its
pods do), *inside one domain* when those pods' nodes all sit in one domain of the replay's
level; it *waited* when it started more than :data:`SCHEDULING_LATENCY_S` after it arrived
(pods of one gang bound a few seconds apart did not wait). A job never started waited until
the week's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuscope.analytics.whatif.gangs import GangTrace, gang_figures, history_trace
from gpuscope.analytics.whatif.history import History

#: A start this long after the arrival is scheduling latency, not a wait.
SCHEDULING_LATENCY_S = 60.0


def gangs_what_happened(history: History, trace: GangTrace) -> dict[str, Any]:
    """The real outcome of the trace's multi-node jobs (module docstring)."""
    pods = {h.key: h for h in history.pods}
    domain_of = {n.name: n.domain for n in trace.nodes}
    jobs = {j.name: j for j in trace.jobs}
    started = in_one = waited = 0
    waits: list[float] = []
    queued = 0.0
    for name, members in trace.members:
        seen = [pods[m] for m in members if m in pods]
        job = jobs[name]
        if seen and all(h.started is not None for h in seen):
            start = max(h.started for h in seen if h.started is not None)
            wait = max(0.0, start - job.arrival)
            started += 1
            waits.append(wait)
            queued += wait
            waited += wait > SCHEDULING_LATENCY_S
            in_one += len({domain_of.get(h.pod.node or "", "") for h in seen}) == 1
        else:
            queued += max(0.0, history.end - job.arrival)
    total = len(trace.members)
    return {
        "multi_node_jobs": total,
        "multi_node_started": started,
        "multi_node_in_one_domain": in_one,
        "multi_node_spread": started - in_one,
        "multi_node_waited": waited,
        "multi_node_never_started": total - started,
        "mean_multi_node_wait_hours": round(sum(waits) / len(waits) / 3600, 4) if waits else 0.0,
        "multi_node_queued_hours": round(queued / 3600, 4),
    }


def week_figures(
    history: History, *, labels: Sequence[str] | None = None, level: str | None = None
) -> dict[str, Any]:
    """A stored window's topology-aware what-if with what happened: the ``topology`` key of
    ``gpuscope whatif --db --json`` and of ``GET /api/v1/whatif``."""
    trace = history_trace(history, labels=labels, level=level)
    return gang_figures(trace, actual=gangs_what_happened(history, trace))

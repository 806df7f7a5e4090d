"""The capacity what-if: the same window replayed on a changed cluster, beside the cluster as
it was, and the fewest GPUs that would have cut its queue by half and by 90 %.

Every figure comes from replays of one policy (the calibrated one: the policy the cluster
ran, ``leastallocated`` unless the caller says otherwise) through
:func:`~gpuscope.analytics.whatif.inputs.run_history`, the same replay the policy what-if
runs for its first seed (arrivals as stored, no jitter), so the baseline here is that
policy's row there:

- :func:`capacity_whatif` replays the window on the cluster as it was (the *baseline*)
  and, given a :class:`~gpuscope.analytics.whatif.capacity_change.Change`, on the changed
  cluster; for each: queued GPU-hours, jobs never started, mean wait per request size class
  (:data:`SIZE_CLASSES`: fractions and MIG instances, 1, 2-4, 5-8, more than 8 GPUs), GPUs
  allocated when arrivals stop and on average over the window;
- with ``search``, :func:`fewest_gpus` answers "how many GPUs would have cleared the
  queue": for each GPU model the cluster has, whole nodes of that model's most common
  shape are added to the cluster as it was (not the changed one: the answer is GPUs to
  add to what ran), their count found by galloping (1, 2, 4, ...
  nodes) then bisecting, each step one replay, until the queued GPU-hours are at most half,
  then a tenth, of the baseline's; the answer is the model needing the fewest GPUs (ties:
  fewer nodes, then the model's name). The replay is not monotone in general (a greedy
  policy may place worse with more room): where the queue rose from one gallop step to
  the next, the counts between them are probed first (:func:`_between`); elsewhere the
  search takes it to be falling, and reports the replayed figures at its answer. A model
  that does not reach the target with as many nodes as GPU pods were ever present at once
  (:func:`peak_pods`: with that many empty nodes every arrival finds one, whatever the
  policy) has no answer (None): a pod no node of that shape fits, or one pinned
  elsewhere.

What it leaves out: the workload is the window's own (more capacity does not bring more
arrivals, nor shorter runs); added nodes cost nothing and are there all window; preemption
and queue order are the replay's (docs/analytics.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from gpuscope.analytics.placement.allocation import EPS
from gpuscope.analytics.whatif.calibration import DEFAULT_POLICY
from gpuscope.analytics.whatif.capacity_change import (
    MAX_ADD,
    AddNodes,
    Change,
    apply_change,
    physical_gpus,
    template_of,
)
from gpuscope.analytics.whatif.events import Inventory, PodEvent
from gpuscope.analytics.whatif.history import History
from gpuscope.analytics.whatif.inputs import run_history
from gpuscope.analytics.whatif.policies import POLICIES
from gpuscope.analytics.whatif.results import PolicyResult
from gpuscope.core.errors import UserError

log = logging.getLogger(__name__)

#: Request size classes the mean wait is given for.
SIZE_CLASSES = ("fraction", "1", "2-4", "5-8", ">8")
#: The cuts of queued GPU-hours the search answers, and their keys.
CUTS = (("fewest_gpus_half", 0.5), ("fewest_gpus_90", 0.9))
#: Replays one search may run at most (a replay of 10,000 GPUs x 7 days takes 30-50 s on
#: 2 cores: bench/capacity.py).
MAX_REPLAYS = 48
#: How close to the least node count the search bisects (a share of the answer): below it
#: the replay's own noise (random ties, a spreading policy's non-monotone queue) is larger
#: than the difference, and replays go to the other models instead. Exact below 100 nodes.
RESOLUTION = 0.02

#: The figures of the replay each answer of the search gives.
ANSWER_FIGURES = ("queued_gpu_hours", "jobs_never_started", "mean_wait_hours_all",
                  "mean_allocated_gpus")  # fmt: skip

#: (history, policy) -> the replay's result (the default: run_history's first seed).
Replayer = Callable[[History, str], PolicyResult]


def size_class(event: PodEvent) -> str | None:
    """The event's size class; None for a pod asking no GPU."""
    t = event.request.task
    if event.request.mig or (t.gpu_count and t.gpu_share < 1.0 - EPS):
        return "fraction"
    if not t.gpu_count:
        return None
    n = t.gpu_count
    return "1" if n == 1 else "2-4" if n <= 4 else "5-8" if n <= 8 else ">8"


def _end(history: History) -> float:
    last = max((e.arrive for e in history.events), default=history.end)
    return max(history.end, last)


def _mean_allocated(result: PolicyResult, start: float, end: float) -> float:
    """GPUs allocated on average over [start, end] (the replay's timeline, time-weighted)."""
    if end <= start:
        return result.allocated_gpus
    total, t_prev, value = 0.0, start, 0.0
    for s in result.timeline:
        t = min(max(s.time, start), end)
        total += value * (t - t_prev)
        t_prev, value = t, s.allocated_gpus
    total += value * (end - t_prev)
    return total / (end - start)


def figures(history: History, result: PolicyResult) -> dict[str, Any]:
    """One replay's capacity figures (module docstring)."""
    end = _end(history)
    starts = {p.key: p.start for p in result.placements}
    classes = {c: {"jobs": 0, "never_started": 0, "wait_s": 0.0} for c in SIZE_CLASSES}
    waited = 0
    for e in history.events:
        cls = size_class(e)
        start = starts.get(e.key)
        wait = max(0.0, (end if start is None else start) - e.arrive)
        waited += wait > 0
        if cls is None:
            continue
        c = classes[cls]
        c["jobs"] += 1
        c["never_started"] += start is None
        c["wait_s"] += wait
    schedulable = [n for n in history.inventory.nodes if n.schedulable]
    return {
        "nodes": len(history.inventory.nodes),
        "gpus": sum(physical_gpus(n) for n in schedulable),
        "capacity_gpus": result.capacity_gpus,
        "queued_gpu_hours": round(result.queued_gpu_hours, 3),
        "jobs_arrived": result.jobs_arrived,
        "jobs_started": result.jobs_started,
        "jobs_never_started": result.jobs_never_started,
        "jobs_waited": waited,
        "allocated_gpus": round(result.allocated_gpus, 3),
        "allocation_ratio": round(result.allocation_ratio, 6),
        "mean_allocated_gpus": round(_mean_allocated(result, history.start, end), 3),
        "mean_wait_hours_all": round(
            sum(c["wait_s"] for c in classes.values())
            / max(1, sum(int(c["jobs"]) for c in classes.values()))
            / 3600,
            4,
        ),
        "mean_wait_hours": {
            cls: {
                "jobs": int(c["jobs"]),
                "never_started": int(c["never_started"]),
                "mean_wait_hours": round(c["wait_s"] / c["jobs"] / 3600, 4) if c["jobs"] else None,
            }
            for cls, c in classes.items()
        },
    }


def changed(history: History, change: Change) -> History:
    """The window on the changed cluster (the same events)."""
    inventory, infos = apply_change(history.inventory, history.node_infos, change)
    return dataclasses.replace(history, inventory=inventory, node_infos=infos)


def first_seed(coverage: float, *, drop: bool = False) -> Replayer:
    """The replay the policy what-if runs for its first seed (module docstring)."""

    def run(history: History, policy: str) -> PolicyResult:
        return run_history(history, [policy], seeds=1, drop=drop, coverage=coverage)[0]

    return run


def _models(inventory: Inventory) -> list[str]:
    """The GPU models of the cluster's schedulable whole-GPU nodes, most GPUs first."""
    gpus: dict[str, int] = {}
    for n in inventory.nodes:
        if n.schedulable and n.gpus and n.gpu_model:
            gpus[n.gpu_model] = gpus.get(n.gpu_model, 0) + len(n.gpus)
    return sorted(gpus, key=lambda m: (-gpus[m], m))


class _OutOfReplays(Exception):
    """The search spent its replays."""


def fewest_gpus(
    history: History,
    policy: str,
    baseline_queued: float,
    replayer: Replayer,
    start: PolicyResult | None = None,
    *,
    max_replays: int = MAX_REPLAYS,
) -> dict[str, Any]:
    """The search (module docstring) on ``history``'s cluster: ``{"fewest_gpus_half": ...,
    "fewest_gpus_90": ..., "search": {...}}``; ``start``: the replay of ``history`` as is,
    where the caller has it. Models are tried most GPUs first; once a cut has an answer of
    G GPUs, another model is tried only up to G GPUs (one replay at that count says whether
    it can do as well). After ``max_replays`` replays the search stops: the answers so far
    stand and ``search.complete`` is false."""
    replays = 0

    def run(h: History) -> PolicyResult:
        nonlocal replays
        if replays >= max_replays:
            raise _OutOfReplays
        replays += 1
        return replayer(h, policy)

    zero = figures(history, start or run(history))
    bound = max(1, min(MAX_ADD, peak_pods(history)))
    per_model: dict[str, dict[str, Any]] = {}
    best: dict[str, dict[str, Any]] = {}
    complete = True
    try:
        for model in _models(history.inventory):
            template = template_of(history.inventory.nodes, model)
            g = len(template.gpus)
            memo: dict[int, dict[str, Any]] = {0: zero}

            def queued(k: int, model: str = model, memo: dict[int, Any] = memo) -> float:
                if k not in memo:
                    grown = changed(history, Change(add=(AddNodes(model, k),)))
                    memo[k] = figures(grown, run(grown))
                    log.info(
                        "capacity search %s +%d nodes: %.1f queued GPU-h",
                        model, k, memo[k]["queued_gpu_hours"],
                    )  # fmt: skip
                value: float = memo[k]["queued_gpu_hours"]
                return value

            answers: dict[str, Any] = per_model.setdefault(model, {})
            lo, unreachable = 0, False
            for key, cut in CUTS:
                target = baseline_queued * (1.0 - cut) + 5e-4  # the figures round to 1e-3
                limit = bound if key not in best else min(bound, best[key]["gpus"] // g)
                k = None
                if unreachable or (limit < bound and (limit <= lo or queued(limit) > target)):
                    limit = -1  # cannot do as well as the answer found, or at all
                if limit >= 0:
                    k = _least(queued, target, limit, lo, RESOLUTION)
                    unreachable = k is None and limit == bound  # a deeper cut will not be
                answers[key] = None if k is None else {
                    "model": model, "nodes": k, "gpus_per_node": g, "gpus": k * g,
                    **{f: memo[k][f] for f in ANSWER_FIGURES},
                }  # fmt: skip
                if k is not None:
                    lo = max(0, k - 1)  # the next, deeper cut needs at least as many
                    order = (k * g, k, model)
                    old = best.get(key)
                    if old is None or order < (old["gpus"], old["nodes"], old["model"]):
                        best[key] = answers[key]
    except _OutOfReplays:
        complete = False
    out: dict[str, Any] = {key: best.get(key) for key, _ in CUTS}
    out["search"] = {
        "policy": policy,
        "targets_gpu_hours": {key: round(baseline_queued * (1.0 - cut), 3) for key, cut in CUTS},
        "max_nodes": bound,
        "models": per_model,
        "replays": replays,
        "resolution": RESOLUTION,
        "complete": complete,
    }
    return out


def peak_pods(history: History) -> int:
    """The most GPU pods present at once if each started on arrival: with that many empty
    nodes added, every arrival finds an empty node (the search's bound)."""
    changes: list[tuple[float, int]] = []
    for e in history.events:
        if size_class(e) is None:
            continue
        changes.append((e.arrive, 1))
        if e.duration is not None:
            changes.append((e.arrive + e.duration, -1))
    peak = present = 0
    for _, d in sorted(changes):  # a departure sorts before an arrival at the same time
        present += d
        peak = max(peak, present)
    return peak


#: The most counts probed between two gallop steps where the queue rose from one to the
#: next (:func:`_between`).
SCAN = 8


def _least(
    queued: Callable[[int], float],
    target: float,
    bound: int,
    lo: int = 0,
    resolution: float = 0.0,
) -> int | None:
    """The fewest nodes k in [lo, bound] with queued(k) <= target: galloping up from ``lo``,
    then bisection (the queue taken as falling with k), down to ``resolution`` of the
    answer: the k returned meets the target and the least one is at most
    ``max(1, resolution * k)`` nodes below it (0: exact). Where the queue *rose* from one
    gallop step to the next (a spreading policy fills the added nodes with small pods),
    it is not falling there, and the counts between the two steps are probed first
    (:func:`_between`): on the demo's week 8 nodes missed the 90 % cut, 16 queued twice as
    much, and 10 met it, which galloping on to 32 and 64 never tried."""
    if queued(lo) <= target:
        return lo
    step, hi, before = 1, min(bound, lo + 1), queued(lo)
    while (value := queued(hi)) > target:
        if value > before and (found := _between(queued, target, lo, hi)) is not None:
            return found
        if hi >= bound:
            return None
        lo, step, before = hi, step * 2, value
        hi = min(bound, hi + step)
    return _bisect(queued, target, lo, hi, resolution)


def _bisect(
    queued: Callable[[int], float], target: float, lo: int, hi: int, resolution: float = 0.0
) -> int:
    """From ``lo`` (over the target) and ``hi`` (meeting it), the count meeting it that
    bisection narrows to, within ``max(1, resolution * hi)`` of the one before it."""
    while hi - lo > max(1, int(hi * resolution)):
        mid = (lo + hi) // 2
        if queued(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def _between(
    queued: Callable[[int], float], target: float, lo: int, hi: int, scan: int = SCAN
) -> int | None:
    """The least count in (lo, hi) found meeting the target: every count when there are at
    most ``scan``, else ``scan`` counts spread evenly, the first that meets it then
    narrowed by bisection from the probe before it; None when none probed does."""
    inside = range(lo + 1, hi)
    if len(inside) <= scan:
        probes = list(inside)
    else:
        probes = sorted({lo + round(i * (hi - lo) / (scan + 1)) for i in range(1, scan + 1)})
    before = lo
    for k in probes:
        if queued(k) <= target:
            return _bisect(queued, target, before, k)
        before = k
    return None


def _difference(base: dict[str, Any], new: dict[str, Any]) -> dict[str, float]:
    keys = ("gpus", "queued_gpu_hours", "jobs_never_started", "allocated_gpus",
            "mean_allocated_gpus")  # fmt: skip
    return {k: round(new[k] - base[k], 3) for k in keys}


def capacity_whatif(
    history: History,
    change: Change,
    policy: str = DEFAULT_POLICY,
    *,
    search: bool = False,
    coverage: float = 0.95,
    replayer: Replayer | None = None,
    max_replays: int = MAX_REPLAYS,
) -> dict[str, Any]:
    """The ``capacity`` object of ``gpuscope whatif --json`` (module docstring);
    ``max_replays``: the search's budget (:func:`fewest_gpus`)."""
    if policy not in POLICIES:
        raise UserError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    replay = replayer or first_seed(coverage)
    base_result = replay(history, policy)
    base = figures(history, base_result)
    out: dict[str, Any] = {"policy": policy, "change": change.as_dict(), "baseline": base}
    if not change.empty:
        target = changed(history, change)
        out["changed"] = figures(target, replay(target, policy))
        out["difference"] = _difference(base, out["changed"])
    if search:
        out.update(
            fewest_gpus(
                history, policy, base_result.queued_gpu_hours, replay, base_result,
                max_replays=max_replays,
            )
        )  # fmt: skip
    log.info(
        "capacity whatif policy=%s change=%s queued %.1f GPU-h baseline",
        policy, change.as_dict(), base_result.queued_gpu_hours,
    )  # fmt: skip
    return out


def gpus_line(answer: dict[str, Any] | None, cut: str, baseline: float) -> str:
    """One sentence for an answer of the search."""
    if not baseline:
        return f"Nothing queued in the baseline: no GPU to add for {cut}."
    if answer is None:
        return f"No single GPU model's nodes cut queued GPU-hours by {cut} in this replay."
    if not answer["nodes"]:
        return f"The changed cluster already cuts queued GPU-hours by {cut}."
    return (
        f"{answer['gpus']} more {answer['model']} GPUs ({answer['nodes']} node"
        f"{'s' if answer['nodes'] != 1 else ''} of {answer['gpus_per_node']}) would have cut "
        f"queued GPU-hours by {cut} ({baseline:,.1f} -> {answer['queued_gpu_hours']:,.1f})."
    )

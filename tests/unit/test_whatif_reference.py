"""The calibrated replay against an event-driven reference scheduler (issue 35).

What was seen: on the demo's week the replay of the very policy the cluster ran was 18.6 %
of capacity away from what happened, hour by hour. Here a reference written in this file
from kube-scheduler's source, sharing no code with the product, generates random weeks:

- ``NodeResourcesFit`` with the ``LeastAllocated`` strategy over cpu, memory and
  ``nvidia.com/gpu`` (weight 1 each): per resource ``(capacity - requested) * 100 /
  capacity`` in integers with the pod counted in (0 past capacity), their weighted mean
  (``least_allocated.go``);
- the scheduling queue's order, ``PrioritySort``: higher priority first, then the earlier
  creation; a pod that fits nowhere waits, and every pod deletion moves the waiting pods
  back to be tried again in that order (``scheduling_queue.go``); no pod preempts here
  (``preemptionPolicy: Never``);
- the device plugin's GPUs: the lowest-indexed free ones; a shared GPU's slice on the
  fullest GPU it fits (the GPU-sharing model the product replays).

Node ties go to the first node in name order on both sides (the product's ``ties="first"``),
so that two correct schedulers make the same choices. Each week is written to a DuckDB store
as the collector writes the inventory (a snapshot at every change), read back with
``read_history`` and replayed; every calibration figure must agree within 1 %.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuscope.analytics.whatif.calibration import calibration
from gpuscope.analytics.whatif.engine import replay
from gpuscope.analytics.whatif.history import read_history, what_happened
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.collector.storage.store import Store

HOUR = 3600.0
DAY = 24 * HOUR
T0 = datetime(2025, 3, 3, tzinfo=UTC)  # a Monday: the replayed week is [T0, T0 + 7 days)
CPU, MEMORY, GPUS, MILLI = 128_000, 2_000_000, 8, 1000


@dataclass
class RefNode:
    name: str
    free: list[int] = field(default_factory=lambda: [MILLI] * GPUS)
    cpu: int = 0
    memory: int = 0


@dataclass
class RefPod:
    name: str
    gpus: int  # whole GPUs, or 1 with share < MILLI
    share: int
    cpu: int
    memory: int
    created: float
    run: float
    priority: int
    group: str = ""
    node: str | None = None
    taken: list[int] = field(default_factory=list)
    start: float | None = None
    end: float | None = None


def _fits(node: RefNode, pod: RefPod) -> bool:
    if node.cpu + pod.cpu > CPU or node.memory + pod.memory > MEMORY:
        return False
    return sum(1 for f in node.free if f >= pod.share) >= pod.gpus


def _least_allocated(node: RefNode, pod: RefPod) -> int:
    scores = []
    gpu_used = GPUS * MILLI - sum(node.free)
    for capacity, requested in (
        (CPU, node.cpu + pod.cpu),
        (MEMORY, node.memory + pod.memory),
        (GPUS * MILLI, gpu_used + pod.gpus * pod.share),
    ):
        scores.append(0 if requested > capacity else (capacity - requested) * 100 // capacity)
    return sum(scores) // len(scores)


def _bind(node: RefNode, pod: RefPod, now: float) -> None:
    if pod.share == MILLI:
        pod.taken = [i for i, f in enumerate(node.free) if f == MILLI][: pod.gpus]
    else:
        room = [i for i, f in enumerate(node.free) if f >= pod.share]
        pod.taken = [min(room, key=lambda i: (node.free[i], i))]
    for i in pod.taken:
        node.free[i] -= pod.share
    node.cpu += pod.cpu
    node.memory += pod.memory
    pod.node, pod.start, pod.end = node.name, now, now + pod.run


def _unbind(node: RefNode, pod: RefPod) -> None:
    for i in pod.taken:
        node.free[i] += pod.share
    node.cpu -= pod.cpu
    node.memory -= pod.memory


def schedule(nodes: list[RefNode], pods: list[RefPod], until: float) -> None:
    """kube-scheduler over the pods' arrivals and departures (module docstring)."""
    by_name = {n.name: n for n in nodes}
    waiting: list[RefPod] = []
    arrivals = sorted(pods, key=lambda p: (p.created, p.name))
    running: list[RefPod] = []

    def try_place(pod: RefPod, now: float) -> bool:
        best: tuple[int, int] | None = None
        for i, node in enumerate(nodes):
            if _fits(node, pod):
                score = _least_allocated(node, pod)
                if best is None or score > best[0]:
                    best = (score, i)
        if best is None:
            return False
        _bind(nodes[best[1]], pod, now)
        running.append(pod)
        return True

    while arrivals or running:
        next_end = min((p.end for p in running if p.end is not None), default=float("inf"))
        next_arrival = arrivals[0].created if arrivals else float("inf")
        now = min(next_end, next_arrival)
        if now >= until:
            break
        if next_end <= next_arrival:
            for pod in [p for p in running if p.end == now]:
                running.remove(pod)
                _unbind(by_name[pod.node or ""], pod)
            waiting.sort(key=lambda p: (-p.priority, p.created, p.name))
            for pod in list(waiting):
                if try_place(pod, now):
                    waiting.remove(pod)
        else:
            pod = arrivals.pop(0)
            if not try_place(pod, now):
                waiting.append(pod)
    for pod in pods:  # what still runs at the end was still running
        if pod.end is not None and pod.end >= until:
            pod.end = None


def random_week(seed: int) -> tuple[list[RefNode], list[RefPod]]:
    """A week of arrivals (with two days before it) on 3-4 nodes: 1-8 GPU jobs, slices of
    a GPU, 2-pod 8-GPU jobs, two priorities, runs from minutes to days."""
    rng = random.Random(seed)
    nodes = [RefNode(f"node-{i:02d}") for i in range(rng.randint(3, 4))]
    start = T0.timestamp() - 2 * DAY
    pods: list[RefPod] = []
    t, n = start, 0
    rate = len(nodes) * GPUS * rng.uniform(0.8, 1.3) / (10 * HOUR)  # GPUs asked an hour
    while t < T0.timestamp() + 7 * DAY:
        size = rng.choices([1, 2, 4, 8, 0, 16], weights=[50, 8, 6, 5, 25, 2])[0]
        run = min(3 * DAY, max(600.0, rng.lognormvariate(9.5, 1.3)))
        priority = rng.choice([0, 0, 0, 100])
        t += rng.expovariate(rate / max(1, size or 1))
        created = float(round(t))
        if size == 16:  # a multi-node job: two 8-GPU pods of one group
            for r in range(2):
                pods.append(RefPod(f"mn-{n:04d}-{r}", 8, MILLI, 100_000, 800_000, created,
                                   run, priority, group=f"mn-{n:04d}"))  # fmt: skip
        elif size == 0:
            share = rng.choice([250, 500, 750])
            pods.append(RefPod(f"frac-{n:04d}", 1, share, 4_000, 50_000, created, run,
                               priority))  # fmt: skip
        else:
            pods.append(RefPod(f"job-{n:04d}", size, MILLI, 12_000 * size, 100_000 * size,
                               created, run, priority))  # fmt: skip
        n += 1
    return nodes, pods


def _pod_info(pod: RefPod, at: float) -> PodInfo:
    running = pod.start is not None and pod.start <= at
    return PodInfo(
        namespace="team",
        name=pod.name,
        uid=pod.name,
        node=pod.node if running else None,
        phase="Running" if running else "Pending",
        start_time=pod.start if running else pod.created,
        owner_kind="Job",
        owner_name=pod.group or pod.name,
        priority=pod.priority,
        gpu_request=pod.gpus if pod.share == MILLI else 0,
        gpu_fraction=None if pod.share == MILLI else pod.share / MILLI,
        cpu_milli=pod.cpu,
        memory_mib=pod.memory,
        labels={"kueue.x-k8s.io/pod-group-name": pod.group} if pod.group else {},
        preempts=False,
    )


def write_week(db: Path, nodes: list[RefNode], pods: list[RefPod]) -> None:
    """The reference's week as the collector stores the inventory: a snapshot at the
    week's start, then one at every arrival, start and end inside it."""
    end = T0.timestamp() + 7 * DAY
    infos = [NodeInfo(name=n.name, allocatable_gpus=GPUS, cpu_milli=CPU, memory_mib=MEMORY)
             for n in nodes]  # fmt: skip
    instants = {T0.timestamp()}
    for p in pods:
        for x in (p.created, p.start, p.end):
            if x is not None and T0.timestamp() < x < end:
                instants.add(x)
    store = Store.open(db)
    try:
        for i, at in enumerate(sorted(instants)):
            listed = [
                _pod_info(p, at) for p in pods if p.created <= at and (p.end is None or at < p.end)
            ]
            when = datetime.fromtimestamp(at, UTC)
            store.record_inventory(when, nodes=infos if i == 0 else None, pods=listed)
    finally:
        store.close()


@pytest.mark.parametrize("seed", range(4))
def test_random_weeks_of_the_reference_are_replayed_within_one_percent(
    seed: int, tmp_path: Path
) -> None:
    nodes, pods = random_week(seed)
    schedule(nodes, pods, T0.timestamp() + 7 * DAY)
    db = tmp_path / "week.duckdb"
    write_week(db, nodes, pods)
    store = Store.open(db, read_only=True)
    try:
        cur = store.cursor()
        week = (T0.replace(tzinfo=None), (T0 + timedelta(days=7)).replace(tzinfo=None))
        history = read_history(cur, *week)
        cur.close()
    finally:
        store.close()
    result = replay(history.inventory, history.events, "leastallocated", ties="first",
                    until=history.end)  # fmt: skip
    actual = what_happened(history, max(e.arrive for e in history.events))
    cal = calibration(history, result, actual)
    capacity = len(nodes) * GPUS
    assert cal["queued_gpu_hours_real"] > 0 and cal["jobs_started_real"] > 100, cal  # a full week
    assert cal["hourly_allocation_mae_share"] <= 0.01, cal
    assert abs(cal["allocated_at_stop_error_share"]) <= 0.01, cal
    assert abs(cal["jobs_started_error"]) <= 0.01 * cal["jobs_started_real"], cal
    assert abs(cal["queued_gpu_hours"] - cal["queued_gpu_hours_real"]) <= max(
        0.01 * cal["queued_gpu_hours_real"], 0.01 * capacity
    ), cal
    assert cal["multi_node_jobs_started"] == cal["multi_node_jobs_started_real"], cal

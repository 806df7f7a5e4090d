"""The demo history's readings over a run of times at once: the same frames as
:func:`gpuscope.demo.readings.frames`, value for value, at a fraction of the cost.

The simulator's readings are closed-form functions of the placement and the time
(gpuscope/sim/cluster.py, gpuscope/sim/behaviour.py). Between two changes of a node's pods
(a pod starting or ending, a removal, a lost GPU: an *epoch*) the node's series are the same
ones, and only the busy levels, the noise and the IB counters move. So for each node and
each epoch within a run of times:

- the series (names, labels, order) and the values that stay put over the epoch
  (``_info``, ``_up``, memory, the port rate) are the simulator's own reading at the
  epoch's first time, through the agent's catalogue mapping
  (:func:`~gpuscope.demo.readings.kept_items`);
- the values that move (utilization, memory and SM/tensor ratios, power, temperature, each
  container's utilization, the IB transmit, receive and wait counters) are computed for
  every time of the epoch with numpy, by the simulator's formulas in its order of
  floating-point operations (the trigonometric terms with :mod:`math`, Python's ``round``
  for the rounded gauges), so they are the same doubles.

Each epoch's computed values are checked against the simulator's reading at its first time;
an epoch where any differs is read from the simulator time by time (never seen in the demo;
the check makes a formula drifting from the simulator's a slower run, not a wrong history).
tests/unit/test_demo_readings.py finds the frames equal to those of
:func:`~gpuscope.demo.readings.frames` for the demo's scenario (MIG, DRA, shared GPUs) over
days.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Generator, Sequence

import numpy as np

from gpuscope.demo.readings import Layouts, NodeFrame, kept_items
from gpuscope.sim import SimulatedCluster
from gpuscope.sim.behaviour import BUCKET_SECONDS, stable_id
from gpuscope.sim.behaviour_arrays import buckets, level, mean_level_integral, noise
from gpuscope.sim.cluster import BOOT_BEFORE_ORIGIN, Assignment, SimPod
from gpuscope.sim.scenario import DAY, GPU_MODELS

__all__ = ["RUN", "fast_frames"]

#: Times computed at once per node (the demo writes 72 cycles a transaction).
RUN = 72
Key = tuple[str, tuple[str, ...]]


def fast_frames(
    cluster: SimulatedCluster, nodes: Sequence[str], times: Sequence[float], run: int = RUN
) -> Generator[list[NodeFrame], None, None]:
    """Each time's frame, one :data:`NodeFrame` per node in ``nodes`` order; ``times`` are
    the scenario's own (seconds since its origin)."""
    layouts = Layouts()
    bounds = {node: _boundaries(cluster, node) for node in nodes}
    for r0 in range(0, len(times), run):
        ts = list(times[r0 : r0 + run])
        per_node = [_node_run(cluster, node, ts, bounds[node], layouts) for node in nodes]
        for j in range(len(ts)):
            yield [frames[j] for frames in per_node]


def _boundaries(cluster: SimulatedCluster, node: str) -> list[float]:
    """The times at which the node's series or the formulas' terms may change."""
    out: set[float] = set()
    for s, e, pod in cluster._spans.get(node, ()):
        out.add(s)
        out.add(e)
        removed = cluster._removed.get(pod.uid)
        if removed is not None:
            out.add(removed)
    out.update(f.at for f in cluster.scenario.faults if f.node == node)
    return sorted(x for x in out if math.isfinite(x))


def _node_run(
    cluster: SimulatedCluster,
    node: str,
    ts: list[float],
    bounds: list[float],
    layouts: Layouts,
) -> list[NodeFrame]:
    epochs = [bisect.bisect_right(bounds, t) for t in ts]
    out: list[NodeFrame] = []
    a = 0
    while a < len(ts):
        b = a
        while b < len(ts) and epochs[b] == epochs[a]:
            b += 1
        items = list(kept_items(cluster, node, ts[a]))
        layout, new = layouts.place(node, [(name, labels) for name, labels, _ in items])
        moving = _moving(cluster, node, ts[a], np.array(ts[a:b]))
        columns: list[list[float]] = []
        for name, labels, value in items:
            col = moving.get((name, tuple(labels)))
            columns.append([value] * (b - a) if col is None else col)
        if all(col[0] == v for col, (*_, v) in zip(columns, items, strict=True)):
            rows = [list(row) for row in zip(*columns, strict=True)]
        else:  # the simulator's own readings, time by time
            rows = [[v for *_, v in kept_items(cluster, node, t)] for t in ts[a:b]]
        out.append((layout, new, rows[0]))
        out += [(layout, None, row) for row in rows[1:]]
        a = b
    return out


def _moving(
    cluster: SimulatedCluster, node: str, t0: float, t: np.ndarray
) -> dict[Key, list[float]]:
    """The values that move over an epoch (its times ``t``, the first ``t0``), by
    (family, label values): what ``gpu_readings``, ``gpu_workloads`` and ``ib_readings``
    give there."""
    spec = cluster.node(node)
    model = GPU_MODELS[spec.gpu_model]
    pods = cluster.pods_on(node, t0)
    instances = cluster.mig_instances(spec)
    lost = {
        f.device_index
        for f in cluster.scenario.faults
        if f.kind == "gpu_lost" and f.node == node and t0 >= f.at
    }
    diurnal = np.array([0.6 + 0.4 * math.sin(2 * math.pi * x / DAY) for x in t.tolist()])
    out: dict[Key, list[float]] = {}
    # the busy level of each (pod, assignment) on each GPU (a level's key is per GPU index)
    procs: dict[tuple[int, str], list[tuple[int, np.ndarray]]] = {}
    for i in range(spec.gpus):
        if i in lost:
            continue
        on_gpu: list[tuple[SimPod, Assignment, np.ndarray]] = [
            (p, a, level(p.workload, p.key ^ i, p.start, t, diurnal) * a.share)
            for p in pods
            for a in p.assignments
            if a.gpu_index == i
        ]
        uuid_ = cluster.gpu_uuid(node, i)
        idle_w = model.idle_watts / (len(instances) or 1)
        span_w = (model.max_watts - model.idle_watts) / (len(instances) or 1)
        util = _gpu(out, [node, str(i), uuid_, ""], on_gpu, t, bool(instances))
        procs[(i, "")] = [(1000 + (p.key ^ i) % 4_000_000, lv) for p, _, lv in on_gpu]
        g = noise(np.full(t.shape, stable_id(uuid_), np.uint64), buckets(t, BUCKET_SECONDS))
        labels = (node, str(i), uuid_, "")
        out["gpuscope_gpu_power_watts", labels] = _round(idle_w + span_w * util + g * 3, 2)
        out["gpuscope_gpu_temperature_celsius", labels] = _round(31 + 44 * util + g, 1)
        for inst in instances:
            on_inst = [x for x in on_gpu if x[1].mig_instance == inst]
            uuid_i = cluster.gpu_uuid(node, i, inst)
            _gpu(out, [node, str(i), uuid_i, inst], on_inst, t, False)
            procs[(i, inst)] = [(1000 + (p.key ^ i) % 4_000_000, lv) for p, _, lv in on_inst]
    for p in pods:
        for a in p.assignments:
            held = procs.get((a.gpu_index, a.mig_instance))
            pid = 1000 + (p.key ^ a.gpu_index) % 4_000_000
            lv = next((lv for q, lv in held or () if q == pid), None)
            if lv is None:
                continue
            uuid_ = cluster.gpu_uuid(node, a.gpu_index, a.mig_instance)
            held_by = (node, str(a.gpu_index), uuid_, a.mig_instance, p.namespace, p.name,
                       p.container)  # fmt: skip
            out["gpuscope_gpu_workload_utilization_ratio", held_by] = np.minimum(1.0, lv).tolist()
    _ib(cluster, node, t0, t, out)
    return out


def _gpu(
    out: dict[Key, list[float]],
    labels: list[str],
    on_gpu: list[tuple[SimPod, Assignment, np.ndarray]],
    t: np.ndarray,
    mig_parent: bool,
) -> np.ndarray:
    """The GPU's (or MIG instance's) utilization over ``t`` and its ratios into ``out``."""
    util = np.zeros(t.shape)
    for *_, lv in on_gpu:
        util = util + lv
    util = np.minimum(1.0, util)
    if not mig_parent:
        key = tuple(labels)
        out["gpuscope_gpu_utilization_ratio", key] = _round(util, 4)
        out["gpuscope_gpu_memory_utilization_ratio", key] = _round(util * 0.55, 4)
        out["gpuscope_gpu_sm_active_ratio", key] = _round(util * 0.82, 4)
        out["gpuscope_gpu_tensor_active_ratio", key] = _round(util * 0.45, 4)
    return util


def _ib(
    cluster: SimulatedCluster, node: str, t0: float, t: np.ndarray, out: dict[Key, list[float]]
) -> None:
    """The ports' transmit, receive and wait counters over ``t`` (``ib_readings``)."""
    spec = cluster.node(node)
    rate = spec.ib_rate_gbps * 1e9 / 8
    base = (t + BOOT_BEFORE_ORIGIN) * 2e5
    for port in range(spec.ib_ports):
        sent = np.zeros(t.shape)
        wait = np.zeros(t.shape)
        for start, _, pod in cluster._spans.get(node, ()):
            w = pod.workload
            if start > t0 or w.ib_load <= 0:
                continue
            if not any(a.gpu_index == port for a in pod.assignments):
                continue
            end = cluster._end(pod)
            stop = t if end is None else np.minimum(t, end)
            cos = np.array([math.cos(2 * math.pi * x / DAY) for x in stop.tolist()])
            frac = mean_level_integral(w, pod.start, pod.start, stop, cos)
            frac = frac / max(w.utilization, 1e-9)
            sent = sent + w.ib_load * rate * frac
            wait = wait + max(0.0, w.ib_load - 0.9) * 2e8 * (stop - pod.start)
        labels = (node, f"mlx5_{port}", "1")
        out["gpuscope_ib_transmit_bytes", labels] = (np.floor(base + sent) // 4 * 4).tolist()
        out["gpuscope_ib_receive_bytes", labels] = (
            np.floor(base * 1.1 + sent * 0.98) // 4 * 4
        ).tolist()
        out["gpuscope_ib_transmit_wait", labels] = np.floor(wait).tolist()


def _round(x: np.ndarray, digits: int) -> list[float]:
    """Python's ``round`` of each value (correctly rounded, as the simulator's readings)."""
    return [round(v, digits) for v in x.tolist()]

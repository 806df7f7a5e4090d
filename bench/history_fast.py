"""The simulator's readings of the analysed families, vectorised over time (bench/history.py).

Building 10,000 GPUs x 7 days through ``CycleMaker`` and ``Store.append_cycle`` costs about
8 hours on 2 cores (366 us of simulator and 230 us of ingest per node per 15 s cycle). The
simulator's readings are closed-form functions of the placement and the time
(gpuscope/sim/cluster.py, gpuscope/sim/behaviour.py), so the values of the series the
benchmarked analytics read can be computed for every instant of a span at once, with numpy,
by the same formulas in the same order of floating-point operations:

- per GPU: ``gpuscope_gpu_utilization_ratio``, ``_memory_utilization_ratio``,
  ``_sm_active_ratio`` (the busy signals of idle detection and the report);
- per pod and GPU: ``gpuscope_gpu_workload_utilization_ratio`` (shared GPUs' fractions),
  and the ``workload_intervals`` rows the store derives from ``gpuscope_gpu_workload_info``;
- per IB port: ``gpuscope_ib_transmit_bytes_total``, ``_receive_bytes_total``,
  ``_transmit_wait_total``, ``gpuscope_ib_port_rate_bytes_per_second`` (the bandwidth
  detector's and the report's input). The IB error counters (``gpuscope_ib_errors_total``,
  read by the scheduled bandwidth run's last window only) are left out of the vectorised
  span: they would be 5 of its 13 series a port, 38 % of its rows.

Counters are turned into what the store keeps by the store's own rule
(:func:`gpuscope.collector.storage.increases.counter_increases`: the increase since the
previous sample, 0 for a series' first), and the series rows get the
``first_seen``/``last_seen``/``last_raw`` the ingest path would leave.
tests/unit/test_bench_history_fast.py builds a small history both ways and finds every
sample, roll-up row, series and interval of these families equal.

A scenario this module does not reproduce (MIG, lost GPUs) is refused, never approximated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.collector.storage.increases import counter_increases
from gpuscope.collector.storage.store import Store
from gpuscope.collector.storage.store_sql import INTERVAL_TOUCH_S, Q
from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.records import WorkloadKind
from gpuscope.sim import SimulatedCluster
from gpuscope.sim.behaviour_arrays import diurnal_numpy, level, mean_level_integral
from gpuscope.sim.cluster import BOOT_BEFORE_ORIGIN, SimPod
from gpuscope.sim.scenario import DAY

GPU_GAUGES = (
    "gpuscope_gpu_utilization_ratio",
    "gpuscope_gpu_memory_utilization_ratio",
    "gpuscope_gpu_sm_active_ratio",
)
WORKLOAD_UTIL = "gpuscope_gpu_workload_utilization_ratio"
IB_METRICS = (
    "gpuscope_ib_transmit_bytes_total",
    "gpuscope_ib_receive_bytes_total",
    "gpuscope_ib_transmit_wait_total",
    "gpuscope_ib_port_rate_bytes_per_second",
)
#: cycles written at once (3 hours at 15 s; ~1.5 GB of arrays at 10,000 GPUs)
CHUNK_CYCLES = 720
#: the sample names whose rows this module writes (the rest of the store's families are
#: left out of the vectorised span: see bench/history.py)
GENERATED = (*GPU_GAUGES, WORKLOAD_UTIL, *IB_METRICS)


def _round4(x: np.ndarray) -> np.ndarray:
    """Python's ``round(x, 4)``: the double nearest the decimal rounded to 4 places."""
    return np.round(x * 1e4) / 1e4


@dataclass(frozen=True)
class Span:
    """One (pod, GPU) holding on a node: alive over the cycle indices [lo, hi)."""

    pod: SimPod
    gpu: int
    share: float
    lo: int
    hi: int


def check_supported(cluster: SimulatedCluster) -> None:
    """Refuse a scenario whose readings this module does not compute."""
    for node in cluster.scenario.nodes:
        if node.mig_profile:
            raise ValueError(f"vectorised history: MIG node {node.name} not supported")
    if any(f.kind == "gpu_lost" for f in cluster.scenario.faults):
        raise ValueError("vectorised history: gpu_lost faults not supported")
    if cluster._removed:
        raise ValueError("vectorised history: removed pods not supported")


def spans(cluster: SimulatedCluster, node: str, t: np.ndarray) -> list[Span]:
    """Every (pod, assignment) on ``node`` alive at some time of ``t``, in the simulator's
    order (``pods_on``, then the pod's assignments): the order its sums are taken in."""
    out = []
    for s, e, pod in cluster._spans.get(node, ()):
        lo = int(np.searchsorted(t, s, "left"))
        hi = int(np.searchsorted(t, e, "left"))
        if lo < hi:
            out += [Span(pod, a.gpu_index, a.share, lo, hi) for a in pod.assignments]
    return out


def gpu_values(
    cluster: SimulatedCluster, node: str, t: np.ndarray, held: list[Span]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(utilization, memory utilization, sm active) per GPU as a (3, gpus, len(t)) array,
    and each span's ``workload_utilization_ratio`` over its cycles."""
    gpus = cluster.node(node).gpus
    util = np.zeros((gpus, len(t)))
    per_span: list[np.ndarray] = []
    for sp in held:
        tt = t[sp.lo : sp.hi]
        lv = level(sp.pod.workload, sp.pod.key ^ sp.gpu, sp.pod.start, tt, diurnal_numpy(tt))
        lv = lv * sp.share
        util[sp.gpu, sp.lo : sp.hi] += lv
        per_span.append(np.minimum(1.0, lv))
    util = np.minimum(1.0, util)
    return np.stack([_round4(util), _round4(util * 0.55), _round4(util * 0.82)]), per_span


def ib_values(
    cluster: SimulatedCluster,
    node: str,
    t: np.ndarray,
    ib_pods: dict[int, list[tuple[float, SimPod]]],
) -> np.ndarray:
    """Per port, shape (4, ports, len(t)): transmit, receive, wait (raw counter values) and
    the link rate gauge. ``ib_pods`` are,
    per port, the pods with IB load holding its GPU, in the simulator's span order."""
    spec = cluster.node(node)
    rate = spec.ib_rate_gbps * 1e9 / 8
    base = (t + BOOT_BEFORE_ORIGIN) * 2e5
    out = np.zeros((4, spec.ib_ports, len(t)))
    for port in range(spec.ib_ports):
        sent = np.zeros(len(t))
        wait = np.zeros(len(t))
        for start, pod in ib_pods.get(port, ()):
            w = pod.workload
            on = t >= start
            if not on.any():
                continue
            stop = t if pod.end is None else np.minimum(t, pod.end)
            cos = np.cos(2 * math.pi * stop / DAY)
            frac = mean_level_integral(w, pod.start, pod.start, stop, cos)
            frac = frac / max(w.utilization, 1e-9)
            sent = sent + np.where(on, w.ib_load * rate * frac, 0.0)
            wait = wait + np.where(on, max(0.0, w.ib_load - 0.9) * 2e8 * (stop - pod.start), 0.0)
        out[0, port] = np.floor(base + sent) // 4 * 4
        out[1, port] = np.floor(base * 1.1 + sent * 0.98) // 4 * 4
        out[2, port] = np.floor(wait)
        out[3, port] = rate
    return out


SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def _key(sample_name: str, names: tuple[str, ...], values: list[str]) -> SeriesKey:
    """The store's key of a series, as bench.history.CycleMaker makes it from the spec."""
    return sample_name, tuple(sorted(zip(names, values, strict=True)))


def _spec_labels(name: str) -> tuple[str, ...]:
    family = name.removesuffix("_total")
    return next(tuple(m.labels) for m in AGENT_METRICS if m.name == family)


def _when(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC).replace(tzinfo=None)


class SpanWriter:
    """Writes ``[start, end)`` of the analysed families' samples, series and workload
    intervals into a store, chunk by chunk, with the store's own maintenance
    (``apply_retention``: roll-ups, compaction) after each chunk."""

    def __init__(self, store: Store, cluster: SimulatedCluster, origin: float, start: float,
                 end: float, step: int, chunk_cycles: int | None = None) -> None:  # fmt: skip
        check_supported(cluster)
        self.store, self.cluster, self.step = store, cluster, step
        self.t = np.arange(start, end, step, dtype=np.float64)  # Unix seconds, stored
        self.st = self.t - origin  # the simulator's time, as CycleMaker.cycle computes it
        self.chunk = chunk_cycles or CHUNK_CYCLES
        self.ids: dict[SeriesKey, int] = {}
        self.kinds: dict[SeriesKey, str] = {}
        self.next_id = self.registered = store._next_id
        #: per series id: first and last cycle index, last raw value (a counter's total)
        self.seen: dict[int, list[float]] = {}
        self.prev: dict[int, float] = {}  # a counter's last raw value, across chunks
        self.labels = {n: _spec_labels(n) for n in GENERATED}
        self.held = {n: spans(cluster, n, self.st) for n in cluster.node_names}
        self.ib_pods = {n: self._ib_pods(n) for n in cluster.node_names}
        self.rows = 0

    def _ib_pods(self, node: str) -> dict[int, list[tuple[float, SimPod]]]:
        out: dict[int, list[tuple[float, SimPod]]] = {}
        for start, _, pod in self.cluster._spans.get(node, ()):
            if pod.workload.ib_load > 0:
                for port in sorted({a.gpu_index for a in pod.assignments}):
                    out.setdefault(port, []).append((start, pod))
        return out

    def sid(self, name: str, values: list[str], kind: str) -> int:
        key = _key(name, self.labels[name], values)
        got = self.ids.get(key)
        if got is None:
            got = self.ids[key] = self.next_id
            self.next_id += 1
            self.kinds[key] = kind
        return got

    def _counter(self, sid: int, raw: np.ndarray) -> np.ndarray:
        """The increases the store keeps for a counter's raw values (append_samples)."""
        prev = np.empty_like(raw)
        prev[1:] = raw[:-1]
        prev[0] = self.prev.get(sid, np.nan)
        self.prev[sid] = float(raw[-1])
        return counter_increases(raw, prev)

    def _node_chunk(
        self, node: str, c0: int, c1: int, out: list[tuple[int, int, np.ndarray]]
    ) -> None:
        """Append (series id, first cycle index, values) of ``node`` over cycles [c0, c1)."""
        t, c = self.st[c0:c1], self.cluster
        here = [
            Span(s.pod, s.gpu, s.share, max(s.lo, c0) - c0, min(s.hi, c1) - c0)
            for s in self.held[node]
            if s.lo < c1 and c0 < s.hi
        ]
        gauges, per_span = gpu_values(c, node, t, here)
        for i in range(c.node(node).gpus):
            labels = [node, str(i), c.gpu_uuid(node, i), ""]
            for k, name in enumerate(GPU_GAUGES):
                out.append((self.sid(name, labels, "gauge"), c0, gauges[k, i]))
        for sp, values in zip(here, per_span, strict=True):
            p = sp.pod
            labels = [node, str(sp.gpu), c.gpu_uuid(node, sp.gpu), "", p.namespace, p.name,
                      p.container]  # fmt: skip
            out.append((self.sid(WORKLOAD_UTIL, labels, "gauge"), c0 + sp.lo, values))
        ib = ib_values(c, node, t, self.ib_pods[node])
        for port in range(ib.shape[1]):
            labels = [node, f"mlx5_{port}", "1"]
            for k, name in enumerate(IB_METRICS):
                if name.endswith("per_second"):
                    out.append((self.sid(name, labels, "gauge"), c0, ib[k, port]))
                else:
                    sid = self.sid(name, labels, "counter")
                    out.append((sid, c0, self._counter(sid, ib[k, port])))

    def write(self) -> None:
        """Every chunk: series and samples in, then the store's own ``apply_retention`` at
        the chunk's end; then the series' times and the workload intervals."""
        for c0 in range(0, len(self.t), self.chunk):
            c1 = min(len(self.t), c0 + self.chunk)
            parts: list[tuple[int, int, np.ndarray]] = []
            for node in self.cluster.node_names:
                self._node_chunk(node, c0, c1, parts)
            self._register()
            for s, i, v in parts:
                seen = self.seen.setdefault(s, [i, 0, 0.0])
                seen[1], seen[2] = i + len(v) - 1, self.prev.get(s, float(v[-1]))
            sids = np.concatenate([np.full(len(v), s, np.uint32) for s, _, v in parts])
            ts = np.concatenate([self.t[i : i + len(v)] for _, i, v in parts])
            values = np.concatenate([v for _, _, v in parts])
            del parts
            table = pa.table(
                [pa.array(sids, pa.uint32()), pa.array(ts.astype(np.int64).astype("datetime64[s]")),
                 pa.array(values, pa.float64())],
                names=["series_id", "ts", "value"],
            )  # fmt: skip
            del sids, ts, values
            with self.store._transaction(fast_batch=table) as con:
                con.execute("INSERT INTO samples SELECT series_id, ts, value FROM fast_batch")
            self.rows += table.num_rows
            del table
            self.store.apply_retention(
                datetime.fromtimestamp(float(self.t[c1 - 1]) + self.step, UTC)
            )
        self._finish()

    def _register(self) -> None:
        """New series into ``series`` as insert_series writes them (times set at the end)."""
        new = {k: v for k, v in self.ids.items() if v >= self.registered}
        if not new:
            return
        table = self.store._series_table(new, self.kinds)
        with self.store._transaction(new_series=table) as con:
            con.execute(Q["insert_series"], {"ts": _when(float(self.t[0]))})
        self.registered = self.next_id
        self.store._next_id = self.next_id
        self.store._ids.update(new)

    def _finish(self) -> None:
        """first_seen, last_seen, last_raw as the ingest path leaves them, and the
        workload intervals it derives from gpuscope_gpu_workload_info's presence."""
        sids = list(self.seen)
        t = self.t
        times = pa.table({
            "series_id": pa.array(sids, pa.uint32()),
            "first_seen": pa.array([_when(float(t[int(self.seen[s][0])])) for s in sids]),
            "last_seen": pa.array([_when(float(t[int(self.seen[s][1])])) for s in sids]),
            "last_raw": pa.array([self.seen[s][2] for s in sids], pa.float64()),
        })  # fmt: skip
        rows: dict[str, list[object]] = {k: [] for k in (
            "namespace", "pod", "container", "node", "gpu", "gpu_uuid", "kind", "project",
            "interactive", "target", "start_ts", "last_seen", "end_ts")}  # fmt: skip
        n = len(t)
        # the ingest path touches a target's open intervals once a minute of sample time,
        # at the first cycle of the minute: the cycle index of that touch, per cycle
        minutes = np.floor_divide(np.asarray(t, dtype=np.float64), INTERVAL_TOUCH_S)
        new_minute = np.concatenate(([True], minutes[1:] != minutes[:-1]))
        first_of_minute = np.maximum.accumulate(np.where(new_minute, np.arange(n), 0))
        for node, held in self.held.items():
            lo = np.array([s.lo for s in held])
            hi = np.array([s.hi for s in held])
            for s in held:
                kind = s.pod.workload.kind
                closed = s.hi < n
                # the cycle that closes it touches every open interval of the target
                # first, this one too, when another stays present across that cycle
                touched = (
                    closed
                    and bool(new_minute[s.hi])
                    and bool(np.any((lo <= s.hi - 1) & (hi > s.hi)))
                )
                last = s.hi if touched else max(s.lo, int(first_of_minute[s.hi - 1]))
                values = (s.pod.namespace, s.pod.name, s.pod.container, node, str(s.gpu),
                          self.cluster.gpu_uuid(node, s.gpu), WorkloadKind(kind).value,
                          s.pod.workload.project_name, kind == "interactive",
                          f"http://{node}:9400/metrics", _when(float(t[s.lo])),
                          _when(float(t[last])),
                          _when(float(t[s.hi])) if closed else None)  # fmt: skip
                for k, v in zip(rows, values, strict=True):
                    rows[k].append(v)
        intervals = pa.table(
            {k: pa.array(v, pa.timestamp("us") if k in ("start_ts", "last_seen", "end_ts")
             else None) for k, v in rows.items()}
        )  # fmt: skip
        with self.store._transaction(fast_times=times, fast_intervals=intervals) as con:
            con.execute(
                "UPDATE series SET first_seen = f.first_seen, last_seen = f.last_seen, "
                "last_raw = f.last_raw FROM fast_times AS f "
                "WHERE series.series_id = f.series_id"
            )
            con.execute("INSERT INTO workload_intervals SELECT * FROM fast_intervals")

"""The demo history's readings, computed in a process of their own while the store commits.

``python -m gpuscope.demo.readings`` reads one JSON request on stdin (the scenario, the
nodes, the sample times) and writes one pickled frame per sample time on stdout: for each
node its series' values, and its names and labels only when they changed (pods come and
go a few times a week; the labels of a node stay the same between). The series are exactly
what :func:`gpuscope.core.series.node_series` gives for the simulated readings, kept to
:data:`KEPT`. Computing them costs about as much as the store's commit of them; in one
process the two took turns (55 s for the week on two cores), in two they overlap. Threads
do not help: both halves are mostly Python, and the GIL made them slower together.

This module imports only the simulator and the catalogue (no DuckDB, Arrow or polars), so
the helper process starts in a fraction of a second and stays small.
"""

from __future__ import annotations

import json
import pickle
import sys
from array import array
from collections.abc import Iterator, Sequence
from operator import is_
from typing import Any, BinaryIO

from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.series import node_series
from gpuscope.sim import SimulatedCluster
from gpuscope.sim.scenario import Scenario

#: Families the history keeps: what the weekly report, the detectors and the dashboards'
#: week views read (clocks, energy, ECC, NVLink/PCIe, packet and error counters are left to
#: the live data).
KEPT = frozenset({
    "gpuscope_gpu_info", "gpuscope_gpu_up", "gpuscope_gpu_utilization_ratio",
    "gpuscope_gpu_memory_utilization_ratio", "gpuscope_gpu_memory_used_bytes",
    "gpuscope_gpu_memory_total_bytes", "gpuscope_gpu_power_watts",
    "gpuscope_gpu_temperature_celsius", "gpuscope_gpu_sm_active_ratio",
    "gpuscope_gpu_tensor_active_ratio", "gpuscope_gpu_workload_info",
    "gpuscope_gpu_workload_memory_used_bytes", "gpuscope_gpu_workload_utilization_ratio",
    "gpuscope_ib_transmit_bytes", "gpuscope_ib_receive_bytes", "gpuscope_ib_transmit_wait",
    "gpuscope_ib_port_rate_bytes_per_second", "gpuscope_ib_port_up",
})  # fmt: skip
_SPECS = {m.name: m for m in AGENT_METRICS}

#: A node's series at one time: (layout id, (names, labels) when the layout is new, else
#: None, values as float64 bytes). A node whose layout changes gets a new id: only each
#: node's current layout is kept, here and in the parent.
NodeFrame = tuple[int, tuple[list[str], list[tuple[tuple[str, str], ...]]] | None, bytes]


def request(scenario: Scenario, nodes: Sequence[str], times: Sequence[float]) -> bytes:
    """The JSON the helper process reads: ``times`` are the scenario's own (seconds since
    its origin)."""
    return json.dumps(
        {"scenario": scenario.model_dump(mode="json"), "nodes": list(nodes), "times": list(times)}
    ).encode()


def frames(
    cluster: SimulatedCluster, nodes: Sequence[str], times: Sequence[float]
) -> Iterator[list[NodeFrame]]:
    """Each time's frame: one :data:`NodeFrame` per node, in ``nodes`` order."""
    labels_cache: dict[tuple[str, tuple[str, ...]], tuple[str, tuple[tuple[str, str], ...]]] = {}
    # each node's current layout: its (name, labels) objects and id; a node's layout that
    # changes gets a new id (a week's pods come and go: keeping every past layout of every
    # node cost tens of MB here and in the parent, for a node seldom back to an old one)
    current: dict[str, tuple[list[tuple[str, tuple[tuple[str, str], ...]]], int]] = {}
    made = 0
    kept = KEPT
    for st in times:
        frame: list[NodeFrame] = []
        for node in nodes:
            gpus = cluster.gpu_readings(node, st)
            hits: list[tuple[str, tuple[tuple[str, str], ...]]] = []
            values = array("d")
            for name, label_values, value in node_series(
                node, gpus, cluster.gpu_workloads(node, st, gpus), cluster.ib_readings(node, st)
            ):
                if name not in kept:
                    continue
                key = (name, tuple(label_values))
                hit = labels_cache.get(key)
                if hit is None:
                    spec = _SPECS[name]
                    pairs = tuple(sorted(zip(spec.labels, label_values, strict=True)))
                    hit = labels_cache[key] = (spec.sample_name, pairs)
                hits.append(hit)
                values.append(value)
            # the cached (name, labels) objects live as long as the cache: the same objects
            # in the same order are the same layout
            last = current.get(node)
            new = None
            if last is not None and len(last[0]) == len(hits) and all(map(is_, last[0], hits)):
                layout = last[1]
            else:
                layout, made = made, made + 1
                current[node] = (hits, layout)
                new = ([h[0] for h in hits], [h[1] for h in hits])
            frame.append((layout, new, values.tobytes()))
        yield frame


def serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    """The helper process: a request in, ``("frame", ...)`` per time, then ``("done",)``;
    a failure is sent as ``("error", line)`` (the parent raises it)."""
    try:
        req: dict[str, Any] = json.loads(stdin.read())
        cluster = SimulatedCluster(Scenario.model_validate(req["scenario"]))
        for frame in frames(cluster, req["nodes"], req["times"]):
            pickle.dump(("frame", frame), stdout, protocol=pickle.HIGHEST_PROTOCOL)
            stdout.flush()  # whole frames, so the parent never waits on a buffered tail
        pickle.dump(("done",), stdout)
    except (BrokenPipeError, KeyboardInterrupt):  # the parent stopped (failed, interrupted)
        return 1
    except Exception as exc:
        pickle.dump(("error", f"{type(exc).__name__}: {exc}"), stdout)
        return 1
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))

"""The demo history's readings: the agent's series for each node, names told once per
layout, and the run-at-once computation (readings_fast) value for value the simulator's."""

import pytest

from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.series import node_series
from gpuscope.demo import readings_fast
from gpuscope.demo.readings import KEPT, NodeFrame, frames
from gpuscope.demo.readings_fast import fast_frames
from gpuscope.sim import SimulatedCluster, default_scenario

SPECS = {m.name: m for m in AGENT_METRICS}


def expected(cluster: SimulatedCluster, node: str, t: float) -> list[tuple[str, object, float]]:
    """What the agent's catalogue mapping gives for the node at t, kept families only."""
    gpus = cluster.gpu_readings(node, t)
    return [
        (SPECS[n].sample_name, tuple(sorted(zip(SPECS[n].labels, vals, strict=True))), v)
        for n, vals, v in node_series(
            node, gpus, cluster.gpu_workloads(node, t, gpus), cluster.ib_readings(node, t)
        )
        if n in KEPT
    ]


def test_frames_carry_the_agents_series_and_send_each_layout_once() -> None:
    """Each node's values are node_series' at that time, in its order, with its names and
    sorted labels; a node's names and labels travel only when its layout is new."""
    scenario = default_scenario(nodes=6)
    cluster = SimulatedCluster(scenario)
    nodes = cluster.node_names
    times = [0.0, 300.0, 600.0, 3 * 86_400.0]
    layouts: dict[int, tuple[list[str], list[tuple[tuple[str, str], ...]]]] = {}
    sent = 0
    for t, frame in zip(times, frames(cluster, nodes, times), strict=True):
        assert len(frame) == len(nodes)
        for node, (layout, new, values) in zip(nodes, frame, strict=True):
            if new is not None:
                assert layout not in layouts
                layouts[layout] = new
                sent += 1
            names, labels = layouts[layout]
            assert list(zip(names, labels, values, strict=True)) == expected(cluster, node, t)
    assert len(nodes) <= sent < len(nodes) * len(times)  # reused between times


def _week_cluster(nodes: int) -> SimulatedCluster:
    """The demo's scenario (DRA pool with a MIG node, shared GPUs, steady churn of pods)."""
    scenario = default_scenario(nodes=nodes, dra=True)
    return SimulatedCluster(scenario.model_copy(update={"origin": 1.7e9}))


def _resolved(frame: list[NodeFrame]) -> list[tuple[bool, object, list[float]]]:
    """A frame without its layout ids (each computation numbers its layouts in its own
    order): per node, whether its layout is new, the layout, the values."""
    return [(new is not None, new, values) for _, new, values in frame]


def test_fast_frames_are_the_simulators_readings_value_for_value() -> None:
    """Two days every 5 minutes before the demo's live start (times negative, as the
    demo's history is): every node's layout, when it is told and every value are those of
    the simulator read time by time, MIG instances, DRA nodes and workloads on shared
    GPUs included; runs of a few times, so epochs straddle runs."""
    cluster = _week_cluster(8)
    nodes = cluster.node_names
    assert any(cluster.node(n).mig_profile for n in nodes)
    start = -cluster.scenario.live_offset - 2 * 86_400
    times = [start + i * 300.0 for i in range(2 * 288)]
    slow = [_resolved(f) for f in frames(cluster, nodes, times)]
    fast = [_resolved(f) for f in fast_frames(cluster, nodes, times, run=50)]
    assert fast == slow
    changes = sum(new for frame in slow[1:] for new, _, _ in frame)
    assert changes > 20  # pods came and went: many epochs were computed


def test_fast_frames_take_the_simulators_reading_where_a_formula_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An epoch whose computed values differ from the simulator's first reading is read
    from the simulator time by time: the history is the simulator's either way (the rounded
    gauges computed 1 off here: equal frames mean every epoch fell back)."""
    cluster = _week_cluster(6)
    nodes = cluster.node_names
    times = [i * 300.0 for i in range(30)]
    real = readings_fast._round
    monkeypatch.setattr(
        readings_fast, "_round", lambda x, digits: [v + 1.0 for v in real(x, digits)]
    )
    fast = [_resolved(f) for f in fast_frames(cluster, nodes, times, run=7)]
    assert fast == [_resolved(f) for f in frames(cluster, nodes, times)]


def test_fast_frames_follow_a_removed_pod() -> None:
    """A pod an action removed stops being read at its removal (its series go, its IB
    traffic stops growing), in the run-at-once computation as in the simulator's."""
    cluster = _week_cluster(6)
    nodes = cluster.node_names
    pod = next(p for p in cluster.pods if p.node is not None and p.start <= 0 and p.end is None)
    assert cluster.remove_pod(pod.namespace, pod.name, 1000.0)
    times = [i * 300.0 for i in range(12)]
    fast = [_resolved(f) for f in fast_frames(cluster, nodes, times)]
    assert fast == [_resolved(f) for f in frames(cluster, nodes, times)]
    k = nodes.index(pod.node or "")
    told = [layout for new, layout, _ in (frame[k] for frame in fast) if new]
    held = [any(("pod", pod.name) in labels for labels in layout[1]) for layout in told]  # type: ignore[index]
    assert held[0] and not held[-1]

"""The demo history's helper process: the series it sends are the agent's, names sent once."""

import io
import json
import pickle
from array import array

from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.series import node_series
from gpuscope.demo.readings import KEPT, frames, request, serve
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
        for node, (layout, new, raw) in zip(nodes, frame, strict=True):
            if new is not None:
                assert layout not in layouts
                layouts[layout] = new
                sent += 1
            names, labels = layouts[layout]
            values = array("d")
            values.frombytes(raw)
            assert list(zip(names, labels, values.tolist(), strict=True)) == expected(
                cluster, node, t
            )
    assert len(nodes) <= sent < len(nodes) * len(times)  # reused between times


def test_serve_answers_a_request_with_frames_then_done() -> None:
    scenario = default_scenario(nodes=6)
    nodes = [n.name for n in scenario.nodes][:2]
    out = io.BytesIO()
    assert serve(io.BytesIO(request(scenario, nodes, [0.0, 300.0])), out) == 0
    out.seek(0)
    kinds = []
    while out.tell() < len(out.getvalue()):
        kinds.append(pickle.load(out)[0])
    assert kinds == ["frame", "frame", "done"]


def test_serve_reports_a_bad_request_as_one_error_frame() -> None:
    out = io.BytesIO()
    bad = json.dumps({"scenario": {"nodes": "none"}, "nodes": [], "times": []}).encode()
    assert serve(io.BytesIO(bad), out) == 1
    kind, text = pickle.loads(out.getvalue())
    assert kind == "error" and "ValidationError" in text

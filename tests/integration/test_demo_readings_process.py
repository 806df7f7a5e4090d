"""The demo history's readings computed in a helper process (gpuscope/demo/readings_process.py):
the same frames as in this process, its failures one clear error, and it ends when the fill
stops early."""

from __future__ import annotations

import shutil

import pytest

from gpuscope.demo import readings_process
from gpuscope.demo.readings import NodeFrame
from gpuscope.demo.readings_fast import fast_frames
from gpuscope.demo.readings_process import frames_in_helper
from gpuscope.sim import SimulatedCluster, default_scenario


def _cluster() -> SimulatedCluster:
    scenario = default_scenario(nodes=6, dra=True)
    return SimulatedCluster(scenario.model_copy(update={"origin": 1.7e9}))


def _resolved(frame: list[NodeFrame]) -> list[tuple[bool, object, list[float]]]:
    return [(new is not None, new, values) for _, new, values in frame]


def test_the_helper_computes_the_frames_this_process_computes() -> None:
    """A day every 5 minutes before the live start, in runs of 50 (the last one short), on
    a cluster an action changed here (a pod removed): value for value, layout for layout,
    the frames of fast_frames in this process, the layout ids included."""
    cluster = _cluster()
    pod = next(p for p in cluster.pods if p.node is not None and p.start <= 0 and p.end is None)
    start = -cluster.scenario.live_offset - 86_400
    assert cluster.remove_pod(pod.namespace, pod.name, start + 40_000)
    nodes = cluster.node_names
    times = [start + i * 300.0 for i in range(288)]
    here = list(fast_frames(cluster, nodes, times, 50))
    there = list(frames_in_helper(cluster, nodes, times, 50))
    assert len(there) == len(times)
    assert there == here
    # the removal travelled: without it the pod's node reads otherwise
    fresh = list(fast_frames(_cluster(), nodes, times, 50))
    assert [_resolved(f) for f in fresh] != [_resolved(f) for f in there]


def test_a_failing_helper_is_one_error_with_its_last_line() -> None:
    """A node the cluster does not have fails in the helper: the caller gets a
    RuntimeError naming what the helper raised, not a hang or a pickle error."""
    cluster = _cluster()
    with pytest.raises(RuntimeError, match=r"helper process ended early: .*no-such-node"):
        list(frames_in_helper(cluster, ["no-such-node"], [0.0, 300.0], 2))


def test_a_helper_that_cannot_start_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter that exits at once without reading the cluster (here ``false``): the
    caller's write meets a closed pipe and gets the same one error, not BrokenPipeError."""
    monkeypatch.setattr(readings_process.sys, "executable", shutil.which("false"))
    cluster = _cluster()
    with pytest.raises(RuntimeError, match="helper process ended early"):
        list(frames_in_helper(cluster, cluster.node_names, [0.0, 300.0], 2))


def test_stopping_early_ends_the_helper() -> None:
    """The fill stops after one frame (its store failed): closing the frames ends the
    helper, which would otherwise wait on a full pipe for ever."""
    cluster = _cluster()
    times = [i * 300.0 for i in range(400)]
    frames = frames_in_helper(cluster, cluster.node_names, times, 10)
    first = next(frames)
    assert len(first) == len(cluster.node_names)
    proc = frames.gi_frame.f_locals["proc"]  # type: ignore[union-attr]
    frames.close()
    assert proc.returncode is not None

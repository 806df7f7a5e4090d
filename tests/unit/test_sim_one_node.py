"""A simulated node agent carries its own node's share of the scenario, and its page is the
one the whole cluster gives for that node, byte for byte (issue 24, a lean agent)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuscope.agent.devices.sim import SimAttributor, SimGpuSource, SimIbSource
from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.sim import NodeSpec, Scenario, SimulatedCluster, WorkloadSpec, default_scenario
from gpuscope.sim import one_node as one_node_module
from gpuscope.sim.one_node import (
    SHIPPED,
    default_node_scenario,
    fingerprint,
    one_node,
    shipped_node_background,
)
from gpuscope.sim.scenario import steady_background

# the nodes of each story: training + hot rail, sweeps and notebooks, serving + faulty port
NODES = ("gpu-node-00", "gpu-node-08", "gpu-node-15", "gpu-node-30", "gpu-node-31")
#: scenario seconds across the background and the live part (the agent starts at 6 h)
TIMES = (-9e5, -2e5, -3600.0, 0.0, 6 * 3600.0, 6 * 3600.0 + 977.0, 3e5)


def page(cluster: SimulatedCluster, node: str, t: float) -> bytes:
    """The agent's page for ``node`` at scenario time ``t``, without its own timings."""
    clock = lambda: t  # noqa: E731
    collector = AgentCollector(
        node,
        SimGpuSource(cluster, node, clock),
        SimIbSource(cluster, node, clock),
        SimAttributor(cluster, node, clock),
    )
    try:
        body = collector.render()
    finally:
        collector.close()
    lines = body.split(b"\n")
    return b"\n".join(x for x in lines if not x.startswith(b"gpuscope_agent_collect_seconds{"))


@pytest.fixture(scope="module")
def whole() -> SimulatedCluster:
    return SimulatedCluster(default_scenario())


@pytest.mark.parametrize("node", NODES)
def test_the_node_share_gives_the_whole_clusters_page(whole: SimulatedCluster, node: str) -> None:
    """The page a node agent serves from its own share equals the whole cluster's, at every
    time from the background to the live part (counters carry the pods that ran there)."""
    name, mine = default_node_scenario(node, 42)
    part = SimulatedCluster(mine)
    assert name == node
    assert len(part.pods) < len(whole.pods) / 10  # it carries its own pods only
    for t in TIMES:
        assert page(part, node, t) == page(whole, node, t), (node, t)


def test_the_shipped_background_is_what_the_simulation_computes() -> None:
    """The file shipped for the default scenario holds, node by node, the workloads the
    steady-state loop places there; stale, it fails here (regenerate it with
    `python -m gpuscope.sim.one_node --write`)."""
    planted = default_scenario(steady=False)
    background = steady_background(planted)
    for n in planted.nodes:
        expected = tuple(w for w in background if not w.pending and n.name in w.nodes)
        assert shipped_node_background(planted, n.name) == expected, n.name


def test_a_stale_file_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file made from another planted scenario or another steady loop is ignored, and the
    background computed instead: slower, never wrong."""
    planted = default_scenario(steady=False)
    with gzip.open(SHIPPED, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert json.loads(lines[0]) == {"fingerprint": fingerprint(planted)}
    stale = tmp_path / "stale.jsonl.gz"
    with gzip.open(stale, "wt", encoding="utf-8") as f:
        f.write("\n".join([json.dumps({"fingerprint": "0" * 64}), *lines[1:]]) + "\n")
    monkeypatch.setattr(one_node_module, "SHIPPED", stale)
    assert shipped_node_background(planted, "gpu-node-30") is None
    _, mine = default_node_scenario("gpu-node-30", 42)
    expected = one_node(default_scenario(), "gpu-node-30")
    assert mine.workloads == expected.workloads


def test_another_seed_computes_its_own_background() -> None:
    """Only seed 42 is shipped; another seed's node share is cut from its own cluster."""
    _, mine = default_node_scenario("gpu-node-30", 7)
    assert mine.workloads == one_node(default_scenario(seed=7), "gpu-node-30").workloads


def test_a_workload_the_simulator_places_keeps_the_scenario_whole() -> None:
    """First fit depends on every node, so a scenario with an unpinned workload is not cut."""
    scenario = Scenario(
        nodes=(NodeSpec(name="a", gpus=2), NodeSpec(name="b", gpus=2)),
        workloads=(
            WorkloadSpec(name="pinned", namespace="x", kind="training", gpus=2, nodes=("a",)),
            WorkloadSpec(name="placed", namespace="x", kind="training", gpus=1),
        ),
    )
    assert one_node(scenario, "b") is scenario
    pinned_only = scenario.model_copy(update={"workloads": scenario.workloads[:1]})
    assert one_node(pinned_only, "b").workloads == ()
    assert one_node(pinned_only, "a").workloads == pinned_only.workloads

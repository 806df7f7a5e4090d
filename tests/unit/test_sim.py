"""The simulator: deterministic, coherent, and planting what the scenario says."""

from pathlib import Path

import pytest

from gpuscope.core.errors import ConfigError
from gpuscope.sim import Scenario, SimulatedCluster, default_scenario, load_scenario
from gpuscope.sim.scenario import HOUR, NodeSpec, WorkloadSpec


@pytest.fixture(scope="module")
def cluster() -> SimulatedCluster:
    return SimulatedCluster(default_scenario())


def test_same_seed_same_readings() -> None:
    """Two clusters from one scenario read the same at the same time; another seed differs."""
    a = SimulatedCluster(default_scenario(seed=1)).gpu_readings("gpu-node-10", 1234.0)
    b = SimulatedCluster(default_scenario(seed=1)).gpu_readings("gpu-node-10", 1234.0)
    c = SimulatedCluster(default_scenario(seed=2)).gpu_readings("gpu-node-10", 1234.0)
    assert a == b
    assert [r.uuid for r in a] != [r.uuid for r in c]


def test_counters_never_decrease(cluster: SimulatedCluster) -> None:
    """Energy, NVLink, PCIe and IB counters are monotonic over a simulated day."""
    for node in ("gpu-node-00", "gpu-node-08", "gpu-node-30"):
        prev_e: list[float] = []
        prev_ib: list[float] = []
        for step in range(0, 24 * 3600, 1800):
            t = float(step)
            e = [r.energy_joules_total or 0.0 for r in cluster.gpu_readings(node, t)]
            ib = [p.transmit_bytes_total or 0.0 for p in cluster.ib_readings(node, t)]
            if prev_e:
                assert all(x >= y for x, y in zip(e, prev_e, strict=True))
                assert all(x >= y for x, y in zip(ib, prev_ib, strict=True))
            prev_e, prev_ib = e, ib


def test_energy_rate_matches_mean_power(cluster: SimulatedCluster) -> None:
    """Energy over an hour / 3600 s is the mean power the gauges show, within noise."""
    r0 = cluster.gpu_readings("gpu-node-00", 0.0)[0]
    r1 = cluster.gpu_readings("gpu-node-00", HOUR)[0]
    rate = ((r1.energy_joules_total or 0) - (r0.energy_joules_total or 0)) / HOUR
    powers = [
        cluster.gpu_readings("gpu-node-00", t)[0].power_watts or 0 for t in range(0, 3600, 60)
    ]
    assert rate == pytest.approx(sum(powers) / len(powers), rel=0.05)


def test_idle_notebook_goes_to_zero_but_keeps_memory(cluster: SimulatedCluster) -> None:
    """An interactive session with active_seconds goes idle after them, holding its memory."""
    pod = next(p for p in cluster.pods if p.name == "nb-user01-0")
    assert pod.workload.active_seconds is not None
    node = pod.node
    assert node is not None
    gpu = pod.assignments[0].gpu_index
    later = pod.start + pod.workload.active_seconds + 600
    workload = next(w for w in cluster.gpu_workloads(node, later) if w.pod == pod.name)
    assert workload.utilization_ratio == 0.0
    assert (workload.memory_used_bytes or 0) > 0
    assert workload.workload_kind.value == "interactive"
    assert workload.gpu_uuid == cluster.gpu_uuid(node, gpu)


def test_fractional_pods_share_a_gpu(cluster: SimulatedCluster) -> None:
    """Two serving pods on one GPU each report their own share, summing to the GPU's use."""
    by_gpu: dict[str, list[float]] = {}
    for w in cluster.gpu_workloads("gpu-node-30", 100.0):
        by_gpu.setdefault(w.gpu_uuid, []).append(w.utilization_ratio or 0.0)
    shared = {u: v for u, v in by_gpu.items() if len(v) > 1}
    assert shared, "the default scenario plants GPUs shared by two inference pods"
    readings = {r.uuid: r for r in cluster.gpu_readings("gpu-node-30", 100.0)}
    for u, utils in shared.items():
        assert sum(utils) == pytest.approx(readings[u].utilization_ratio or 0, abs=1e-3)


def test_default_scenario_blocks_pending_job_by_fragmentation(cluster: SimulatedCluster) -> None:
    """The pending 4-GPU job is unplaced although the cluster has more than 4 free GPUs,
    at the demo's "now" (the live part), where the steady-state background has ended."""
    now = cluster.scenario.live_offset
    pending = [p for p in cluster.pods if p.node is None and cluster.is_listed(p, now)]
    # and the topology story's 2-node job (tests/integration/test_topology_story.py)
    assert [p.workload.name for p in pending] == ["detector-train", "gpt-16", "gpt-16"]
    free_per_node = []
    for node in cluster.node_names:
        used: set[int] = set()
        for p in cluster.pods_on(node, now):
            used.update(a.gpu_index for a in p.assignments)
        free_per_node.append(8 - len(used))
    assert sum(free_per_node) >= 4
    assert max(free_per_node) < 4


def test_hot_rail_and_erroring_port(cluster: SimulatedCluster) -> None:
    """The fine-tune job's rail runs at 97 % of line rate; the planted port counts errors."""
    a = cluster.ib_readings("gpu-node-08", 0.0)[0]
    b = cluster.ib_readings("gpu-node-08", 60.0)[0]
    share = (
        ((b.transmit_bytes_total or 0) - (a.transmit_bytes_total or 0))
        / 60
        / (a.rate_bytes_per_second or 1)
    )
    assert share == pytest.approx(0.97, abs=0.01)
    assert (b.transmit_wait_total or 0) > (a.transmit_wait_total or 0)
    port = cluster.ib_readings("gpu-node-31", 2 * HOUR)[2]
    assert dict(port.errors)["symbol_error"] == 480


def test_removed_pod_stops_reporting() -> None:
    """An evicted pod is gone from attribution after the eviction time, not before."""
    c = SimulatedCluster(default_scenario())
    assert c.remove_pod("research", "nb-user01-0", 500.0)
    node = next(p.node for p in c.pods if p.name == "nb-user01-0")
    assert node is not None
    assert any(w.pod == "nb-user01-0" for w in c.gpu_workloads(node, 499.0))
    assert not any(w.pod == "nb-user01-0" for w in c.gpu_workloads(node, 501.0))
    assert not c.remove_pod("research", "nb-user01-0", 600.0)


def test_mig_node_reports_instances() -> None:
    """A MIG node reports each instance as its own device, the parent without utilization."""
    s = Scenario(
        nodes=(NodeSpec(name="m", gpu_model="A100", gpus=1, mig_profile="3g.40gb"),),
        workloads=(WorkloadSpec(name="w", namespace="ns", kind="inference", mig=True),),
    )
    c = SimulatedCluster(s)
    readings = c.gpu_readings("m", 10.0)
    parent, *instances = readings
    assert parent.mig_mode == "enabled" and parent.utilization_ratio is None
    assert [i.mig_instance for i in instances] == ["1", "2"]
    assert all(i.parent_uuid == parent.uuid and i.uuid.startswith("MIG-") for i in instances)
    assert instances[0].processes and not instances[1].processes
    assert instances[0].memory_total_bytes == parent.memory_total_bytes * 3 // 8  # type: ignore[operator]


def test_lost_gpu_fault() -> None:
    """A gpu_lost fault makes that GPU report up=False from its time on."""
    s = Scenario.model_validate(
        {
            "nodes": [{"name": "n", "gpus": 2}],
            "faults": [{"kind": "gpu_lost", "node": "n", "device_index": 1, "at": 100}],
        }
    )
    c = SimulatedCluster(s)
    assert all(r.up for r in c.gpu_readings("n", 50.0))
    assert [r.up for r in c.gpu_readings("n", 150.0)] == [True, False]


def test_scenario_file_round_trip_and_errors(tmp_path: Path) -> None:
    """A scenario file loads; a bad one gives one line naming the field."""
    good = tmp_path / "s.yaml"
    good.write_text(
        "name: tiny\nnodes:\n  - {name: a, gpus: 2}\nworkloads:\n"
        "  - {name: nb, namespace: r, kind: interactive, nodes: [a], active_seconds: 60}\n"
    )
    s = load_scenario(good)
    assert s.name == "tiny" and SimulatedCluster(s).pods[0].node == "a"
    bad = tmp_path / "b.yaml"
    bad.write_text("nodes:\n  - {name: a, gpus: 99}\n")
    with pytest.raises(ConfigError, match=r"nodes\.0\.gpus") as err:
        load_scenario(bad)
    assert "\n" not in str(err.value)
    unknown = tmp_path / "u.yaml"
    unknown.write_text(
        "nodes:\n  - {name: a}\nworkloads:\n  - {name: w, namespace: n, kind: batch, nodes: [zz]}\n"
    )
    with pytest.raises(ConfigError, match="unknown node zz"):
        load_scenario(unknown)

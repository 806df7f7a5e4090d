"""The shared readings-to-series mapping fits the catalogue exactly."""

from gpuscope.core.catalogue import AGENT_METRICS_BY_NAME
from gpuscope.core.series import node_series
from gpuscope.sim import SimulatedCluster, default_scenario


def test_every_series_matches_its_spec_labels() -> None:
    """Each item names a catalogued family and has one value per label of that family."""
    cluster = SimulatedCluster(default_scenario())
    node = "gpu-node-30"
    gpus = cluster.gpu_readings(node, 100.0)
    series = list(
        node_series(
            node, gpus, cluster.gpu_workloads(node, 100.0), cluster.ib_readings(node, 100.0)
        )
    )
    assert len(series) > 250
    for name, labels, _ in series:
        assert len(labels) == len(AGENT_METRICS_BY_NAME[name].labels), name


def test_lost_gpu_yields_identity_only() -> None:
    """A lost GPU gives its info and up=0 series, nothing else."""
    from gpuscope.core.records import GpuReading

    got = list(node_series("n", [GpuReading(index=3, uuid="GPU-x", up=False, power_watts=5.0)]))
    assert [(n, v) for n, _, v in got] == [("gpuscope_gpu_info", 1.0), ("gpuscope_gpu_up", 0.0)]

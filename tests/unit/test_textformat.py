"""The fast text encoder writes exactly what prometheus_client's generate_latest writes."""

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from gpuscope.agent.devices.sim import SimAttributor, SimGpuSource, SimIbSource
from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.agent.serving.textformat import generate_text
from gpuscope.sim import SimulatedCluster, default_scenario


class Tricky(Collector):
    def collect(self):  # type: ignore[no-untyped-def]
        g = GaugeMetricFamily("t_ratio", 'help with \\ and\nnewline "q"', labels=["b", "a"])
        g.add_metric(["x\\y", 'say "hi"'], 0.5)
        g.add_metric(["line\nbreak", ""], float("nan"))
        g.add_metric(["inf", "big"], float("inf"))
        g.add_metric(["neg", "small"], -1.5e-12)
        g.add_metric(["huge", "int"], 123456789012345678.0)
        yield g
        c = CounterMetricFamily("t_bytes", "a counter", labels=["dev"], created=1.5)
        c.add_metric(["mlx5_0"], 4.0, created=100.0)
        yield c
        yield GaugeMetricFamily("t_nolabels", "no labels", value=3.0)
        mixed = GaugeMetricFamily("t_mixed", "samples with different label sets")
        mixed.add_sample("t_mixed", {"z": "1", "a": "2"}, 1.0)
        mixed.add_sample("t_mixed", {"b": "3"}, 2.0, timestamp=1700000000.5)
        yield mixed


def test_identical_on_tricky_families() -> None:
    """Escapes, NaN/Inf, exponents, _created samples, timestamps and mixed label sets."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(Tricky())
    assert generate_text(reg) == generate_latest(reg)


def test_identical_on_the_agents_registry() -> None:
    """On a whole simulated agent (plus process metrics) the bytes are the same."""
    cluster = SimulatedCluster(default_scenario())
    now = lambda: 3600.0  # noqa: E731 - a frozen clock keeps both encodings on one reading
    node = "gpu-node-30"
    collector = AgentCollector(
        node,
        SimGpuSource(cluster, node, now),
        SimIbSource(cluster, node, now),
        SimAttributor(cluster, node, now),
    )
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    ProcessCollector(registry=reg, pid=lambda: "self")  # values change between calls
    try:
        ours = generate_text(reg).decode().splitlines()
        theirs = generate_latest(reg).decode().splitlines()
    finally:
        collector.close()
    # process metrics and collect durations change between two scrapes by nature
    strip = lambda lines: [  # noqa: E731
        x for x in lines if not x.startswith(("process_", "gpuscope_agent_collect_seconds{"))
    ]
    assert strip(ours) == strip(theirs)
    assert len(strip(ours)) > 300

"""The topology gauges: one series per domain per level (never per node or per job), the
documented names, and values that are the summary's."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from gpuscope.analytics.domains.topology import analyze_topology
from gpuscope.analytics.domains.topology_levels import topology_of
from gpuscope.analytics.placement.allocation import state_from_records
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.collector.gauges.analytics_gauges import AnalyticsGauges

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_one_series_per_domain_per_level() -> None:
    nodes = [
        NodeInfo(name=f"n{i}", allocatable_gpus=8,
                 labels={"topology.gpuscope.io/rack": f"r{i // 4}",
                         "network.topology.nvidia.com/leaf": f"l{i // 2}"})
        for i in range(16)
    ]  # fmt: skip
    pods = [
        PodInfo(namespace="t", name=f"p{i}", uid=str(i), node=f"n{i}", phase="Running",
                start_time=None, gpu_request=i % 8)
        for i in range(16)
    ]  # fmt: skip
    analysis = analyze_topology(state_from_records(nodes, pods), topology_of(nodes), [], at=AT)
    gauges = AnalyticsGauges()
    gauges.update({"topology": analysis})
    series: Counter[str] = Counter()
    values = {}
    for fam in gauges.collect():
        for s in fam.samples:
            series[s.name] += 1
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    domains = 4 + 8  # racks + leaves
    for name in ("free_gpus", "whole_free_nodes", "largest_job_gpus"):
        assert series[f"gpuscope_topology_domain_{name}"] == domains
    sizes = analysis.summary["job_sizes"]
    assert series["gpuscope_topology_slots"] == 2 * len(sizes)
    assert series["gpuscope_topology_level_fragmented_gpus"] == 2
    leaf = analysis.summary["levels"]["network.topology.nvidia.com/leaf"]
    l0 = leaf["domains"]["l0"]
    key = (("domain", "l0"), ("level", "network.topology.nvidia.com/leaf"))
    assert values[("gpuscope_topology_domain_free_gpus", key)] == l0["free_gpus"] == 15
    assert values[("gpuscope_topology_domain_largest_job_gpus", key)] == 8
    slots_key = (("job_gpus", "16"), ("level", "network.topology.nvidia.com/leaf"))
    assert values[("gpuscope_topology_slots", slots_key)] == leaf["slots"]["16"]
    assert values[("gpuscope_topology_blocked_pod_groups", ())] == 0

"""The inventory's nodes on the collector's /metrics: what a dashboard's pool filter joins."""

from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.collector.cluster.inventory_records import NodeInfo
from gpuscope.collector.gauges.inventory_gauges import InventoryGauges
from gpuscope.collector.storage.store import Store

T0 = datetime(2026, 11, 16, tzinfo=UTC)


def exposition(store: Store) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reg = CollectorRegistry()
    reg.register(InventoryGauges(store.cursor))
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(generate_latest(reg).decode())
        for s in fam.samples
    }


def test_current_nodes_with_pool_model_and_gpus(tmp_path: Path) -> None:
    """Each current node gives one info series (unlabelled pool -> 'default'); a node gone
    from the latest snapshot is gone from /metrics."""
    with Store.open(tmp_path / "s.duckdb") as store:
        a = NodeInfo("n0", gpu_model="NVIDIA-H100", allocatable_gpus=8, pool="h100", rack="r1")
        b = NodeInfo("n1", allocatable_gpus=4, unschedulable=True)
        store.record_inventory(T0, nodes=[a, b])
        got = exposition(store)
        assert got[("gpuscope_node_info", (("gpu_model", "NVIDIA-H100"), ("node", "n0"),
                                           ("pool", "h100"), ("rack", "r1")))] == 1  # fmt: skip
        assert got[("gpuscope_node_info", (("gpu_model", ""), ("node", "n1"),
                                           ("pool", "default"), ("rack", "")))] == 1  # fmt: skip
        assert got[("gpuscope_node_allocatable_gpus", (("node", "n0"),))] == 8
        assert got[("gpuscope_node_schedulable", (("node", "n0"),))] == 1
        assert got[("gpuscope_node_schedulable", (("node", "n1"),))] == 0
        store.record_inventory(T0.replace(hour=1), nodes=[a])
        assert ("gpuscope_node_allocatable_gpus", (("node", "n1"),)) not in exposition(store)


def test_a_closed_store_gives_empty_families_not_an_error(tmp_path: Path) -> None:
    """A scrape racing the collector's shutdown answers without node series."""
    store = Store.open(tmp_path / "s.duckdb")
    store.record_inventory(T0, nodes=[NodeInfo("n0", allocatable_gpus=8)])
    store.close()
    assert not any(n.startswith("gpuscope_node") for n, _ in exposition(store))

"""The Kubernetes inventory's nodes as gauges on the collector's ``/metrics``.

The agents' series carry ``node`` only; a dashboard that filters by node pool, or shows a
node's GPU model, joins them with ``gpuscope_node_info{node, pool, gpu_model, rack}``
(``on(node) group_left(pool)``). Read from the store's current inventory at each scrape, so
every way the inventory is recorded (the sync job, the demo, a snapshot) shows, and a node
that left the cluster leaves ``/metrics`` with it. One series per node: cardinality is the
cluster's node count.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import duckdb
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuscope.collector.cluster.inventory_records import DEFAULT_POOL

log = logging.getLogger(__name__)

#: The nodes of the current inventory snapshot (one row per node, its JSON record).
CURRENT_NODES = "SELECT key, record FROM inventory_nodes WHERE valid_to IS NULL ORDER BY key"

INFO_LABELS = ["node", "pool", "gpu_model", "rack"]


class InventoryGauges(Collector):
    """``gpuscope_node_info``, ``gpuscope_node_allocatable_gpus`` and
    ``gpuscope_node_schedulable`` from the current inventory."""

    def __init__(self, cursor: Callable[[], duckdb.DuckDBPyConnection]) -> None:
        self._cursor = cursor

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "gpuscope_node_info",
            "A node of the Kubernetes inventory with its pool (gpuscope.io/pool label, "
            f"'{DEFAULT_POOL}' when unlabelled), GPU model and rack; always 1.",
            labels=INFO_LABELS,
        )
        gpus = GaugeMetricFamily(
            "gpuscope_node_allocatable_gpus",
            "Allocatable whole GPUs (nvidia.com/gpu) of a node.",
            labels=["node"],
        )
        schedulable = GaugeMetricFamily(
            "gpuscope_node_schedulable",
            "1 if the node is Ready and not cordoned.",
            labels=["node"],
        )
        try:
            cur = self._cursor()
            try:
                rows = cur.execute(CURRENT_NODES).fetchall()
            finally:
                cur.close()
        except duckdb.Error as exc:  # a closing store: no node gauges this scrape
            log.warning("inventory gauges unavailable error=%s", exc)
            rows = []
        for key, text in rows:
            record = json.loads(text)
            node = str(record.get("name") or key)
            info.add_metric(
                [
                    node,
                    str(record.get("pool") or DEFAULT_POOL),
                    str(record.get("gpu_model") or ""),
                    str(record.get("rack") or ""),
                ],
                1.0,
            )
            gpus.add_metric([node], float(record.get("allocatable_gpus") or 0))
            ready = bool(record.get("ready", True)) and not record.get("unschedulable", False)
            schedulable.add_metric([node], 1.0 if ready else 0.0)
        yield info
        yield gpus
        yield schedulable

"""The demo's simulated inventory, kept between its half-hourly listings, stores exactly what
listing and parsing the whole cluster every time stores.

The reference below lists the cluster the plain way (every pod checked, every object made
and parsed again, every listing recorded), with the simulator's object builders and the
collector's parsers, and none of the demo's memo.
"""

import dataclasses
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuscope.collector.cluster.dra_apply import apply_object_set
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.collector.cluster.queue_records import quota_from_clusterqueue
from gpuscope.collector.service import CollectorService
from gpuscope.core.kube_objects import objects_from_documents
from gpuscope.demo.parts import record_simulated_inventory
from gpuscope.demo.run import _settings
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.dra import dra_json, is_dra_pod
from gpuscope.sim.kube import nodes_json, quotas_json
from gpuscope.sim.kube_pods import pod_json

pytestmark = pytest.mark.integration

ORIGIN = 1_700_000_000.0
PIECE = 1800.0


def reference_listing(service: CollectorService, cluster: SimulatedCluster, at: float) -> None:
    """Everything listed and parsed afresh, and recorded (nodes and quotas too)."""
    t = at - ORIGIN
    nodes = [node_from_json(n) for n in nodes_json(cluster, origin=ORIGIN)["items"]]
    by_name = {n.name: n for n in nodes}
    settings = service.settings.workloads
    objects = objects_from_documents([("sim", dra_json(cluster, t))])
    plain: list[Any] = []
    dra_objs: list[dict[str, Any]] = []
    dra_pods: list[Any] = []
    for pod in cluster.pods:
        if not cluster.is_listed(pod, t):
            continue
        obj = pod_json(cluster, pod, origin=ORIGIN, t=t)
        info = pod_from_json(
            obj, node=by_name.get(obj["spec"].get("nodeName", "")), settings=settings
        )
        if objects and is_dra_pod(cluster, pod):
            dra_objs.append(obj)
            dra_pods.append(info)
        else:
            plain.append(dataclasses.asdict(info))
    applied = apply_object_set(nodes, dra_pods, dra_objs, objects)
    service.store.record_inventory(
        datetime.fromtimestamp(at, UTC),
        nodes=list(applied.nodes),
        pods=plain + [dataclasses.asdict(p) for p in applied.pods],
        quotas=[quota_from_clusterqueue(q) for q in quotas_json(cluster)["items"]],
    )


def inventory(service: CollectorService) -> dict[str, list[tuple[Any, ...]]]:
    cur = service.store.cursor()
    try:
        return {
            table: cur.execute(
                f"SELECT key, CAST(record AS VARCHAR), valid_from, valid_to FROM {table} "
                "ORDER BY ALL"
            ).fetchall()
            for table in ("inventory_nodes", "inventory_pods", "quotas")
        }
    finally:
        cur.close()


def test_the_kept_listings_store_what_listing_everything_afresh_stores(tmp_path: Path) -> None:
    scenario = default_scenario(nodes=6, dra=True)
    # a day of the steady background before the planted time 0, and the live part
    start = ORIGIN + scenario.live_offset - 86_400.0
    stores = []
    for name in ("kept", "afresh"):
        out = tmp_path / name
        out.mkdir()
        cluster = SimulatedCluster(scenario.model_copy(update={"origin": ORIGIN}))
        service = CollectorService(
            _settings(out / "db.duckdb", [], "127.0.0.1:0", out), clock=time.time
        )
        stores.append(service)
        steps = math.ceil(86_400.0 / PIECE)
        for i in range(steps + 1):
            t = start + i * PIECE
            if name == "kept":
                record_simulated_inventory(service, cluster, t, ORIGIN, pods_only=0 < i < steps)
            else:
                reference_listing(service, cluster, t)
    try:
        kept, afresh = (inventory(s) for s in stores)
        assert len(afresh["inventory_pods"]) > 20  # pods came and went that day
        assert any(r[3] is not None for r in afresh["inventory_pods"])
        assert any("dra" in r[1] for r in afresh["inventory_pods"])
        assert kept == afresh
    finally:
        for s in stores:
            s.stop()

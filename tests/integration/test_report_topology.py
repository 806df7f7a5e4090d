"""The weekly report's topology section on a stored week: 64-GPU and 16-GPU slots per level
at every inventory change (time-weighted), and the worst-fragmented domains by the free
GPU-hours they spent unable to hold a two-node job, checked by hand."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gpuscope.analytics.report.data import build_report
from gpuscope.analytics.report.html import render_html
from gpuscope.analytics.report.markdown import render_markdown
from gpuscope.analytics.report.topology import topology_over
from gpuscope.analytics.report.week import Week
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings

LEAF = "network.topology.nvidia.com/leaf"
W = Week(2025, 10)


def node(name: str, leaf: str) -> NodeInfo:
    return NodeInfo(name=name, allocatable_gpus=8, cpu_milli=64_000, labels={LEAF: leaf})


def pod(name: str, where: str, gpus: int) -> PodInfo:
    return PodInfo(namespace="t", name=name, uid=name, node=where, phase="Running",
                   start_time=None, gpu_request=gpus)  # fmt: skip


def test_slots_and_worst_domains_over_the_week(tmp_path: Path) -> None:
    """Leaves a (a1, a2) and b (b1, b2) of 8-GPU nodes. Days 0-2: a 1-GPU pod on a1 and on
    b1, so neither leaf holds 2 x 8 (16-GPU slots 0). Day 3 on: the pod on b1 is gone,
    leaf b holds one 16-GPU job. Leaf a spends the whole week without a two-node slot with
    15 GPUs free: 15 x 168 stranded GPU-hours; leaf b 15 x 72."""
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("b2", "b")]
    db = tmp_path / "w.duckdb"
    with Store.open(db) as store:
        store.record_inventory(W.start, nodes=nodes, pods=[pod("x", "a1", 1), pod("y", "b1", 1)])
        store.record_inventory(W.start + timedelta(days=3), pods=[pod("x", "a1", 1)])
        slots, worst = topology_over(store.cursor(), W, Settings().analytics, top_n=10)
    rows = slots.filter(slots["level"] == LEAF).sort("at").to_dicts()
    assert [r["hours"] for r in rows] == [72, 96]
    assert [r["slots_16"] for r in rows] == [0, 1]
    assert [r["slots_64"] for r in rows] == [0, 0]
    got = {r["domain"]: r for r in worst.to_dicts()}
    assert got["a"]["stranded_gpu_hours"] == pytest.approx(15 * 168)
    assert got["a"]["hours_without_multi_node_slot"] == pytest.approx(168)
    assert got["b"]["stranded_gpu_hours"] == pytest.approx(15 * 72)
    assert list(got) == ["a", "b"]  # worst first
    with Store.open(db, read_only=True) as store:
        report = build_report(store.cursor(), W, Settings(), now=W.end + timedelta(hours=1))
    text = render_markdown(report, None)
    assert f"64-GPU slots ({LEAF}): mean 0.0, fewest 0" in text
    assert "Worst-fragmented domain: a" in text
    page = render_html(report)
    assert "Worst-fragmented domains" in page and "Topology: multi-node slots" in page

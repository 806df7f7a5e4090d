"""The weekly report's topology-aware What-if on a stored week, checked by hand, and the
same figures as `gpuscope whatif --db` for that week."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpuscope.analytics.report.data import build_report
from gpuscope.analytics.report.html import render_html
from gpuscope.analytics.report.markdown import render_markdown
from gpuscope.analytics.report.week import Week
from gpuscope.cli.main import main
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings

LEAF = "network.topology.nvidia.com/leaf"
W = Week(2025, 10)
GROUP = {"kueue.x-k8s.io/pod-group-name": "train"}
GROUP_ANN = {"kueue.x-k8s.io/pod-group-total-count": "2",
             "kueue.x-k8s.io/podset-required-topology": LEAF}  # fmt: skip


def node(name: str, leaf: str) -> NodeInfo:
    return NodeInfo(name=name, allocatable_gpus=8, cpu_milli=64_000, labels={LEAF: leaf})


def pod(name: str, where: str | None, gpus: int, at: float, **kw: Any) -> PodInfo:
    return PodInfo(namespace="t", name=name, uid=name, node=where,
                   phase="Running" if where else "Pending", start_time=at,
                   gpu_request=gpus, **kw)  # fmt: skip


def store_week(db: Path) -> None:
    """Leaves a (a1, a2) and b (b1, b2). In the first minutes four 4-GPU pods start and run
    all week (on a1, a1, a2, a2); at hour 1 a 2 x 8 GPU pod group that requires one leaf
    arrives and waits all week. Replayed: LeastAllocated spreads the four pods, 4 GPUs left
    on every node, and the group never starts; packing (TAS BestFit, KAI) fills leaf a and
    starts the group in leaf b at its arrival."""
    t0 = W.start.timestamp()
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("b2", "b")]
    singles = [pod(f"s{i}", n, 4, t0 + 60 * i) for i, n in enumerate(["a1", "a1", "a2", "a2"])]
    group = [pod(f"train-{i}", None, 8, t0 + 3600, labels=GROUP, annotations=GROUP_ANN)
             for i in range(2)]  # fmt: skip
    with Store.open(db) as store:
        store.record_inventory(W.start, nodes=nodes, pods=singles)
        store.record_inventory(W.start + timedelta(hours=1), pods=singles + group)


def test_report_says_what_a_topology_aware_policy_would_have_started(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    store_week(db)
    with Store.open(db, read_only=True) as store:
        report = build_report(store.cursor(), W, Settings(), now=W.end + timedelta(hours=1))
    rows = {r["policy"]: r for r in report.tables["whatif_topology"].to_dicts()}
    assert set(rows) == {"leastallocated", "mostallocated", "tas-bestfit", "kai-fullest",
                         "what happened"}  # fmt: skip
    # the group really waited all week: never started, 167 h queued
    assert rows["what happened"]["multi_node_never_started"] == 1
    assert rows["what happened"]["multi_node_started"] == 0
    assert rows["leastallocated"]["multi_node_jobs"] == 1
    assert rows["leastallocated"]["multi_node_never_started"] == 1
    for aware in ("tas-bestfit", "kai-fullest"):
        assert rows[aware]["multi_node_in_one_domain"] == 1
        assert rows[aware]["mean_multi_node_wait_hours"] == 0.0
    assert rows["tas-bestfit"]["level"] == LEAF
    text = render_markdown(report, None)
    assert (
        f"- What if, topology-aware: Of 1 multi-node job, tas-bestfit would have started 1 "
        f"inside one {LEAF} domain" in text
    )
    page = render_html(report)
    assert "What if: topology-aware placement" in page


def test_whatif_db_gives_the_reports_figures(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "w.duckdb"
    store_week(db)
    with Store.open(db, read_only=True) as store:
        report = build_report(store.cursor(), W, Settings(), now=W.end + timedelta(hours=1))
    capsys.readouterr()
    assert main(["whatif", "--db", str(db), "--week", W.label, "--json", "--seeds", "1"]) == 0
    topo = json.loads(capsys.readouterr().out)["topology"]
    assert topo["summary"]["what_happened"]["multi_node_queued_hours"] == 167.0
    for r in report.tables["whatif_topology"].to_dicts():
        got = topo["policies"].get(r["policy"]) or topo["summary"]["what_happened"]
        assert got["multi_node_in_one_domain"] == r["multi_node_in_one_domain"]
        assert got["multi_node_never_started"] == r["multi_node_never_started"]


def test_a_week_over_the_budget_is_said_not_replayed(tmp_path: Path) -> None:
    from gpuscope.analytics.report.whatif_topology import whatif_topology_over
    from gpuscope.analytics.whatif.history import read_history

    db = tmp_path / "w.duckdb"
    store_week(db)
    with Store.open(db, read_only=True) as store:
        history = read_history(store.cursor(), W.start, W.end)
    table, note = whatif_topology_over(history, Settings().analytics, budget=5 * 4 - 1)
    assert table.height == 0
    assert note.startswith("5 jobs on 4 nodes: too many to replay") and "whatif --db" in note
    table, note = whatif_topology_over(history, Settings().analytics, budget=5 * 4)
    assert table.height == 5 and note == ""


def test_what_happened_counts_a_group_started_spread_after_an_hour(tmp_path: Path) -> None:
    """The group arrives at hour 1 and really starts at hour 2 on a1 and b1, two leaves."""
    from gpuscope.analytics.whatif.gangs import history_trace
    from gpuscope.analytics.whatif.gangs_actual import gangs_what_happened
    from gpuscope.analytics.whatif.history import read_history

    t0 = W.start.timestamp()
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("b2", "b")]
    pending = [pod(f"train-{i}", None, 8, t0 + 3600, labels=GROUP, annotations=GROUP_ANN)
               for i in range(2)]  # fmt: skip
    running = [pod(f"train-{i}", n, 8, t0 + 7200, labels=GROUP, annotations=GROUP_ANN)
               for i, n in enumerate(["a1", "b1"])]  # fmt: skip
    db = tmp_path / "w.duckdb"
    with Store.open(db) as store:
        store.record_inventory(W.start + timedelta(hours=1), nodes=nodes, pods=pending)
        store.record_inventory(W.start + timedelta(hours=2), pods=running)
    with Store.open(db, read_only=True) as store:
        history = read_history(store.cursor(), W.start, W.end)
    got = gangs_what_happened(history, history_trace(history))
    assert (got["multi_node_started"], got["multi_node_spread"], got["multi_node_waited"]) == (
        1, 1, 1
    )  # fmt: skip
    assert got["mean_multi_node_wait_hours"] == 1.0

"""The API's utilization by cluster and by node from fleet node summaries (docs/api.md;
gpuscope/collector/http_api/api_node_summaries.py): each node summary stored as fleet mode
stores it (one sample a node and 5-minute bucket, at the bucket's last second), a node at
its ``gpuscope:node_utilization_mean`` over its ``gpuscope:node_gpus``, the cluster the
GPU-weighted mean over nodes; with change-only storage each value carried within the hour
where the node's agent is present."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuscope.collector.http_api.api_node_summaries import NOTE
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store

T0 = datetime(2025, 3, 3, 10, 0, 0, tzinfo=UTC)  # on the hour
BUCKET = 300
UTIL = "gpuscope_gpu_utilization_ratio"
GPUS, MEAN, AGENT = "gpuscope:node_gpus", "gpuscope:node_utilization_mean", "gpuscope_agent_info"
TYPES = {UTIL: "gauge", GPUS: "gauge", MEAN: "gauge", AGENT: "gauge"}
#: two nodes under summaries: n1 with 8 GPUs at 0.5 for three buckets then 0.2, n2 with 4
#: GPUs at 0.8
N1, N2 = (("n1", 8.0), ("n2", 4.0))


def at(k: float) -> datetime:
    """The start of bucket ``k`` after T0."""
    return T0 + timedelta(seconds=k * BUCKET)


def n1_mean(k: int) -> float:
    return 0.5 if k < 3 else 0.2


def _bucket(k: int, stored: list[tuple[str, str, float]], agents: list[str]) -> Batch:
    """One fleet cycle: the summaries ``stored`` (metric, node, value) and the agents seen,
    at bucket ``k``'s last second."""
    names = [m for m, _, _ in stored] + [AGENT] * len(agents)
    labels = [(("node", n),) for _, n, _ in stored]
    labels += [(("node", n), ("version", "1")) for n in agents]
    values = [v for _, _, v in stored] + [1.0] * len(agents)
    ts = int((at(k) + timedelta(seconds=BUCKET - 1)).timestamp() * 1000)
    return Batch("fleet", ts, names, labels, values, TYPES)


def _direct(t: datetime, node: str, value: float) -> Batch:
    gpu = (("gpu", "0"), ("node", node), ("uuid", f"GPU-{node}"))
    return Batch("direct", int(t.timestamp() * 1000), [UTIL], [gpu], [value], TYPES)


@pytest.fixture(scope="module")
def every(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """Every node summary in every bucket, for six buckets; and a GPU scraped directly on
    n3 (0.99), and one on n1 (0.9), which is read from its summaries instead."""
    with Store.open(tmp_path_factory.mktemp("every") / "s.duckdb") as s:
        for t in range(0, 6 * BUCKET, 60):
            when = T0 + timedelta(seconds=t)
            s.append_cycle([(_direct(when, "n3", 0.99), 0.01), (_direct(when, "n1", 0.9), 0.01)])
        for k in range(6):
            stored = [(GPUS, "n1", 8.0), (MEAN, "n1", n1_mean(k))]
            stored += [(GPUS, "n2", 4.0), (MEAN, "n2", 0.8)]
            s.append_cycle([(_bucket(k, stored, ["n1", "n2"]), 0.01)])
        yield s


@pytest.fixture(scope="module")
def changes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """Change-only storage over 14 buckets (10:00-11:10): n1's summaries stored at bucket 0,
    its mean again where it changed (bucket 3) and everything in the hour's last bucket
    (11, 10:55); n2's at bucket 0 only, its agent gone from bucket 4 and back at 12-13
    with nothing stored since 10:00 (more than an hour before)."""
    with Store.open(tmp_path_factory.mktemp("changes") / "s.duckdb") as s:
        _store_changes(s)
        yield s


def _store_changes(s: Store) -> None:
    for k in range(14):
        stored: list[tuple[str, str, float]] = []
        if k in (0, 11):
            stored += [(GPUS, "n1", 8.0), (MEAN, "n1", n1_mean(k))]
        elif k == 3:
            stored += [(MEAN, "n1", n1_mean(k))]
        if k == 0:
            stored += [(GPUS, "n2", 4.0), (MEAN, "n2", 0.8)]
        agents = ["n1", "n2"] if k < 4 or k >= 12 else ["n1"]
        s.append_cycle([(_bucket(k, stored, agents), 0.01)])


def view(
    store: Store, by: str, lo: float, hi: float, step: float, **filters: str
) -> dict[str, Any]:
    """GET /api/v1/utilization over buckets [lo, hi): {key: [[ts, value, gpus], ...]}."""
    from fastapi.testclient import TestClient

    from gpuscope.collector.gauges.metrics import CollectorMetrics
    from gpuscope.collector.http_api.api import ApiState, create_app
    from gpuscope.collector.scraping.targets import TargetRegistry

    state = ApiState(store=store, targets=TargetRegistry([]), metrics=CollectorMetrics())
    params = {"by": by, "step": step, "start": at(lo).isoformat(), "end": at(hi).isoformat(),
              **filters}  # fmt: skip
    r = TestClient(create_app(state)).get("/api/v1/utilization", params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    return {"note": body["note"], "total": body["total"],
            **{s["key"]: s["points"] for s in body["series"]}}  # fmt: skip


def ts(k: float) -> float:
    return at(k).timestamp()


def test_by_node_is_each_nodes_mean_over_its_gpus(every: Store) -> None:
    got = view(every, "node", 0, 6, BUCKET)
    assert got.pop("note") == NOTE and got.pop("total") == 3
    assert got["n1"] == [[ts(k), pytest.approx(n1_mean(k)), 8] for k in range(6)]
    assert got["n2"] == [[ts(k), pytest.approx(0.8), 4] for k in range(6)]
    # a node scraped directly is read from its GPUs' series; n1's direct GPU is not
    # counted again
    assert got["n3"] == [[ts(k), pytest.approx(0.99), 1] for k in range(6)]


def test_by_cluster_is_the_gpu_weighted_mean_over_nodes(every: Store) -> None:
    got = view(every, "cluster", 0, 6, BUCKET)
    assert got["note"] == NOTE and got["total"] == 1
    # (0.5 x 8 + 0.8 x 4 + 0.99) / 13, then 0.2 for n1: not the mean of the nodes' means
    want = [(n1_mean(k) * 8 + 0.8 * 4 + 0.99) / 13 for k in range(6)]
    assert got["cluster"] == [[ts(k), pytest.approx(w), 13] for k, w in enumerate(want)]
    # a half hour: each node at the GPU-weighted mean of its buckets
    half = view(every, "cluster", 0, 6, 6 * BUCKET)["cluster"]
    assert half == [[ts(0), pytest.approx((0.35 * 8 + 0.8 * 4 + 0.99) / 13), 13]]
    # node summaries know no namespaces: a namespace filter reads the GPUs' own series only
    only = view(every, "cluster", 0, 6, BUCKET, namespace="ml")
    assert only == {"note": "", "total": 0}
    # a finer step: each point its bucket's value
    fine = view(every, "cluster", 0, 2, 60)["cluster"]
    assert [p[0] for p in fine] == [ts(0) + 60 * i for i in range(10)]
    assert [p[1] for p in fine] == pytest.approx([want[0]] * 10)


def test_change_only_values_are_carried_within_the_hour_where_the_agent_is(
    changes: Store,
) -> None:
    nodes = view(changes, "node", 0, 14, BUCKET)
    assert nodes["n1"] == [[ts(k), pytest.approx(n1_mean(k)), 8] for k in range(14)]
    # n2 gone from bucket 4; back at 11:00 with its last value an hour old: not counted
    assert nodes["n2"] == [[ts(k), pytest.approx(0.8), 4] for k in range(4)]
    cluster = view(changes, "cluster", 0, 14, BUCKET)["cluster"]
    want = [[ts(k), pytest.approx((n1_mean(k) * 8 + 0.8 * 4) / 12), 12] for k in range(4)]
    want += [[ts(k), pytest.approx(0.2), 8] for k in range(4, 14)]
    assert cluster == want
    # a range that starts after the value was stored reads it
    assert view(changes, "node", 5, 7, BUCKET)["n1"] == [[ts(5), pytest.approx(0.2), 8],
                                                         [ts(6), pytest.approx(0.2), 8]]  # fmt: skip


def test_rolled_up_buckets_give_the_same_answer(changes: Store, tmp_path: Path) -> None:
    """Past the 5-minute roll-up's frontier the node summaries are read from it."""
    with Store.open(tmp_path / "rolled.duckdb") as rolled:
        _store_changes(rolled)
        rolled.apply_retention(at(14) + timedelta(minutes=2))
        cur = rolled.cursor()
        frontier = cur.execute("SELECT value FROM meta WHERE key = 'rollup_5m_until'").fetchone()
        cur.close()
        assert frontier and datetime.fromisoformat(frontier[0]) >= at(12).replace(tzinfo=None)
        for by in ("node", "cluster"):
            for step in (BUCKET, 3600.0, 60.0):
                got, want = view(rolled, by, 0, 14, step), view(changes, by, 0, 14, step)
                assert len(want) > 2  # series besides the note and total: it has teeth
                assert got.keys() == want.keys() and got["note"] == want["note"]
                for key in got.keys() - {"note", "total"}:
                    assert got[key] == [pytest.approx(p) for p in want[key]], (by, step, key)

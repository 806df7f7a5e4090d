"""The idle detector's full re-analysis reads the week from the roll-ups (``rollup_prior``
in gpuscope/analytics/sql/idle.sql). Its buckets carry a number per activity key rather
than the key's name, to halve what the query holds at once (the demo's memory peak,
issue 39); here its answers are held equal, column for column, to those of the query as
it was, with the name on every bucket (kept below as the reference), on a history with
each case the query tells apart: DCGM SM activity beside NVML utilization, utilization
alone, a gap idle on both sides (bridged), a gap next to busy data (coverage restarts),
and fractional pods on a shared GPU judged on their own keys, one of them with two series
(two processes) for its key.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analytics.detectors.idle import HISTORY, LOOKBACK, Q
from gpuscope.analytics.detectors.idle_gaps import with_rule
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 2, 0, 0)
END = T0 + timedelta(hours=8)
EPOCH = datetime(1970, 1, 1)
MIN = timedelta(minutes=1)

#: ``rollup_prior`` as it was before the keys were numbered: the reference.
REFERENCE = """
WITH {busy_series},
buckets AS (
    SELECT b.key AS uuid, b.signal, r.bucket, max(r.max / b.share) AS max
    FROM samples_5m AS r JOIN busy_series AS b USING (series_id)
    WHERE r.bucket >= $since AND r.bucket < $lo
    GROUP BY ALL
),
gaps AS (
    SELECT *, epoch(bucket) - epoch(lag(bucket) OVER w) AS gap_s,
           lag(max) OVER w >= $threshold AS before_busy, max >= $threshold AS after_busy
    FROM buckets WINDOW w AS (PARTITION BY uuid ORDER BY bucket)
),
gappy AS (SELECT DISTINCT uuid FROM gaps WHERE gap_s > 900),
learned AS (
    SELECT uuid, bucket,
           coalesce(median(gap_s) OVER (PARTITION BY uuid ORDER BY bucket
                                        ROWS BETWEEN 8 PRECEDING AND 1 PRECEDING),
                    median(gap_s) OVER (PARTITION BY uuid ORDER BY bucket
                                        ROWS BETWEEN 1 FOLLOWING AND 8 FOLLOWING))
               AS usual_s
    FROM gaps SEMI JOIN gappy USING (uuid)
),
judged AS (SELECT g.*, l.usual_s FROM gaps AS g LEFT JOIN learned AS l USING (uuid, bucket))
SELECT uuid,
       max(bucket + INTERVAL 5 MINUTE) FILTER (WHERE max >= $threshold) AS last_busy_ts,
       arg_max(max, bucket) FILTER (WHERE max >= $threshold) AS last_busy_value,
       least(max(bucket) + INTERVAL 5 MINUTE, $lo) AS last_sample_ts,
       coalesce(max(bucket) FILTER (WHERE gap_s > 3 * greatest($declared_s, 300,
                                    coalesce(usual_s, least(gap_s, $lookback_s / 3)))
                                    AND NOT {bridged}),
                min(bucket)) AS covered_since,
       any_value(signal) AS signal,
       NULL::DOUBLE AS spacing
FROM judged GROUP BY uuid
"""


def _reference() -> str:
    text = files("gpuscope.analytics").joinpath("sql", "idle.sql").read_text(encoding="utf-8")
    block = text.split("-- name: busy_series\n", 1)[1].split("\n-- name:", 1)[0]
    body = "\n".join(line for line in block.splitlines() if not line.startswith("--"))
    return with_rule(REFERENCE.replace("{busy_series}", body.strip()))


def _gpu(uuid: str, index: int) -> dict[str, str]:
    return {"node": "n1", "gpu": str(index), "uuid": uuid, "mig_instance": ""}


def _pod(name: str, fraction: float | None) -> PodInfo:
    return PodInfo(
        namespace="ml", name=name, uid=name, node="n1", phase="Running",
        start_time=(T0 - EPOCH).total_seconds(), gpu_request=1, gpu_fraction=fraction,
        project="ml", owner_kind="", owner_name="", pending_reason="",
    )  # fmt: skip


def _values(ts: datetime) -> list[tuple[str, dict[str, str], float]]:
    """Every series' sample at ``ts`` (metric, labels, value); none where its data has a
    gap then."""
    h = (ts - T0) / timedelta(hours=1)
    out: list[tuple[str, dict[str, str], float]] = []
    a, b, c = _gpu("GPU-a", 0), _gpu("GPU-b", 1), _gpu("GPU-c", 2)
    # DCGM: SM activity busy for 2 h, NVML utilization high throughout (SM activity wins)
    out.append(("gpuscope_gpu_sm_active_ratio", a, 0.7 if h < 2 else 0.01))
    out.append(("gpuscope_gpu_utilization_ratio", a, 0.9))
    # NVML only: idle, a 40-minute gap at 3 h idle on both sides (bridged), a 30-minute
    # gap at 5 h after a busy stretch (coverage restarts), idle after
    if not (3 <= h < 3 + 40 / 60 or 5 <= h < 5.5):
        out.append(("gpuscope_gpu_utilization_ratio", b, 0.6 if 4.5 <= h < 5 else 0.02))
    # a shared GPU: its own utilization, and two fractional pods' per-process readings
    out.append(("gpuscope_gpu_utilization_ratio", c, 0.3))
    for pod, pid, value in (("p1", "11", 0.04 if h < 6 else 0.3), ("p1", "12", 0.01),
                            ("p2", "21", 0.2 if h < 1 else 0.005)):  # fmt: skip
        if pod == "p2" and 6 <= h < 6.5:
            continue  # p2's readings stop a while (a gap on its own key only)
        who = c | {"namespace": "ml", "pod": pod, "container": "main", "pid": pid}
        out.append(("gpuscope_gpu_workload_utilization_ratio", who, value))
    return out


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "prior.duckdb")
    node = NodeInfo(name="n1", gpu_model="H100", allocatable_gpus=3, cpu_milli=64000)
    s.record_inventory(T0, nodes=[node], pods=[_pod("p1", 0.5), _pod("p2", 0.25)], quotas=[])
    t = T0
    while t <= END:
        rows = _values(t)
        ms = int(t.replace(tzinfo=UTC).timestamp() * 1000)
        names = [m for m, _, _ in rows]
        labels = [tuple(sorted(lab.items())) for _, lab, _ in rows]
        s.append_cycle([(Batch("n1", ms, names, labels, [v for *_, v in rows], {}), 0.01)])
        t += MIN
    s.apply_retention(END + timedelta(hours=1))
    return s


def _answer(store: Store, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = store.cursor()
    try:
        rows = cur.sql(sql, params=params).to_arrow_table().to_pylist()
    finally:
        cur.close()
    return sorted(rows, key=lambda r: r["uuid"])


@pytest.mark.parametrize("threshold", [0.05, 0.5])
def test_numbered_keys_answer_as_the_named_keys_did(store: Store, threshold: float) -> None:
    at = END
    params: dict[str, Any] = {
        "at": at, "threshold": threshold, "memory": False, "declared_s": 60.0,
        "lookback_s": LOOKBACK.total_seconds(), "lo": END, "since": at - HISTORY,
    }  # fmt: skip
    new, old = _answer(store, Q["rollup_prior"], params), _answer(store, _reference(), params)
    assert new == old
    keys = {r["uuid"]: r for r in new}
    # every case is there: the two whole GPUs, the shared one, both pods' own keys
    assert set(keys) == {"GPU-a", "GPU-b", "GPU-c", "GPU-c|ml/p1/main", "GPU-c|ml/p2/main"}
    assert keys["GPU-a"]["signal"] == "sm_active"
    assert keys["GPU-c|ml/p1/main"]["signal"] == "share_utilization"
    if threshold == 0.05:
        # coverage restarted after the gap next to busy data, not after the bridged one
        assert keys["GPU-b"]["covered_since"] == T0 + timedelta(hours=5.5)
        # p1's two processes: the larger reading over its share (0.3 / 0.5) wins
        assert keys["GPU-c|ml/p1/main"]["last_busy_value"] == pytest.approx(0.6)


def test_the_busy_series_take_each_pods_fraction_from_its_latest_version(store: Store) -> None:
    """A fractional pod's own key, and the share its readings are divided by, come from
    its inventory version at the instant asked: p2's share doubles when its fraction
    does, and p1, made whole in its latest version, has no key of its own any more,
    though an older version had a fraction (an aggregate that skipped a missing fraction
    would take that older one)."""
    later = T0 + timedelta(hours=1)
    node = NodeInfo(name="n1", gpu_model="H100", allocatable_gpus=3, cpu_milli=64000)
    pods = [_pod("p1", None), _pod("p2", 0.5)]
    store.record_inventory(later, nodes=[node], pods=pods, quotas=[])

    def own_keys(at: datetime) -> dict[str, float]:
        cur = store.cursor()
        try:
            rows = cur.execute(Q["busy"], {"at": at, "memory": False}).fetchall()
        finally:
            cur.close()
        return {key: share for _, key, signal, share, _ in rows if signal == "share_utilization"}

    assert own_keys(T0 + 30 * MIN) == {"GPU-c|ml/p1/main": 0.5, "GPU-c|ml/p2/main": 0.25}
    assert own_keys(later + 30 * MIN) == {"GPU-c|ml/p2/main": 0.5}

"""A constructed fortnight for the weekly report's tests, with its hand-computed answers.

Week 2025-W10 (Mon 2025-03-03 .. Mon 2025-03-10) and the week before. Two nodes of 4 GPUs.
Who held which GPU comes through the collector's write path (``append_scrape`` of
``gpuscope_gpu_workload_info`` at the moments pods come and go; the inventory through
``record_inventory``); utilization is written as the 5-minute roll-ups the collector keeps
(``samples_5m``, frontier at the end of W10), one bucket per GPU per 5 minutes.

W10 (168 h); Thursday 2025-03-06 has no sample of any GPU (the collector was down):

======================  =====================  ===========================================
pod                     GPUs                   utilization
======================  =====================  ===========================================
vision/train-a          n1 g0, g1 (all week)   0.8 (W09: 0.6)
nlp/nb-b (notebook)     n1 g2, Mon-Tue (48 h)  0.5 for 12 h, then 0.0
nlp/infer-c             half of n2 g4          0.4
vision/nb-d (notebook)  n2 g5 (all week)       0.02
======================  =====================  ===========================================

By hand (GPU-hours): train-a 336 allocated, 48 no data, used 0.8 x 288 = 230.4; nb-b 48,
used 6, idle 36; infer-c 84, 12 no data, used 0.4 x 72 = 28.8; nb-d 168, 24 no data, idle
144, used 0.02 x 144 = 2.88. Cluster: allocated 636, used 268.08, idle 180, no data 84,
efficiency 268.08 / 552. W09: train-a alone, 336 allocated, used 201.6.
Quotas: vision 4, nlp 1 (1.5 GPUs held for the first 48 h: 24 GPU-hours over), empty 2
(no usage at all).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo, QuotaInfo
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store

W09 = datetime(2025, 2, 24)
W10 = datetime(2025, 3, 3)
W11 = datetime(2025, 3, 10)
WED = datetime(2025, 3, 5)
THU = datetime(2025, 3, 6)
FRI = datetime(2025, 3, 7)
NOW = datetime(2025, 3, 10, 7, 0, tzinfo=UTC)
INFO = "gpuscope_gpu_workload_info"
UTIL = "gpuscope_gpu_utilization_ratio"

NODES = [
    NodeInfo(name="n1", gpu_model="H100", allocatable_gpus=4, cpu_milli=64000),
    NodeInfo(name="n2", gpu_model="H100", allocatable_gpus=4, cpu_milli=64000),
]


def pod(
    ns: str,
    name: str,
    node: str,
    *,
    gpus: int = 0,
    fraction: float | None = None,
    kind: str = "training",
    labels: dict[str, str] | None = None,
) -> PodInfo:
    return PodInfo(
        namespace=ns,
        name=name,
        uid=name,
        node=node,
        phase="Running",
        start_time=None,
        gpu_request=gpus,
        gpu_fraction=fraction,
        project=ns,
        owner_kind="StatefulSet" if kind == "interactive" else "PyTorchJob",
        owner_name=name,
        labels=labels or {},
    )


A = pod("vision", "train-a", "n1", gpus=2)
B = pod("nlp", "nb-b", "n1", gpus=1, kind="interactive")
C = pod("nlp", "infer-c", "n2", fraction=0.5)
D = pod(
    "vision", "nb-d", "n2", gpus=1, kind="interactive", labels={"hub.jupyter.org/username": "dana"}
)
#: pod name -> (workload kind, GPU indices)
HOLDERS: dict[str, tuple[str, tuple[int, ...]]] = {
    "train-a": ("training", (0, 1)),
    "nb-b": ("interactive", (2,)),
    "infer-c": ("inference", (4,)),
    "nb-d": ("interactive", (5,)),
}


def uuid(index: int) -> str:
    return f"GPU-{index}"


def _ms(t: datetime) -> int:
    return int(t.replace(tzinfo=UTC).timestamp() * 1000)


def _scrape(store: Store, t: datetime, node: str, holders: list[PodInfo]) -> None:
    """One scrape of ``node``: its GPUs' utilization (unused by the report: roll-ups win)
    and which pods hold them."""
    names, labels, values = [], [], []
    base = 0 if node == "n1" else 4
    for i in range(base, base + 4):
        g = {"node": node, "gpu": str(i % 4), "uuid": uuid(i), "mig_instance": ""}
        names.append(UTIL)
        labels.append(tuple(sorted(g.items())))
        values.append(0.0)
    for p in holders:
        kind, indices = HOLDERS[p.name]
        for i in indices:
            info = {
                "node": node,
                "gpu": str(i % 4),
                "uuid": uuid(i),
                "mig_instance": "",
                "namespace": p.namespace,
                "pod": p.name,
                "container": "main",
                "workload_kind": kind,
                "interactive": str(kind == "interactive").lower(),
                "project": p.project,
            }
            names.append(INFO)
            labels.append(tuple(sorted(info.items())))
            values.append(1.0)
    store.append_scrape(Batch(node, _ms(t), names, labels, values, {INFO: "gauge"}))


def utilization(index: int, t: datetime) -> float | None:
    """GPU ``index``'s utilization in the 5-minute bucket starting at ``t``."""
    if THU <= t < FRI:
        return None  # the collector was down all Thursday
    if index in (0, 1):
        return 0.6 if t < W10 else 0.8
    if index == 2:
        return 0.5 if W10 <= t < W10 + timedelta(hours=12) else 0.0
    if index == 4:
        return 0.4
    if index == 5:
        return 0.02
    return 0.0


def _rollups(store: Store) -> None:
    con = store.cursor()
    sids = dict(
        con.execute(f"SELECT uuid, series_id FROM series WHERE metric = '{UTIL}'").fetchall()
    )
    rows: dict[str, list[Any]] = {k: [] for k in ("series_id", "bucket", "v")}
    t = W09
    while t < W11:
        for i in range(8):
            v = utilization(i, t)
            if v is not None:
                rows["series_id"].append(sids[uuid(i)])
                rows["bucket"].append(t)
                rows["v"].append(v)
        t += timedelta(minutes=5)
    con.register("r", pa.table(rows))
    con.execute(
        "INSERT INTO rollup_5m_rows (series_id, bucket, max, sum, count) "
        "SELECT series_id, bucket, v, v * 20, 20 FROM r"
    )
    _ib(con)
    con.execute("INSERT OR REPLACE INTO meta VALUES ('rollup_5m_until', ?)", [W11.isoformat()])
    con.close()


#: n1 mlx5_0 port 1 runs at 90 % of its 50 GB/s for 10 hours from Tue 08:00; else 10 %.
HOT_FROM, HOT_HOURS, LINK = datetime(2025, 3, 4, 8), 10, 50e9


def _ib(con: Any) -> None:
    metrics = (
        "gpuscope_ib_transmit_bytes_total",
        "gpuscope_ib_receive_bytes_total",
        "gpuscope_ib_port_rate_bytes_per_second",
    )
    for k, m in enumerate(metrics):
        con.execute(
            "INSERT INTO series VALUES (?, ?, ?, 'n1', NULL, NULL, NULL, 'mlx5_0', '1', NULL, "
            "NULL, NULL, MAP {}, ?, ?, NULL)",
            [1000 + k, m, "gauge" if k == 2 else "counter", W09, W11],
        )
    con.execute(
        """INSERT INTO rollup_5m_rows (series_id, bucket, max, sum, count)
        SELECT 1000 + k, b, v, v, 5 FROM (
            SELECT k, b, CASE WHEN k = 2 THEN $link
                  WHEN k = 0 AND b >= $hot AND b < $hot + to_hours($hours) THEN 0.9 * $link * 300
                  ELSE 0.1 * $link * 300 END AS v
            FROM range(3) AS kk(k),
                 (SELECT unnest(range($lo, $hi, INTERVAL 5 MINUTE)) AS b) AS bb)""",
        {"link": LINK, "hot": HOT_FROM, "hours": HOT_HOURS, "lo": W10, "hi": THU},
    )


def actions(store: Store) -> None:
    """The executor's log: a deletion carried out, a dry-run stop, a warning; one last week."""
    rec = {"policy": "idle-notebooks", "reason": "idle 2 h"}
    store.record_actions(
        [
            {
                "id": "a1",
                "kind": "idle_session",
                "at": WED,
                "dry_run": False,
                "result": "ok",
                "action": "delete",
                "namespace": "nlp",
                "pod": "nb-b",
                "node": "n1",
                "gpus": 1.0,
                "gpu_hours_freed": 12.0,
                **rec,
            },
            {
                "id": "a2",
                "kind": "idle_session",
                "at": FRI,
                "dry_run": True,
                "result": "planned",
                "action": "stop-notebook",
                "namespace": "vision",
                "pod": "nb-d",
                "node": "n2",
                "gpus": 1.0,
                "gpu_hours_freed": 60.0,
                **rec,
            },
            {
                "id": "a3",
                "kind": "idle_session",
                "at": FRI,
                "dry_run": False,
                "result": "ok",
                "action": "warn",
                "namespace": "vision",
                "pod": "nb-d",
                "node": "n2",
                "gpus": 1.0,
                "gpu_hours_freed": None,
                **rec,
            },
            {
                "id": "a0",
                "kind": "idle_session",
                "at": W09 + timedelta(days=1),
                "dry_run": False,
                "result": "ok",
                "action": "delete",
                "namespace": "nlp",
                "pod": "old",
                "node": "n1",
                "gpus": 1.0,
                "gpu_hours_freed": 99.0,
                **rec,
            },
        ],
        W11,
    )


def build(path: Path) -> Path:
    """The constructed fortnight in a new store at ``path``."""
    quotas = [
        QuotaInfo(project="vision", guaranteed_gpus=4, source="config"),
        QuotaInfo(project="nlp", guaranteed_gpus=1, source="config"),
        QuotaInfo(project="empty", guaranteed_gpus=2, source="config"),
    ]
    with Store.open(path) as store:
        store.record_inventory(W09, nodes=NODES, pods=[A], quotas=quotas)
        _scrape(store, W09, "n1", [A])
        store.record_inventory(W10, pods=[A, B, C, D])
        _scrape(store, W10, "n1", [A, B])
        _scrape(store, W10, "n2", [C, D])
        store.record_inventory(WED, pods=[A, C, D])
        _scrape(store, WED, "n1", [A])
        _rollups(store)
        actions(store)
    return path

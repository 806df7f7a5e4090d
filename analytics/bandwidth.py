"""InfiniBand bandwidth hot spots, link errors and rail imbalance.

Distributed training on a rail-optimised network drives every rail (one HCA per GPU) alike;
a port that stays near its link rate slows the whole job, a port whose error counters climb
is a cable or transceiver going bad, and one hot rail beside idle peers is a job whose
traffic does not spread over the rails (NCCL topology, a missing HCA in the pod spec).

Definitions (``W`` = ``ib_hot_window_minutes``, ``H`` = ``ib_hot_ratio``):

* Only samples in ``(at - W - a little, at]`` are read: a scheduled run costs the window,
  not the history (samples are stored in time order, so DuckDB skips other row groups by
  their min/max). Counter samples are increases since the previous sample, so the rate of
  each sub-interval between two samples is ``increase / seconds`` and a counter reset is a
  small increase (the new value), never a spike.
* A port's *ratio* is the time-weighted average throughput of its busier direction over the
  window, divided by ``gpuscope_ib_port_rate_bytes_per_second`` (its last value).
* ``bandwidth_hotspot``: the ratio is at least ``H`` **and** sub-intervals over ``H`` make up
  at least :data:`HOT_SHARE` of the window's time **and** the samples cover at least
  :data:`COVERAGE` of the window. The average alone would call a short burst hot when it is
  far over ``H``; every-sub-interval alone would let one late or merged scrape hide a
  saturated link. The transmit-wait rate (congestion ticks per second) is evidence; the
  workloads then holding GPUs on the node (open workload intervals) are attributed.
* ``link_errors``: a ``gpuscope_ib_errors_total`` counter increased in the window; the
  severity is the worst of its types (:data:`ERROR_SEVERITY`).
* ``rail_imbalance``: a node with a hot port where every other port is under
  :data:`IDLE_RATIO` of its link rate (and there is at least one such idle peer): the
  traffic is not spread over the rails. All rails hot is saturation, not imbalance.

NVLink and PCIe counters have no link-rate gauge in the metric catalogue, so no ratio can
be formed for them; they are left to the dashboards until the agent exports their rates.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from importlib.resources import files
from typing import Any

import duckdb

from analytics.base import Analysis
from collector.store import utc
from gpuscope.records import Finding, Severity, finding_id
from gpuscope.settings import AnalyticsSettings

KINDS: tuple[str, ...] = ("bandwidth_hotspot", "link_errors", "rail_imbalance")
#: Share of the window's time a direction must spend over the hot ratio.
HOT_SHARE = 0.8
#: Share of the window the samples must cover before a port can be called hot.
COVERAGE = 0.9
#: A rail under this share of its link rate counts as idle beside a hot peer.
IDLE_RATIO = 0.2
#: How much before the window is read, to find the sample that starts its first step.
LOOKBACK = timedelta(minutes=2)
#: Severity by error type; a type not listed is ``info`` (discards under congestion and
#: constraint errors happen in healthy fabrics).
ERROR_SEVERITY: dict[str, Severity] = {
    "link_downed": "critical",
    "symbol_error": "warning",
    "link_error_recovery": "warning",
    "port_rcv_errors": "warning",
    "local_link_integrity_errors": "warning",
    "excessive_buffer_overrun_errors": "warning",
    "port_rcv_remote_physical_errors": "warning",
}
_RANK: dict[str, int] = {"info": 0, "warning": 1, "critical": 2}


def _load_queries(name: str) -> dict[str, str]:
    text = files("analytics").joinpath("sql", name).read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    return {n: body.strip() for n, body in zip(parts[1::2], parts[2::2], strict=True)}


Q = _load_queries("bandwidth.sql")


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def _port_subject(node: str, device: str, port: str) -> dict[str, str]:
    return {"node": node, "device": device, "port": port}


def _rail(p: dict[str, Any]) -> dict[str, Any]:
    return {"device": p["device"], "port": p["port"], "ratio": _r(p["ratio"])}


def run_bandwidth(
    con: duckdb.DuckDBPyConnection, at: datetime, settings: AnalyticsSettings
) -> Analysis:
    """Hot, erroring and imbalanced IB ports in the window ending at ``at``.

    ``con`` is a cursor on the store (read-only use). Pure: the same store and time give
    the same answer, so ``--at`` re-runs any past window of raw samples.
    """
    at = utc(at)
    window = timedelta(minutes=settings.ib_hot_window_minutes)
    lo = at - window
    params: dict[str, Any] = {"at": at, "lo": lo, "read_lo": lo - max(LOOKBACK, window / 5)}
    params |= {"hot": settings.ib_hot_ratio, "hot_share": HOT_SHARE}
    params |= {"coverage": COVERAGE, "idle": IDLE_RATIO}
    cur = con.execute(Q["port_stats"], params)
    names = [d[0] for d in cur.description or ()]
    ports = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    errors = con.execute(Q["port_errors"], {"at": at, "lo": lo}).fetchall()

    hot = [p for p in ports if p["hot"]]
    imbalanced = [p for p in hot if p["node_busy_ports"] == p["node_hot_ports"] < p["node_ports"]]
    nodes = sorted({p["node"] for p in hot})
    workloads: dict[str, list[dict[str, Any]]] = {}
    if nodes:
        for node, ns, pod, project, kind, gpus in con.execute(
            Q["node_workloads"], {"at": at, "nodes": nodes}
        ).fetchall():
            workloads.setdefault(node, []).append(
                {"namespace": ns, "pod": pod, "project": project, "kind": kind, "gpus": gpus}
            )

    findings: list[Finding] = []
    for p in hot:
        subject = _port_subject(p["node"], p["device"], p["port"])
        findings.append(
            Finding(
                id=finding_id("bandwidth_hotspot", subject),
                kind="bandwidth_hotspot",
                severity="warning",
                subject=subject,
                since=lo,
                observed_at=at,
                evidence={
                    "ratio": _r(p["ratio"]),
                    "direction": p["direction"],
                    "peak_ratio": _r(p["peak_ratio"]),
                    "share_of_window_hot": _r(p["hot_share"]),
                    "window_minutes": settings.ib_hot_window_minutes,
                    "hot_ratio": settings.ib_hot_ratio,
                    "link_rate_bytes_per_second": p["link_rate_bytes_per_second"],
                    "transmit_bytes_per_second": _r(p["transmit_bytes_per_second"], 1),
                    "receive_bytes_per_second": _r(p["receive_bytes_per_second"], 1),
                    "transmit_wait_per_second": _r(p["transmit_wait_per_second"], 1),
                    "workloads": workloads.get(p["node"], []),
                },
                recommendation=None,
            )
        )
    for node in sorted({p["node"] for p in imbalanced}):
        subject = {"node": node}
        on_node = [q for q in ports if q["node"] == node]
        findings.append(
            Finding(
                id=finding_id("rail_imbalance", subject),
                kind="rail_imbalance",
                severity="warning",
                subject=subject,
                since=lo,
                observed_at=at,
                evidence={
                    "hot_ports": [_rail(q) for q in on_node if q["hot"]],
                    "idle_ports": [_rail(q) for q in on_node if not q["hot"]],
                    "idle_ratio": IDLE_RATIO,
                    "workloads": workloads.get(node, []),
                },
                recommendation=None,
            )
        )

    by_port: dict[tuple[str, str, str], dict[str, int]] = {}
    first: dict[tuple[str, str, str], datetime] = {}
    for node, device, port, type_, increase, first_increase in errors:
        key = (node, device, port)
        by_port.setdefault(key, {})[type_] = int(increase)
        first[key] = min(first.get(key, first_increase), first_increase)
    for (node, device, port), increases in by_port.items():
        severity = max((ERROR_SEVERITY.get(t, "info") for t in increases), key=lambda s: _RANK[s])
        subject = _port_subject(node, device, port)
        findings.append(
            Finding(
                id=finding_id("link_errors", subject),
                kind="link_errors",
                severity=severity,
                subject=subject,
                since=first[(node, device, port)],
                observed_at=at,
                evidence={
                    "increase_by_type": increases,
                    "window_minutes": settings.ib_hot_window_minutes,
                },
                recommendation=None,
            )
        )

    node_max: dict[str, dict[str, Any]] = {}
    for p in ports:
        entry = node_max.setdefault(p["node"], {"node_max_port_ratio": None, "node_hot_ports": 0})
        if p["ratio"] is not None:
            current = entry["node_max_port_ratio"]
            entry["node_max_port_ratio"] = _r(max(p["ratio"], current or 0.0))
        entry["node_hot_ports"] += int(bool(p["hot"]))
    ratios = [p["ratio"] for p in ports if p["ratio"] is not None]
    waits = [p["transmit_wait_per_second"] for p in ports if p["transmit_wait_per_second"]]
    summary: dict[str, Any] = {
        "ports": len(ports),
        "hot_ports": len(hot),
        "max_port_ratio": _r(max(ratios)) if ratios else 0.0,
        "ports_with_errors": len(by_port),
        "ports_congested": len(waits),
        "max_transmit_wait_per_second": _r(max(waits), 1) if waits else 0.0,
        "imbalanced_nodes": len({p["node"] for p in imbalanced}),
        "nodes": node_max,
    }
    return Analysis(kinds=KINDS, findings=findings, summary=summary)

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

* ``rail_imbalance`` also per multi-node job (subject ``{namespace, job}``): a job is the
  pods of one namespace whose names agree once a trailing ``-worker-N``, ``-master-N`` or
  ``-N`` is cut (``llm-worker-0`` .. ``llm-worker-3`` and ``llm-master-0`` are job ``llm``),
  holding GPUs (open workload intervals) on two or more nodes. Its rails are the IB ports
  beside its GPUs: GPU ``i`` on a node uses HCA ``mlx5_i`` there, the rail-optimised layout
  (one HCA per GPU on the same PCIe switch, rail ``i`` switch joining GPU ``i`` of every
  node) that the simulator and DGX/HGX systems use. A job with one hot rail while all its
  other rails are under :data:`IDLE_RATIO` sends its traffic through one rail (NCCL sees
  one HCA, or a ring crosses nodes through one port); a job on one node only is the node's
  finding. A node whose HCAs are named otherwise has no matching rails and no job finding.
* ``nvlink_hotspot`` / ``pcie_hotspot``: a GPU's NVLink or PCIe counters (whole GPUs; the
  store keeps their increases) treated as a port is: the busier direction's time-weighted
  throughput over the window against the link's capacity per direction, hot when the ratio
  is at least ``gpu_link_hot_ratio`` for :data:`HOT_SHARE` of the window with
  :data:`COVERAGE`. No gauge exports those capacities, so they come from the settings
  (``nvlink_bytes_per_second``, ``pcie_bytes_per_second``) by a substring of the GPU's
  ``gpuscope_gpu_info`` ``model`` label; a model no key matches gets no ratio and no
  finding. A saturated NVLink is a tensor-parallel group at its limit; a saturated PCIe
  link is host staging (data loading, CPU offload, GPUDirect not in use). Under fleet
  summaries a link is stored only in buckets over a floor, each sample its bucket's
  increase (a series of kind gauge): its first sample covers its own bucket.

:func:`gpuscope.analytics.detectors.bandwidth_history.bandwidth_history` answers "which
ports were hot when" over a range (a full re-analysis after a rule change, a report).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from importlib.resources import files
from typing import Any

import duckdb

from gpuscope.analytics.base import Analysis
from gpuscope.analytics.detectors.sample_steps import with_steps
from gpuscope.collector.querying.fleet_questions import BUCKET_S
from gpuscope.collector.storage.held_gpus import with_held_gpus
from gpuscope.collector.storage.store import utc
from gpuscope.collector.storage.writer_log import seen_bound
from gpuscope.core.records import Finding, Severity, finding_id
from gpuscope.core.settings import AnalyticsSettings

KINDS: tuple[str, ...] = (
    "bandwidth_hotspot",
    "link_errors",
    "rail_imbalance",
    "nvlink_hotspot",
    "pcie_hotspot",
)
#: GPU link counter -> its finding kind and the settings field with its capacities.
GPU_LINKS: dict[str, tuple[str, str]] = {
    "gpuscope_gpu_nvlink_bytes_total": ("nvlink_hotspot", "nvlink_bytes_per_second"),
    "gpuscope_gpu_pcie_bytes_total": ("pcie_hotspot", "pcie_bytes_per_second"),
}
#: Share of the window's time a direction must spend over the hot ratio.
HOT_SHARE = 0.8
#: Share of the window the samples must cover before a port can be called hot.
COVERAGE = 0.9
#: A rail under this share of its link rate counts as idle beside a hot peer.
IDLE_RATIO = 0.2
#: ``epoch()`` of the store's naive UTC timestamps counts from here.
EPOCH = datetime(1970, 1, 1)
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
    text = files("gpuscope.analytics").joinpath("sql", name).read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    named = zip(parts[1::2], parts[2::2], strict=True)
    return {n: with_steps(with_held_gpus(body.strip())) for n, body in named}


Q = _load_queries("bandwidth.sql")


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def _port_subject(node: str, device: str, port: str) -> dict[str, str]:
    return {"node": node, "device": device, "port": port}


def _rail(p: dict[str, Any]) -> dict[str, Any]:
    return {"device": p["device"], "port": p["port"], "ratio": _r(p["ratio"])}


def read_lookback(window: timedelta) -> timedelta:
    """How much before a window is read, to find the sample that starts its first step."""
    return max(LOOKBACK, window / 5)


def _capacities(settings: AnalyticsSettings) -> dict[str, list[Any]]:
    """The capacity settings as parallel lists, bound as one table in gpu_link_stats."""
    metric: list[str] = []
    pattern: list[str] = []
    capacity: list[float] = []
    for name, (_kind, field) in GPU_LINKS.items():
        for key, value in getattr(settings, field).items():
            metric.append(name)
            pattern.append(key)
            capacity.append(float(value))
    return {"cap_metric": metric, "cap_pattern": pattern, "cap_bytes": capacity}


def _gpu_link_findings(
    con: duckdb.DuckDBPyConnection,
    at: datetime,
    lo: datetime,
    params: dict[str, Any],
    settings: AnalyticsSettings,
) -> tuple[list[Finding], dict[str, Any]]:
    """``nvlink_hotspot`` / ``pcie_hotspot`` findings and their summary numbers."""
    link_params = params | _capacities(settings) | {"hot": settings.gpu_link_hot_ratio}
    link_params = {k: v for k, v in link_params.items() if k != "idle"}
    cur = con.execute(Q["gpu_link_stats"], link_params)
    names = [d[0] for d in cur.description or ()]
    links = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    hot = [g for g in links if g["hot"]]
    holders: dict[tuple[str, str], list[dict[str, Any]]] = {}
    if hot:
        keys = sorted({f"{g['node']}/{g['gpu']}" for g in hot})
        for node, gpu, ns, pod, project, kind in con.execute(
            Q["gpu_workloads"], {"at": at, "gpu_keys": keys}
        ).fetchall():
            holders.setdefault((node, gpu), []).append(
                {"namespace": ns, "pod": pod, "project": project, "kind": kind}
            )
    findings: list[Finding] = []
    for g in hot:
        kind = GPU_LINKS[g["metric"]][0]
        subject = {"node": g["node"], "gpu": g["gpu"], "uuid": g["uuid"]}
        findings.append(
            Finding(
                id=finding_id(kind, subject),
                kind=kind,
                severity="warning",
                subject=subject,
                since=lo,
                observed_at=at,
                evidence={
                    "ratio": _r(g["ratio"]),
                    "direction": g["direction"],
                    "share_of_window_hot": _r(g["hot_share"]),
                    "bytes_per_second": _r(
                        max(g["tx_bytes_per_second"] or 0.0, g["rx_bytes_per_second"] or 0.0), 1
                    ),
                    "tx_bytes_per_second": _r(g["tx_bytes_per_second"], 1),
                    "rx_bytes_per_second": _r(g["rx_bytes_per_second"], 1),
                    "capacity_bytes_per_second": g["capacity_bytes_per_second"],
                    "model": g["model"],
                    "window_minutes": settings.ib_hot_window_minutes,
                    "hot_ratio": settings.gpu_link_hot_ratio,
                    "workloads": holders.get((g["node"], g["gpu"]), []),
                },
                recommendation=None,
            )
        )
    summary: dict[str, Any] = {}
    for metric, (kind, _field) in GPU_LINKS.items():
        prefix = kind.removesuffix("_hotspot")
        ratios = [g["ratio"] for g in links if g["metric"] == metric and g["ratio"] is not None]
        summary[f"{prefix}_gpus"] = sum(g["metric"] == metric for g in links)
        summary[f"{prefix}_hot_gpus"] = sum(g["metric"] == metric for g in hot)
        summary[f"max_{prefix}_ratio"] = _r(max(ratios)) if ratios else 0.0
    return findings, summary


def _job_findings(
    con: duckdb.DuckDBPyConnection,
    at: datetime,
    lo: datetime,
    ports: list[dict[str, Any]],
) -> list[Finding]:
    """``rail_imbalance`` per multi-node job: one of its rails hot, all others idle."""
    by_rail: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in ports:
        if p["ratio"] is not None:
            by_rail.setdefault((p["node"], p["device"]), []).append(p)
    jobs: dict[tuple[str, str], list[tuple[str, dict[str, Any], list[str]]]] = {}
    for ns, job, node, device, pods in con.execute(Q["job_rails"], {"at": at}).fetchall():
        for p in by_rail.get((node, device), []):
            jobs.setdefault((ns, job), []).append((node, p, list(pods)))
    findings: list[Finding] = []
    for (ns, job), rails in sorted(jobs.items()):
        hot = [r for r in rails if r[1]["hot"]]
        idle = [r for r in rails if not r[1]["hot"] and r[1]["ratio"] < IDLE_RATIO]
        if not hot or not idle or len(hot) + len(idle) < len(rails):
            continue
        subject = {"namespace": ns, "job": job}

        def rail(r: tuple[str, dict[str, Any], list[str]]) -> dict[str, Any]:
            return {"node": r[0], **_rail(r[1]), "pods": r[2]}

        findings.append(
            Finding(
                id=finding_id("rail_imbalance", subject),
                kind="rail_imbalance",
                severity="warning",
                subject=subject,
                since=lo,
                observed_at=at,
                evidence={
                    "hot_rails": [rail(r) for r in hot],
                    "idle_rails": [rail(r) for r in idle],
                    "nodes": sorted({r[0] for r in rails}),
                    "idle_ratio": IDLE_RATIO,
                },
                recommendation=None,
            )
        )
    return findings


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
    read_lo = lo - read_lookback(window)
    # series.last_seen lags a series' newest sample (collector/storage/writer_log.py)
    params: dict[str, Any] = {"at": at, "lo": lo, "read_lo": read_lo}
    params |= {"seen_lo": seen_bound(read_lo)}
    params |= {"hot": settings.ib_hot_ratio, "hot_share": HOT_SHARE}
    params |= {"coverage": COVERAGE, "idle": IDLE_RATIO}
    params |= {"bucket_s": BUCKET_S}  # a fleet summary's sample: one bucket's increase
    cur = con.execute(Q["port_stats"], params)
    names = [d[0] for d in cur.description or ()]
    ports = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    err_params = {"at": at, "lo": lo, "seen_lo": seen_bound(lo)}
    errors = con.execute(Q["port_errors"], err_params).fetchall()

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

    job_findings = _job_findings(con, at, lo, ports) if hot else []
    findings += job_findings
    link_findings, link_summary = _gpu_link_findings(con, at, lo, params, settings)
    findings += link_findings

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
        "imbalanced_jobs": len(job_findings),
        "nodes": node_max,
    } | link_summary
    return Analysis(kinds=KINDS, findings=findings, summary=summary)

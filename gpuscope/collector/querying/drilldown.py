"""A finding's per-GPU and per-port series, asked of the engine on demand.

Why: with fleet summaries (:mod:`gpuscope.collector.querying.fleet_summaries`) the store
keeps per-workload, per-node and hot-port aggregates, not every GPU's series; what a user
needs to see *why* a finding was raised (which of a workload's GPUs sat idle, how a port's
traffic moved against its line rate) is asked of the engine for the finding's subject and
window only, when someone looks, and never stored. :func:`drilldown_queries` is pure (the
PromQL for a finding); :func:`drilldown` runs them through the collector's query client.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuscope.collector.querying.promql import ENGINE_LABELS, matrix_result
from gpuscope.collector.querying.query_client import QueryClient

log = logging.getLogger(__name__)

IDLE_KINDS = frozenset({"idle_session", "workload_idle", "session_time_limit"})
PORT_KINDS = frozenset({"bandwidth_hotspot", "link_errors", "rail_imbalance"})
#: The most points one drill-down series may have (Prometheus refuses over 11,000).
MAX_POINTS = 1_000


@dataclass(frozen=True)
class DrillQuery:
    """One question of a drill-down: what it shows and its PromQL."""

    name: str
    query: str


def _literal(value: object) -> str:
    """A PromQL double-quoted string's content: backslashes and quotes escaped."""
    return re.sub(r'(["\\])', r"\\\1", str(value))


def _matcher(labels: Mapping[str, object]) -> str:
    return ",".join(f'{k}="{_literal(v)}"' for k, v in labels.items())


def drilldown_queries(
    kind: str, subject: Mapping[str, Any], evidence: Mapping[str, Any], step_s: int
) -> list[DrillQuery]:
    """The per-GPU or per-port PromQL that shows a finding's evidence (empty for kinds
    with none: fragmentation and quota findings come from Kubernetes, not samples)."""
    w = f"[{max(step_s, 60)}s]"
    if kind in IDLE_KINDS:
        node = str(evidence.get("node") or "")
        who = {k: subject[k] for k in ("namespace", "pod", "container") if subject.get(k)}
        if not who:
            return []
        held_labels = ({"node": node} if node and "," not in node else {}) | who
        held = (
            "max by (node, uuid) "
            f"(gpuscope_gpu_workload_info{{{_matcher(held_labels)}}})"
        )  # fmt: skip
        on_node = f'node="{_literal(node)}"' if node and "," not in node else ""

        def per_gpu(metric: str, how: str) -> str:
            return (
                f"{how}({metric}{{{on_node}}}{w}) * on (node, uuid) group_left () (0 * {held} + 1)"
            )

        return [
            DrillQuery("utilization", per_gpu("gpuscope_gpu_utilization_ratio", "max_over_time")),
            DrillQuery("sm_active", per_gpu("gpuscope_gpu_sm_active_ratio", "max_over_time")),
            DrillQuery(
                "memory_used_bytes", per_gpu("gpuscope_gpu_memory_used_bytes", "avg_over_time")
            ),
        ]
    if kind in PORT_KINDS:
        port = {k: subject[k] for k in ("node", "device", "port") if subject.get(k)}
        if "node" not in port:
            return []
        sel = _matcher(port)
        line = f"on (node, device, port) gpuscope_ib_port_rate_bytes_per_second{{{sel}}}"
        return [
            DrillQuery(
                "transmit_ratio", f"rate(gpuscope_ib_transmit_bytes_total{{{sel}}}{w}) / {line}"
            ),
            DrillQuery(
                "receive_ratio", f"rate(gpuscope_ib_receive_bytes_total{{{sel}}}{w}) / {line}"
            ),
            DrillQuery("errors", f"increase(gpuscope_ib_errors_total{{{sel}}}{w})"),
        ]
    return []


def drilldown_step(start: float, end: float) -> int:
    """A step giving at most :data:`MAX_POINTS` points over ``[start, end]``, whole
    minutes (60 s at least)."""
    span = max(0.0, end - start)
    return max(60, 60 * -(-int(span / MAX_POINTS) // 60))


def drilldown(
    client: QueryClient, queries: list[DrillQuery], start: float, end: float, step_s: int
) -> list[dict[str, Any]]:
    """Each question asked over ``[start, end]``: ``{"name", "labels", "points"}`` per
    series (``points``: ``[unix_seconds, value]``)."""
    out: list[dict[str, Any]] = []
    for q in queries:
        data = client.query(
            "/api/v1/query_range",
            {"query": q.query, "start": f"{start:.0f}", "end": f"{end:.0f}", "step": f"{step_s}"},
        )
        for r in matrix_result(data, client.shown_url):
            metric, values = r.get("metric"), r.get("values")
            if not isinstance(metric, dict) or not isinstance(values, list):
                continue
            labels = {str(k): str(v) for k, v in metric.items() if k not in ENGINE_LABELS}
            points = [[float(t), float(v)] for t, v in values]
            out.append({"name": q.name, "labels": labels, "points": points})
    return out

"""The chart's agent ServiceMonitor, scraped as the Prometheus Operator configures Prometheus.

A real Prometheus (the Debian package) scrapes a real simulated agent over loopback with the
scrape configuration the Operator generates from the rendered ServiceMonitor: its
relabelling (prometheus-operator pkg/prometheus/promcfg.go, generateServiceMonitorConfig)
is reproduced here from the ServiceMonitor's fields. There is no Kubernetes service
discovery on loopback, so the target is a static one carrying the same ``__meta_kubernetes_*``
labels the endpoints discovery would give it, taken from the rendered Service and
DaemonSet. The scrape interval is shortened to 1 s; nothing else is changed.

The agent's ``gpuscope_gpu_workload_info`` names the workload's namespace and pod; the
target's own labels (the agent pod's namespace ``gpuscope``) must not overwrite them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from deploy.render import objects, render
from tests import loopback
from tests.integration.helpers import agent_process, prometheus_with

pytestmark = pytest.mark.integration

NODE = "gpu-node-09"  # its simulated GPUs run pods of two namespaces
NAMESPACE = "gpuscope"  # the release's, where the agent pods run


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _relabeling(rule: dict[str, Any]) -> dict[str, Any]:
    """A ServiceMonitor RelabelConfig (camelCase) as Prometheus's relabel_config."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {keys.get(k, k): v for k, v in rule.items()}


def operator_scrape_config(
    monitor: dict[str, Any], service: dict[str, Any], target: str, meta: dict[str, str]
) -> dict[str, Any]:
    """The scrape config the Operator writes for the monitor's first endpoint (role
    endpoints), with ``meta`` as the discovered target's labels."""
    ep = monitor["spec"]["endpoints"][0]
    relabel: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_endpoint_port_name"],
            "regex": ep["port"],
        },
    ]
    kind_name = [
        "__meta_kubernetes_endpoint_address_target_kind",
        "__meta_kubernetes_endpoint_address_target_name",
    ]
    for kind, label in (("Node", "node"), ("Pod", "pod")):
        relabel.append({
            "source_labels": kind_name, "separator": ";", "regex": f"{kind};(.*)",
            "replacement": "${1}", "target_label": label,
        })  # fmt: skip
    for source, label in (
        ("__meta_kubernetes_namespace", "namespace"),
        ("__meta_kubernetes_service_name", "service"),
        ("__meta_kubernetes_pod_name", "pod"),
        ("__meta_kubernetes_pod_container_name", "container"),
    ):
        relabel.append({"source_labels": [source], "target_label": label})
    relabel.append({
        "action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
        "regex": "(Failed|Succeeded)",
    })  # fmt: skip
    relabel.append({
        "source_labels": ["__meta_kubernetes_service_name"], "target_label": "job",
        "replacement": "${1}",
    })  # fmt: skip
    if job_label := monitor["spec"].get("jobLabel"):
        relabel.append({
            "source_labels": [f"__meta_kubernetes_service_label_{_sanitize(job_label)}"],
            "target_label": "job", "regex": "(.+)", "replacement": "${1}",
        })  # fmt: skip
    relabel.append({"target_label": "endpoint", "replacement": ep["port"]})
    relabel += [_relabeling(r) for r in ep.get("relabelings", [])]
    name = monitor["metadata"]["name"]
    return {
        "job_name": f"serviceMonitor/{monitor['metadata']['namespace']}/{name}/0",
        "honor_labels": bool(ep.get("honorLabels", False)),
        "scrape_interval": "1s",
        "metrics_path": ep.get("path", "/metrics"),
        "static_configs": [{"targets": [target], "labels": meta}],
        "relabel_configs": relabel,
    }


def discovered_labels(service: dict[str, Any], daemonset: dict[str, Any]) -> dict[str, str]:
    """What Kubernetes endpoints discovery attaches to the agent pod on NODE."""
    pod = f"{daemonset['metadata']['name']}-x7k2p"
    (c,) = daemonset["spec"]["template"]["spec"]["containers"]
    (port,) = service["spec"]["ports"]
    meta = {
        "__meta_kubernetes_namespace": service["metadata"]["namespace"],
        "__meta_kubernetes_service_name": service["metadata"]["name"],
        "__meta_kubernetes_endpoint_port_name": port["name"],
        "__meta_kubernetes_endpoint_address_target_kind": "Pod",
        "__meta_kubernetes_endpoint_address_target_name": pod,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_container_name": c["name"],
        "__meta_kubernetes_pod_node_name": NODE,
        "__meta_kubernetes_pod_phase": "Running",
    }
    for key, value in service["metadata"]["labels"].items():
        meta[f"__meta_kubernetes_service_label_{_sanitize(key)}"] = value
        meta[f"__meta_kubernetes_service_labelpresent_{_sanitize(key)}"] = "true"
    return meta


def scrape_config(values: dict[str, Any], agent_url: str) -> dict[str, Any]:
    docs = objects(render(values))
    monitor = next(
        d for d in docs if d["kind"] == "ServiceMonitor" and d["metadata"]["name"].endswith("agent")
    )
    selector = monitor["spec"]["selector"]["matchLabels"]
    (service,) = [
        d for d in docs
        if d["kind"] == "Service"
        and d["metadata"]["namespace"] == monitor["metadata"]["namespace"]
        and selector.items() <= d["metadata"]["labels"].items()
    ]  # fmt: skip
    daemonset = next(d for d in docs if d["kind"] == "DaemonSet")
    url = httpx.URL(agent_url)
    return operator_scrape_config(
        monitor, service, f"{url.host}:{url.port}", discovered_labels(service, daemonset)
    )


DCGM_COMPAT = Path(__file__).resolve().parents[2] / "dashboards/rules/gpuscope-dcgm-compat.yaml"


@contextmanager
def operator_prometheus(tmp: Path, config: dict[str, Any]) -> Iterator[str]:
    """A real Prometheus with one scrape config and the DCGM-compatible recording rules;
    yields its base URL."""
    with prometheus_with(tmp, [config], [DCGM_COMPAT]) as base:
        yield base


def query(base: str, expr: str) -> list[dict[str, Any]]:
    body = loopback.get(f"{base}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def wait_for(base: str, expr: str, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while not (result := query(base, expr)):
        assert time.monotonic() < deadline, f"no data for {expr}"
        time.sleep(0.5)
    return result


def agent_namespaces(agent_url: str) -> set[str]:
    page = loopback.get(agent_url, timeout=10).text
    return {
        s.labels["namespace"]
        for f in text_string_to_metric_families(page)
        if f.name == "gpuscope_gpu_workload_info"
        for s in f.samples
    }


@pytest.mark.parametrize("honor_labels", [True, False], ids=["chart", "without-honorLabels"])
def test_workload_labels_survive_the_operator_scrape(tmp_path: Path, honor_labels: bool) -> None:
    """With the chart's ServiceMonitor, `count by (namespace)` shows the workloads'
    namespaces and no exported_namespace appears. Before the chart moved the target's own
    namespace/pod/container away, honorLabels false filed every series under the agent
    pod's namespace and moved the real one to exported_namespace; now the target carries no
    namespace to clash with, so the workloads' labels survive either way."""
    values = {"monitoring": {"serviceMonitors": {"honorLabels": honor_labels}}}
    with agent_process(NODE) as agent_url:
        config = scrape_config(values, agent_url)
        assert config["honor_labels"] is honor_labels
        before = agent_namespaces(agent_url)
        with operator_prometheus(tmp_path, config) as base:
            up = wait_for(base, 'up{job="gpuscope-agent"} == 1')
            by_ns = wait_for(base, "count by (namespace) (gpuscope_gpu_workload_info)")
            exported = query(base, 'count(gpuscope_gpu_workload_info{exported_namespace!=""})')
            exported_ns = query(base, "count by (exported_namespace) (gpuscope_gpu_workload_info)")
        seen = before | agent_namespaces(agent_url)
    assert len(before) >= 2 and NAMESPACE not in seen
    # the rules' GpuNodeDown selects this job; the target's own labels are the Operator's
    (target,) = up
    assert target["metric"]["agent_namespace"] == NAMESPACE
    assert target["metric"]["agent_pod"].startswith("gpuscope-agent-")
    assert "namespace" not in target["metric"] and "container" not in target["metric"]
    assert target["metric"]["node"] == NODE
    assert target["metric"]["service"] == "gpuscope-agent"
    namespaces = {r["metric"].get("namespace") for r in by_ns}
    assert namespaces and namespaces <= seen
    assert exported == []
    assert [r["metric"] for r in exported_ns] == [{}]


#: Series without workload labels of their own: per GPU, per InfiniBand port, and the
#: DCGM-compatible recorded series (which keep one series per free GPU).
GPU_SERIES = (
    "gpuscope_gpu_utilization_ratio",
    "gpuscope_gpu_memory_used_bytes",
    "gpuscope_ib_transmit_bytes_total",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
)


def test_gpu_series_never_take_the_agent_pods_namespace(tmp_path: Path) -> None:
    """Issue 24: under the Operator's chain the target carries the agent pod's own
    namespace/pod/container, and with honorLabels every series without those labels (a free
    GPU, an InfiniBand port) took them: `count by (namespace)(DCGM_FI_DEV_GPU_UTIL)` showed
    the agent's namespace. The chart's relabelings move them to agent_namespace/agent_pod:
    no GPU series shows the agent's namespace, pod or container, and the workloads' own
    namespaces are still there on the series that name a workload."""
    with agent_process(NODE) as agent_url:
        config = scrape_config({}, agent_url)
        workloads = agent_namespaces(agent_url)
        with operator_prometheus(tmp_path, config) as base:
            for name in GPU_SERIES:
                wait_for(base, f"count({name})")
            by_ns = {
                name: {
                    r["metric"].get("namespace")
                    for r in query(base, f"count by (namespace) ({name})")
                }
                for name in GPU_SERIES
            }
            pods = query(base, 'count by (pod) ({pod=~"gpuscope-.*"})')
            containers = query(base, 'count by (container) ({container="agent"})')
            dcgm_ns = {
                r["metric"].get("namespace")
                for r in query(base, "count by (namespace) (DCGM_FI_DEV_GPU_UTIL)")
            }
            agent_ns = query(
                base, f'count(gpuscope_gpu_utilization_ratio{{agent_namespace="{NAMESPACE}"}})'
            )
    for name, namespaces in by_ns.items():
        assert NAMESPACE not in namespaces, name
    assert by_ns["gpuscope_gpu_utilization_ratio"] == {None}  # per GPU: no namespace at all
    assert pods == [] and containers == []
    # the recorded per-workload series keep the workloads' namespaces
    assert workloads and dcgm_ns - {None} and dcgm_ns - {None} <= workloads
    assert agent_ns  # where the series came from is still there, under its own name

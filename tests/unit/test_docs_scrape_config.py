"""The hand-written Prometheus scrape configuration in docs/dashboards.md finds the pods the
chart deploys: its `keep` rules match the rendered pods' component label and container port
name, and it looks in the namespace the plain manifests use.

A port or label renamed in the chart would otherwise leave a site that copied the docs with
two empty jobs, every dashboard blank and `GpuNodeDown` silent (``up`` has no series).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from deploy.render import NAMESPACE, objects, render

REPO = Path(__file__).resolve().parents[2]
COMPONENT = "__meta_kubernetes_pod_label_app_kubernetes_io_component"
PORT = "__meta_kubernetes_pod_container_port_name"


def scrape_jobs() -> dict[str, dict[str, Any]]:
    text = (REPO / "docs" / "dashboards.md").read_text()
    block = re.search(r"```yaml\n(scrape_configs:.*?)```", text, re.S)
    assert block is not None
    return {j["job_name"]: j for j in yaml.safe_load(block.group(1))["scrape_configs"]}


def pod_templates() -> dict[str, dict[str, Any]]:
    """The chart's pod templates (defaults) by their component label."""
    out = {}
    for doc in objects(render({})):
        if doc["kind"] in ("DaemonSet", "Deployment"):
            template = doc["spec"]["template"]
            out[template["metadata"]["labels"]["app.kubernetes.io/component"]] = template
    return out


def test_the_docs_scrape_jobs_keep_the_charts_pods() -> None:
    templates = pod_templates()
    jobs = scrape_jobs()
    assert set(jobs) == {"gpuscope-agent", "gpuscope-collector"}
    for name, job in jobs.items():
        keep = {
            r["source_labels"][0]: r["regex"]
            for r in job["relabel_configs"]
            if r.get("action") == "keep"
        }
        assert set(keep) == {COMPONENT, PORT}, name
        template = templates.get(keep[COMPONENT])
        assert template is not None, f"{name}: no pod of component {keep[COMPONENT]!r}"
        ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        assert keep[PORT] in ports, f"{name}: port {keep[PORT]!r} not in {ports}"
        [sd] = job["kubernetes_sd_configs"]
        assert sd["namespaces"]["names"] == [NAMESPACE], name

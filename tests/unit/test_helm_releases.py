"""The chart shares a cluster: two releases side by side, names from the release, the rules
following the jobs, and the opt-in pieces (priority class, NetworkPolicy, folder, TLS)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from deploy.render import objects, render
from tests.unit.operator_models import CRD_KINDS, round_trip

#: Production (release gpuscope) and staging (release staging, its own namespace).
RELEASES = (("gpuscope", "gpuscope"), ("staging", "gpuscope-staging"))


def _validate(doc: dict[str, Any]) -> None:
    if doc["kind"] in CRD_KINDS:
        assert round_trip(doc) == doc
    else:
        kubernetes_validate.validate(doc, "1.30", strict=True)


def _release(name: str, namespace: str, values: dict[str, Any] | None = None) -> list[Any]:
    base = {"namespace": {"create": True}, "rbac": {"actions": {"enabled": True}},
            "grafana": {"provider": {"enabled": True}}}  # fmt: skip
    return objects(render(base | (values or {}), release=name, namespace=namespace))


def _jobs(docs: list[dict[str, Any]]) -> set[str]:
    """The job names the ServiceMonitors give (their jobLabel's value on the Service)."""
    jobs = set()
    for monitor in (d for d in docs if d["kind"] == "ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [
            d for d in docs
            if d["kind"] == "Service" and selector.items() <= d["metadata"]["labels"].items()
        ]  # fmt: skip
        jobs.add(service["metadata"]["labels"][monitor["spec"]["jobLabel"]])
    return jobs


def _rule_jobs(docs: list[dict[str, Any]]) -> set[str]:
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return set(re.findall(r'job="([^"]+)"', yaml.safe_dump(rule["spec"])))


def test_two_releases_render_validate_and_never_share_a_name() -> None:
    """Issue 24: object names ignored the release, so a second release collided on the
    ClusterRoles, the gpu-operator Service and the dashboards ConfigMap."""
    seen: dict[tuple[str, str | None, str], str] = {}
    for name, namespace in RELEASES:
        docs = _release(name, namespace)
        for doc in docs:
            _validate(doc)
            key = (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
            assert key not in seen, f"{key} of release {name} is also release {seen[key]}'s"
            seen[key] = name
        assert len(_jobs(docs)) == 2 and _rule_jobs(docs) == _jobs(docs)
    staging = _release("staging", "gpuscope-staging")
    assert _jobs(staging) == {"staging-gpuscope-agent", "staging-gpuscope-collector"}
    roles = {d["metadata"]["name"] for d in staging if d["kind"] == "ClusterRole"}
    assert roles and all(r.startswith("staging-gpuscope-") for r in roles)


def test_a_fullname_override_moves_the_rules_job_selectors_too() -> None:
    docs = _release("prod", "gpu", {"fullnameOverride": "gpu-obs"})
    assert _jobs(docs) == {"gpu-obs-agent", "gpu-obs-collector"}
    assert _rule_jobs(docs) == _jobs(docs)


def test_the_namespace_it_creates_admits_the_privileged_agent() -> None:
    (ns,) = [d for d in _release("staging", "gpuscope-staging") if d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_the_priority_class_is_opt_in() -> None:
    def spec(values: dict[str, Any]) -> dict[str, Any]:
        (ds,) = [d for d in objects(render(values)) if d["kind"] == "DaemonSet"]
        return dict(ds["spec"]["template"]["spec"])

    assert "priorityClassName" not in spec({})
    chosen = spec({"agent": {"priorityClassName": "system-node-critical"}})
    assert chosen["priorityClassName"] == "system-node-critical"


def test_the_dashboards_land_in_a_folder() -> None:
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        (cm,) = [d for d in objects(render(values))
                 if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("dashboards")]  # fmt: skip
        return dict(cm["metadata"].get("annotations", {}))

    assert annotations({}) == {"grafana_folder": "gpuscope"}
    site = {"grafana": {"dashboards": {"folder": "GPU", "folderAnnotation": "k8s-folder",
                                       "annotations": {"a": "b"}}}}  # fmt: skip
    assert annotations(site) == {"k8s-folder": "GPU", "a": "b"}
    assert annotations({"grafana": {"dashboards": {"folder": ""}}}) == {}


@pytest.mark.parametrize(
    "peers",
    [[], [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]],
    ids=["no-peers", "prometheus-namespace"],
)
def test_network_policies_validate_and_never_admit_everyone(peers: list[Any]) -> None:
    docs = objects(render({"networkPolicy": {"enabled": True, "from": peers}}))
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(policies) == {"gpuscope-agent", "gpuscope-collector"}
    for policy in policies.values():
        _validate(policy)
        for rule in policy["spec"]["ingress"]:
            assert rule.get("from"), "a rule without `from` admits every source"
    agent_from = policies["gpuscope-agent"]["spec"]["ingress"][0]["from"]
    assert agent_from[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "collector"
    assert agent_from[1:] == peers
    assert not [d for d in objects(render({})) if d["kind"] == "NetworkPolicy"]


def test_service_monitor_extras_validate_against_the_operator_crd() -> None:
    values = {"monitoring": {"serviceMonitors": {
        "relabelings": [{"targetLabel": "cluster", "replacement": "prod-eu"}],
        "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "go_.*"}],
        "scheme": "https", "tlsConfig": {"insecureSkipVerify": True},
    }}}  # fmt: skip
    monitors = [d for d in objects(render(values)) if d["kind"] == "ServiceMonitor"]
    assert len(monitors) == 2
    for monitor in monitors:
        _validate(monitor)
        (ep,) = monitor["spec"]["endpoints"]
        assert ep["relabelings"][-1] == {"targetLabel": "cluster", "replacement": "prod-eu"}
        assert {"action": "labeldrop", "regex": "(namespace|pod|container)"} in ep["relabelings"]
        assert ep["scheme"] == "https" and ep["tlsConfig"] == {"insecureSkipVerify": True}
        assert ep["metricRelabelings"][0]["action"] == "drop"


# -- issue 38: two releases in one namespace -------------------------------------------------
def _dashboards(name: str, namespace: str = "gpuscope") -> dict[str, dict[str, Any]]:
    """Release ``name``'s dashboards ConfigMap data: key -> the dashboard JSON."""
    (cm,) = [
        d for d in _release(name, namespace)
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-grafana-dashboards")
    ]  # fmt: skip
    return {key: json.loads(text) for key, text in cm["data"].items()}


def test_two_releases_in_one_namespace_share_no_dashboard_file_uid_or_title() -> None:
    """Seen: releases prod and staging gave two dashboards ConfigMaps with the same data keys
    (the files Grafana's sidecar writes into one folder) and the same dashboard UIDs: the
    second overwrote the first, and uninstalling it deleted the first's dashboards."""
    prod, staging = _dashboards("prod"), _dashboards("staging")
    assert len(prod) == len(staging) == 6
    assert not set(prod) & set(staging)
    for field in ("uid", "title"):
        assert not {d[field] for d in prod.values()} & {d[field] for d in staging.values()}
    for data in (prod, staging):
        uids = {d["uid"] for d in data.values()}
        assert all(len(u) <= 40 for u in uids)
        assert {f"{u}.json" for u in uids} == set(data)
        # the overview's links lead to the same release's dashboards
        text = json.dumps(data)
        linked = set(re.findall(r"/d/([A-Za-z0-9_-]+)/", text))
        assert linked and linked <= uids, (linked, uids)
    assert "gpuscope (staging) / Cluster overview" in {d["title"] for d in staging.values()}


def test_the_release_named_gpuscope_keeps_the_documented_uids() -> None:
    """docs and report.dashboard_url link /d/gpuscope-overview: the default release keeps it."""
    data = _dashboards("gpuscope")
    assert "gpuscope-overview.json" in data
    assert data["gpuscope-overview.json"]["uid"] == "gpuscope-overview"
    assert data["gpuscope-overview.json"]["title"] == "gpuscope / Cluster overview"


def test_a_long_release_name_gets_a_uid_grafana_accepts() -> None:
    data = _dashboards("a-very-long-release-name-for-the-staging-cluster")
    assert all(len(d["uid"]) <= 40 for d in data.values())
    assert len({d["uid"] for d in data.values()}) == 6


def test_namespace_create_leaves_a_namespace_another_release_made(tmp_path: Path) -> None:
    """Seen: with namespace.create=true on both releases the second install failed Helm's
    ownership check (the Namespace belonged to the first). The chart renders the Namespace
    only where lookup finds none or finds this release's own; ``helm template`` finds none,
    so the rule is rendered here against the live objects Helm's lookup would return."""
    import shutil

    from deploy.render import CHART

    chart = tmp_path / "gpuscope"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "zz-namespace-probe.yaml").write_text(
        "{{- range $case, $live := .Values.probe }}\n"
        '{{ $case }}: "{{ include "gpuscope.createsNamespace" '
        '(dict "live" $live "release" $.Release.Name) }}"\n'
        "{{- end }}\n"
    )
    # the schema refuses unknown values: let the probe's through
    schema = json.loads((chart / "values.schema.json").read_text())
    schema.get("properties", {})["probe"] = {"type": "object"}
    (chart / "values.schema.json").write_text(json.dumps(schema))
    mine = {"metadata": {"name": "gpuscope", "annotations": {
        "meta.helm.sh/release-name": "staging"}}}  # fmt: skip
    theirs = {"metadata": {"name": "gpuscope", "annotations": {
        "meta.helm.sh/release-name": "prod"}}}  # fmt: skip
    by_hand = {"metadata": {"name": "gpuscope", "labels": {"team": "ml"}}}
    probe = {"none": {}, "mine": mine, "theirs": theirs, "by_hand": by_hand}
    out = render({"probe": probe}, release="staging", namespace="gpuscope", chart=chart)
    got = yaml.safe_load(out["zz-namespace-probe.yaml"])
    assert got == {"none": "true", "mine": "true", "theirs": "", "by_hand": ""}


def test_the_namespace_outlives_the_release_that_made_it() -> None:
    """Uninstalling production must not delete staging's objects with the namespace."""
    (ns,) = [d for d in _release("prod", "gpuscope") if d["kind"] == "Namespace"]
    assert ns["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"

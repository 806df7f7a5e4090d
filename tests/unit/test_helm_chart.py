"""The Helm chart, rendered by Helm's own template engine (its Go library, through the
helm-python-sdk wheel), gives valid Kubernetes objects for every supported combination of
values, wires the agent and collector as their CLIs expect, and is what deploy/ holds."""

from __future__ import annotations

import dataclasses
import re
import string
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from deploy.render import CHART, PLAIN_VALUES, RenderError, objects, render, stale
from gpuscope import __version__
from gpuscope.cli.main import build_parser
from gpuscope.core.settings import Settings, load_settings
from tests.unit.operator_models import CRD_KINDS, round_trip

REPO = Path(__file__).resolve().parents[2]
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
#: The combinations a site uses: the defaults, the plain manifests', the opt-in actions
#: role, a token Secret of its own, each DCGM source, a private registry without the
#: kube-prometheus-stack release label.
COMBOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "plain-manifests": PLAIN_VALUES,
    "actions": {"rbac": {"actions": {"enabled": True}}},
    "existing-secret": {"apiToken": {"existingSecret": "site-token", "key": "token"}},
    "dcgm-exporter-url": {"dcgm": {"exporter": {"url": "http://$(HOST_IP):9400/metrics"}}},
    "dcgm-hostengine": {"dcgm": {"source": "hostengine"}},
    "nvml-only": {"dcgm": {"source": "none"}, "agent": {"runtimeClassName": ""}},
    "site": {
        "image": {"registry": "registry.example.com/gpuscope/", "tag": "0.1.0-rc1"},
        "monitoring": {"release": "", "labels": {"team": "gpu"}},
        "grafana": {"dashboards": {"namespace": ""}},
        "collector": {
            "persistence": {"existingClaim": "gpuscope-db"},
            "config": {"collector": {"scrape_interval_seconds": 30}},
        },
    },
}


def rendered(values: dict[str, Any]) -> list[dict[str, Any]]:
    return objects(render(values))


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def container(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    pod = one(docs, kind)["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    return dict(c)


@pytest.mark.parametrize("combo", COMBOS)
def test_every_object_validates_against_the_kubernetes_and_operator_schemas(combo: str) -> None:
    """Core objects: Kubernetes 1.30's schemas in strict mode (no unknown field). The
    Operator's ServiceMonitor and PrometheusRule: the models generated from its CRDs, and a
    round trip that would drop (and so reveal) any field the CRD does not have."""
    docs = rendered(COMBOS[combo])
    assert {d["kind"] for d in docs} >= {"DaemonSet", "Deployment", "Service", "ConfigMap"}
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            assert round_trip(doc) == doc
        else:
            kubernetes_validate.validate(doc, "1.30", strict=True)
        assert "change-me" not in yaml.dump(doc, Dumper=yaml.CSafeDumper)


def test_a_misspelt_operator_field_is_caught() -> None:
    """The round trip above is not vacuous: a field the CRD lacks fails it."""
    monitor = one(rendered({}), "ServiceMonitor", "gpuscope-agent")
    monitor["spec"]["endpoints"][0]["honorLabel"] = True
    assert round_trip(monitor) != monitor


def test_the_chart_lints_clean() -> None:
    report = helm_python.lint(str(CHART), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_the_plain_manifests_are_the_chart_rendered() -> None:
    """deploy/*.yaml and the chart's copies of dashboards/ are fresh: after changing the
    chart, the rules or the dashboards, run scripts/render-manifests."""
    assert stale() == []


def test_the_token_is_generated_at_install_never_shipped() -> None:
    """Without a Secret of the site's, the chart makes one with 48 random characters, new
    for each install; with one, it makes none and everything reads the site's."""
    tokens = []
    for _ in range(2):
        secret = one(rendered({}), "Secret")
        assert secret["metadata"]["name"] == "gpuscope-collector"
        assert "stringData" not in secret
        token = __import__("base64").b64decode(secret["data"]["api-token"]).decode()
        assert len(token) == 48 and set(token) <= set(string.ascii_letters + string.digits)
        tokens.append(token)
    assert tokens[0] != tokens[1]

    docs = rendered(COMBOS["existing-secret"])
    assert not [d for d in docs if d["kind"] == "Secret"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    secret_volume = next(v for v in pod["volumes"] if v["name"] == "secret")["secret"]
    assert secret_volume == {"secretName": "site-token"}  # not optional: no token, no start
    refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in pod["containers"][0]["env"]}
    assert refs == {"site-token"}
    config = yaml.safe_load(one(docs, "ConfigMap", "gpuscope-collector")["data"]["config.yaml"])
    assert config["collector"]["api_token_file"] == "/etc/gpuscope/secret/token"


PROBE = """
{{- $site := dict "api-token" (b64enc "kept-token-of-the-install") "slack-webhook-url" (b64enc "https://hooks.example/x") }}
apiVersion: v1
kind: Secret
metadata: {name: upgrade}
data:
  {{- include "gpuscope.tokenSecretData" (dict "live" (dict "data" $site) "key" "api-token") | nindent 2 }}
---
apiVersion: v1
kind: Secret
metadata: {name: no-token-yet}
data:
  {{- include "gpuscope.tokenSecretData" (dict "live" (dict "data" (omit $site "api-token")) "key" "api-token") | nindent 2 }}
"""


def test_an_upgrade_keeps_the_live_token_and_the_keys_a_site_added(tmp_path: Path) -> None:
    """What the Secret template does with the Secret `lookup` returns on upgrade (offline,
    lookup finds nothing; a probe template on a copy of the chart hands the same helper a
    live Secret): its data is kept as it is; a token is added only where none is."""
    import base64
    import shutil

    chart = tmp_path / "gpuscope"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "probe.yaml").write_text(PROBE)
    docs = {
        d["metadata"]["name"]: d["data"]
        for d in objects(render({}, chart=chart))
        if d["kind"] == "Secret"
    }
    kept = {k: base64.b64decode(v).decode() for k, v in docs["upgrade"].items()}
    assert kept == {
        "api-token": "kept-token-of-the-install",
        "slack-webhook-url": "https://hooks.example/x",
    }
    added = {k: base64.b64decode(v).decode() for k, v in docs["no-token-yet"].items()}
    assert added["slack-webhook-url"] == "https://hooks.example/x"
    assert len(added["api-token"]) == 48


def test_the_plain_manifests_hold_no_secret() -> None:
    """The kubectl path has the site create the token Secret (docs/quickstart.md)."""
    assert not [d for d in rendered(PLAIN_VALUES) if d["kind"] == "Secret"]
    quickstart = (REPO / "docs" / "quickstart.md").read_text()
    assert "kubectl -n gpuscope create secret generic gpuscope-collector" in quickstart


def test_the_actions_role_is_opt_in_and_holds_the_values_rules() -> None:
    """Read-only by default; rbac.actions.enabled adds the role whose rules are the one list
    in values.yaml (tests/integration/test_actions.py checks them against real requests)."""
    default = rendered({})
    assert not [d for d in default if d["metadata"]["name"] == "gpuscope-actions"]
    read = one(default, "ClusterRole", "gpuscope-collector-read")
    assert {v for rule in read["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    docs = rendered(COMBOS["actions"])
    assert (
        one(docs, "ClusterRole", "gpuscope-actions")["rules"] == VALUES["rbac"]["actions"]["rules"]
    )
    binding = one(docs, "ClusterRoleBinding", "gpuscope-actions")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuscope-collector", "namespace": "gpuscope"}
    ]


def _agent_settings(c: dict[str, Any]) -> Settings:
    """What the agent would run with: its args through the real CLI parser, its env."""
    args = build_parser().parse_args(["agent", *c["args"]])
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    settings = load_settings(env=env)
    assert args.gpu_source in ("auto", "nvml", "dcgm")
    return settings.model_copy(update={"agent": dataclasses.replace(settings.agent, **{
        k: v for k, v in {"gpu_source": args.gpu_source, "dcgm_exporter_url": args.dcgm_exporter_url}.items() if v
    })})  # fmt: skip


def test_the_default_dcgm_source_is_the_node_local_dcgm_exporter() -> None:
    """The agent reads the GPU Operator's dcgm-exporter on its own node, through a Service
    with internalTrafficPolicy Local over the exporter's pods."""
    docs = rendered({})
    settings = _agent_settings(container(docs, "DaemonSet"))
    local = one(docs, "Service", "gpuscope-dcgm-exporter-local")
    assert local["metadata"]["namespace"] == "gpu-operator"
    assert local["spec"]["internalTrafficPolicy"] == "Local"
    assert local["spec"]["selector"] == {"app": "nvidia-dcgm-exporter"}
    url = "http://gpuscope-dcgm-exporter-local.gpu-operator.svc:9400/metrics"
    assert settings.agent.dcgm_exporter_url == url


def test_the_other_dcgm_sources() -> None:
    """An explicit URL (no Service made), nv-hostengine with the node's bindings mounted,
    NVML only; anything else stops the render with one message."""
    docs = rendered(COMBOS["dcgm-exporter-url"])
    assert not [d for d in docs if d["metadata"]["name"] == "gpuscope-dcgm-exporter-local"]
    agent = _agent_settings(container(docs, "DaemonSet")).agent
    assert agent.dcgm_exporter_url == "http://$(HOST_IP):9400/metrics"  # the kubelet expands it

    docs = rendered(COMBOS["dcgm-hostengine"])
    c = container(docs, "DaemonSet")
    agent = _agent_settings(c).agent
    assert (agent.dcgm_exporter_url, agent.dcgm_hostengine) == ("", "$(HOST_IP):5555")
    assert [e["name"] for e in c["env"]].index("HOST_IP") < [e["name"] for e in c["env"]].index(
        "GPUSCOPE_AGENT__DCGM_HOSTENGINE"
    )  # $(HOST_IP) expands only from a variable defined before it
    mount = next(m for m in c["volumeMounts"] if m["name"] == "dcgm-bindings")
    assert Path(mount["mountPath"]) == agent.dcgm_bindings_path

    agent = _agent_settings(container(rendered(COMBOS["nvml-only"]), "DaemonSet")).agent
    assert (agent.gpu_source, agent.dcgm_exporter_url) == ("nvml", "")
    with pytest.raises(RenderError, match="at '/dcgm/source': value must be one of 'exporter'"):
        render({"dcgm": {"source": "dcgm-exporter"}})


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"dcgm": {"sorce": "none"}}, "/dcgm"),  # a misspelt key is not silently ignored
        (
            {"monitoring": {"serviceMonitors": {"honorLabels": "yes"}}},
            "/monitoring/serviceMonitors",
        ),
        ({"apiToken": {"key": ""}}, "/apiToken/key"),
    ],
)
def test_values_outside_the_schema_stop_the_render(values: dict[str, Any], where: str) -> None:
    """values.schema.json: Helm refuses the values with one message naming the key."""
    with pytest.raises(RenderError, match=f"at '{where}"):
        render(values)


def test_the_collector_config_and_args_are_what_the_collector_accepts() -> None:
    docs = rendered(COMBOS["site"])
    data = one(docs, "ConfigMap", "gpuscope-collector")["data"]
    settings = Settings.model_validate(yaml.safe_load(data["config.yaml"]))
    assert settings.collector.scrape_interval_seconds == 30  # collector.config merged over
    assert settings.collector.discovery.enabled
    assert settings.collector.discovery.service == one(docs, "DaemonSet")["metadata"]["name"]
    c = container(docs, "Deployment")
    args = build_parser().parse_args(["collector", *c["args"]])
    assert Path(args.config).name in data
    assert args.listen == "0.0.0.0:8080"
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["replicas"] == 1
    claims = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "data"]
    assert claims[0]["persistentVolumeClaim"]["claimName"] == "gpuscope-db"
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]


def test_images_are_what_the_quickstart_builds() -> None:
    """Default images are the names and tag `docker build` in docs/quickstart.md gives; the
    chart's version and appVersion follow gpuscope's."""
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["version"] == meta["appVersion"] == __version__
    docs = rendered({})
    quickstart = (REPO / "docs" / "quickstart.md").read_text()
    for kind, target in (("DaemonSet", "agent"), ("Deployment", "collector")):
        image = container(docs, kind)["image"]
        assert image == f"gpuscope-{target}:{__version__}"
        assert f"docker build --target {target} -t {image} ." in quickstart
    docs = rendered(COMBOS["site"])
    image = container(docs, "DaemonSet")["image"]
    assert image == "registry.example.com/gpuscope/gpuscope-agent:0.1.0-rc1"


def test_the_operator_objects_carry_the_release_label_and_honor_labels() -> None:
    """kube-prometheus-stack selects ServiceMonitors and PrometheusRules by its release's name;
    honorLabels keeps the agent's namespace/pod labels (tests/integration/
    test_servicemonitor_scrape.py shows what breaks without it)."""
    docs = rendered({})
    monitors = [d for d in docs if d["kind"] in CRD_KINDS]
    assert len(monitors) == 3
    assert {d["metadata"]["labels"]["release"] for d in monitors} == {"kube-prometheus-stack"}
    for m in (d for d in monitors if d["kind"] == "ServiceMonitor"):
        assert all(e["honorLabels"] is True for e in m["spec"]["endpoints"])
    site = [d for d in rendered(COMBOS["site"]) if d["kind"] in CRD_KINDS]
    assert all("release" not in d["metadata"]["labels"] for d in site)
    assert {d["metadata"]["labels"]["team"] for d in site} == {"gpu"}


def test_the_rules_job_selectors_name_the_jobs_the_service_monitors_set() -> None:
    """Each ServiceMonitor's jobLabel names a label of the Service it selects; its value is
    the job, and every `job="..."` in the rules is one of them."""
    docs = rendered({})
    jobs = set()
    for monitor in (d for d in docs if d["kind"] == "ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        (service,) = [
            d for d in docs
            if d["kind"] == "Service" and selector.items() <= d["metadata"]["labels"].items()
        ]  # fmt: skip
        jobs.add(service["metadata"]["labels"][monitor["spec"]["jobLabel"]])
    assert jobs == {"gpuscope-agent", "gpuscope-collector"}
    rule = one(docs, "PrometheusRule")
    source = yaml.safe_load((REPO / "dashboards/rules/gpuscope-rules.yaml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    named = set(re.findall(r'job="([^"]+)"', yaml.safe_dump(source)))
    assert named and named <= jobs


def test_the_dashboards_configmap_is_where_the_sidecar_looks() -> None:
    docs = rendered({})
    cm = one(docs, "ConfigMap", "gpuscope-grafana-dashboards")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    committed = {p.name: p.read_text() for p in sorted((REPO / "dashboards").glob("*.json"))}
    assert cm["data"] == committed
    site = one(rendered(COMBOS["site"]), "ConfigMap", "gpuscope-grafana-dashboards")
    assert site["metadata"]["namespace"] == "gpuscope"


def test_namespaces() -> None:
    """Namespaced objects go to the release namespace, apart from the dashboards (Grafana's)
    and the dcgm-exporter view (the exporter's); the Namespace itself only when asked."""
    docs = objects(render({}, namespace="gpu-tools"))
    assert not [d for d in docs if d["kind"] == "Namespace"]
    elsewhere = {
        d["metadata"]["name"]: d["metadata"]["namespace"]
        for d in docs
        if d["metadata"].get("namespace", "gpu-tools") != "gpu-tools"
    }
    assert elsewhere == {
        "gpuscope-grafana-dashboards": "monitoring",
        "gpuscope-dcgm-exporter-local": "gpu-operator",
    }
    docs = objects(render({"namespace": {"create": True}}, namespace="gpu-tools"))
    ns = one(docs, "Namespace")
    assert ns["metadata"]["name"] == "gpu-tools"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"

"""Contracts that keep the parts honest: docs match the code, manifests match Kubernetes."""

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from gpuscope.cli.main import build_parser
from gpuscope.core.catalogue import render_markdown
from gpuscope.core.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_metric_doc_is_generated_from_the_catalogue() -> None:
    """docs/metrics.md opens with what `python -m gpuscope.core.catalogue` prints (regenerate that
    part if not); the hand-written sections (renames, mappings) follow it."""
    assert (REPO / "docs" / "metrics.md").read_text().startswith(render_markdown() + "\n## ")


def _options(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = [
                    opt
                    for a in sub._actions
                    for opt in a.option_strings
                    if opt.startswith("--") and opt != "--help"
                ]
    return out


def test_every_cli_command_and_flag_is_documented() -> None:
    """Each subcommand has a section in docs/cli.md listing every one of its flags."""
    doc = (REPO / "docs" / "cli.md").read_text()
    for command, flags in _options(build_parser()).items():
        assert f"## `gpuscope {command}`" in doc, command
        section = doc.split(f"## `gpuscope {command}`", 1)[1].split("\n## ", 1)[0]
        for flag in flags:
            assert f"`{flag}" in section, f"{command} {flag}"


def _keys(model: type[Any], prefix: str = "") -> list[str]:
    """Every key of a section, nested sections' keys dotted: a pydantic model's fields, or a
    dataclass's (the agent's section, declared once in gpuscope/core/agent_settings.py)."""
    keys = []
    if dataclasses.is_dataclass(model):
        annotations = {f.name: f.type for f in dataclasses.fields(model)}
    else:
        annotations = {n: f.annotation for n, f in model.model_fields.items()}
    for name, ann in annotations.items():
        if isinstance(ann, type) and (issubclass(ann, BaseModel) or dataclasses.is_dataclass(ann)):
            keys += _keys(ann, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def test_every_setting_is_documented() -> None:
    """Every settings key appears in docs/configuration.md."""
    doc = (REPO / "docs" / "configuration.md").read_text()
    missing = [k for k in _keys(Settings) if f"`{k}`" not in doc]
    assert missing == []


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in sorted((REPO / "deploy").rglob("*.yaml"))
        if "helm" not in p.relative_to(REPO).parts
    ],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_manifests_validate_against_kubernetes_schemas(path: Path) -> None:
    """Every manifest in deploy/ is valid for Kubernetes 1.30 in strict mode (no unknown fields)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            # the Prometheus Operator's CRDs have no schema in kubernetes-validate
            assert doc["kind"] in ("ServiceMonitor", "PrometheusRule"), doc["kind"]
            assert doc["metadata"]["name"] and doc["metadata"]["namespace"]
            assert doc["spec"]["groups" if doc["kind"] == "PrometheusRule" else "endpoints"]
            continue
        kubernetes_validate.validate(doc, "1.30", strict=True)


def test_prometheus_rule_manifest_holds_the_shipped_rules() -> None:
    """deploy/prometheus-operator/prometheusrule.yaml is dashboards/rules/ as a PrometheusRule."""
    rules = yaml.safe_load((REPO / "dashboards/rules/gpuscope-rules.yaml").read_text())
    manifest = yaml.safe_load((REPO / "deploy/prometheus-operator/prometheusrule.yaml").read_text())
    assert manifest["spec"]["groups"] == rules["groups"]


def test_collector_configmap_holds_valid_alerts_and_policies() -> None:
    """The deployed config, alerts file and policy file load as the collector would load them."""
    from gpuscope.actions.policy import parse_policies
    from gpuscope.alerts.config import load_alerts_config
    from gpuscope.core.settings import Settings

    docs = list(yaml.safe_load_all((REPO / "deploy/collector/collector.yaml").read_text()))
    data = next(d for d in docs if d and d["kind"] == "ConfigMap")["data"]
    Settings.model_validate(yaml.safe_load(data["config.yaml"]))
    policies = parse_policies(yaml.safe_load(data["policies.yaml"]))
    assert policies and all(p.dry_run for p in policies)
    alerts_file = REPO / "build" / "alerts.yaml"
    alerts_file.parent.mkdir(exist_ok=True)
    alerts_file.write_text(data["alerts.yaml"])
    assert load_alerts_config(alerts_file).receivers


def test_readme_opens_with_the_two_commands() -> None:
    """The README's first commands set up and run the demo, and set up and run every test; CI runs the latter."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("```", 2)[1]
    commands = [
        line for line in block.splitlines()[1:] if line.strip() and not line.startswith("#")
    ]
    assert commands[0].startswith("./scripts/demo")
    assert commands[1].startswith("./scripts/test")
    assert (REPO / ".ci" / "run").read_text().strip().splitlines()[-1] == "./scripts/test"

"""The committed Grafana dashboards: in step with their Python source, every query valid
PromQL naming metrics gpuscope exports, every panel with a unit, the variables and links
the issue asks for, and a ConfigMap holding exactly the committed JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import kubernetes_validate
import pytest
import yaml

from dashboards.build import outputs, stale
from dashboards.promql import (
    dashboard_files,
    load,
    metric_names,
    panel_queries,
    substitute,
    variable_query,
)
from gpuscope.analytics.runner import DETECTORS
from gpuscope.collector.gauges.analytics_gauges import FINDING_GAUGES
from gpuscope.collector.gauges.inventory_gauges import InventoryGauges
from gpuscope.collector.gauges.metrics import CollectorMetrics
from gpuscope.core.catalogue import agent_sample_names

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = {p.stem: load(p) for p in dashboard_files()}
ALL = {"cluster": ".*", "node_pool": ".*", "node": ".*", "namespace": ".*", "project": ".*"}


def panels(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in d["panels"] if p["type"] != "row"]


def no_store() -> duckdb.DuckDBPyConnection:
    raise duckdb.ConnectionException("no store: the families come without samples")


def test_committed_files_are_what_the_builder_writes() -> None:
    """JSON, provisioning and ConfigMaps are generated: edit dashboards/*.py and run
    `python -m dashboards.build`."""
    assert stale() == []
    assert set(DASHBOARDS) == {
        "gpuscope-overview", "gpuscope-nodes", "gpuscope-workloads",
        "gpuscope-fragmentation", "gpuscope-quotas", "gpuscope-infiniband",
    }  # fmt: skip


def test_every_query_is_promql_and_names_exported_metrics() -> None:
    """Panels and variables, with variables substituted as Grafana would: the parser accepts
    them and each metric is in the agent catalogue or is one of the collector's."""
    collector_static = {"gpuscope_findings"} | {g.name for g in FINDING_GAUGES}
    collector_static |= {s.name for m in CollectorMetrics().registry.collect() for s in m.samples}
    collector_static |= {m.name for m in InventoryGauges(no_store).collect()}
    analytics = tuple(f"gpuscope_{d}_" for d in DETECTORS)
    unknown = set()
    for d in DASHBOARDS.values():
        exprs = [q.expr for q in panel_queries(d)]
        exprs += [variable_query(v)[0] for v in d["templating"]["list"] if v["type"] == "query"]
        assert exprs
        for expr in exprs:
            names = metric_names(substitute(expr, ALL))
            assert names, expr
            unknown |= {
                n
                for n in names
                if n not in agent_sample_names()
                and n not in collector_static
                and not n.startswith(analytics)
            }
    assert unknown == set()


def test_a_broken_expression_is_caught() -> None:
    """The parser is strict enough to be worth running."""
    with pytest.raises(ValueError, match="parenthesis"):
        metric_names("sum(rate(gpuscope_gpu_energy_joules_total[5m])")


def test_every_panel_has_a_unit_a_datasource_and_a_description_or_title() -> None:
    for uid, d in DASHBOARDS.items():
        for p in panels(d):
            assert p["fieldConfig"]["defaults"]["unit"], f"{uid} / {p['title']}"
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
            assert p["targets"], f"{uid} / {p['title']}"
            assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24


def test_variables_datasource_cluster_pool_node_namespace_project() -> None:
    for d in DASHBOARDS.values():
        names = [v["name"] for v in d["templating"]["list"]]
        assert names == ["datasource", "cluster", "node_pool", "node", "namespace", "project"]
        assert d["templating"]["list"][0]["type"] == "datasource"


def test_thresholds_colour_the_panels_that_judge() -> None:
    """Utilization, fragmentation and quota panels carry more than one colour step."""
    judged = {
        ("gpuscope-overview", "Efficiency"),
        ("gpuscope-overview", "FGD fragmentation"),
        ("gpuscope-nodes", "Temperature"),
        ("gpuscope-quotas", "Use of the guarantee"),
        ("gpuscope-infiniband", "Transmit, share of link rate"),
    }
    for uid, title in judged:
        (p,) = [p for p in panels(DASHBOARDS[uid]) if p["title"] == title]
        assert len(p["fieldConfig"]["defaults"]["thresholds"]["steps"]) > 1, title


def test_the_overview_links_to_every_detail_dashboard() -> None:
    overview = DASHBOARDS["gpuscope-overview"]
    urls = {link["url"] for link in overview["links"] if link["type"] == "link"}
    panel_urls = {link["url"].split("?")[0] for p in panels(overview) for link in p["links"]}
    for uid in set(DASHBOARDS) - {"gpuscope-overview"}:
        assert f"/d/{uid}/{uid}" in urls
    assert len(panel_urls) >= 4
    assert all(u.split("/")[2] in DASHBOARDS for u in urls | panel_urls)


def test_the_configmap_holds_exactly_the_committed_json() -> None:
    path = REPO / "deploy" / "grafana" / "dashboards.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    kubernetes_validate.validate(doc, "1.30", strict=True)
    assert doc["metadata"]["labels"]["grafana_dashboard"] == "1"
    committed = {p.name: p.read_text(encoding="utf-8") for p in dashboard_files()}
    assert doc["data"] == committed
    provider = yaml.safe_load((REPO / "deploy" / "grafana" / "provider.yaml").read_text())
    plain = yaml.safe_load((REPO / "dashboards" / "provisioning" / "gpuscope.yml").read_text())
    assert yaml.safe_load(provider["data"]["gpuscope.yml"]) == plain
    assert plain["providers"][0]["options"]["path"].startswith("/var/lib/grafana")
    assert len(outputs()) == len(committed) + 1

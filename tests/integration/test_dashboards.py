"""The dashboards against a real Prometheus scraping simulated agents and a collector:
every variable lists values, every panel's query with its variables set returns data, and
every metric the dashboards name is one the agents or the collector export."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dashboards.promql import (
    dashboard_files,
    load,
    metric_names,
    panel_queries,
    substitute,
    variable_query,
)
from dashboards.stack import CLUSTER, Stack, simulated_stack
from tests import loopback
from tests.conftest import free_port
from tests.integration.helpers import installed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
DASHBOARDS = [load(p) for p in dashboard_files()]
VARIABLES = [v for v in DASHBOARDS[0]["templating"]["list"] if v["type"] == "query"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    installed("prometheus")
    with simulated_stack(tmp_path_factory.mktemp("dash"), port=free_port()) as s:
        # every target scraped at least once (not a fixed sleep: a loaded machine is late)
        wait_for(s.prometheus, f"count(up == 1) >= {len(s.agents) + 1}")
        wait_for(s.prometheus, "count(gpuscope_idle_since_timestamp_seconds)")
        yield s


def wait_for(base: str, expr: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not instant(base, expr):
        assert time.monotonic() < deadline, f"no data for {expr} after {timeout} s"
        time.sleep(0.5)


def instant(base: str, expr: str) -> list[dict[str, Any]]:
    body = loopback.post(f"{base}/api/v1/query", data={"query": expr}, timeout=30).json()
    assert body["status"] == "success", f"{expr}: {body}"
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def variable_values(base: str, variable: Mapping[str, Any], values: dict[str, str]) -> list[str]:
    """What Grafana lists for a variable, given the variables before it."""
    expr, label = variable_query(variable)
    expr = substitute(expr, values)
    if label is not None:
        r = loopback.get(f"{base}/api/v1/series", params={"match[]": expr}, timeout=30).json()
        assert r["status"] == "success", r
        return sorted({s[label] for s in r["data"] if label in s})
    pattern = re.compile(variable["regex"].strip("/"))
    lines = [
        "{" + ",".join(f'{k}="{v}"' for k, v in sorted(s["metric"].items())) + "}"
        for s in instant(base, expr)
    ]
    return sorted({m.group(1) for line in lines if (m := pattern.search(line))})


def grafana_all(variable: Mapping[str, Any], listed: list[str]) -> str:
    """The value "All" takes: the variable's allValue, else its values as a regex."""
    if "allValue" in variable:
        return str(variable["allValue"])
    return "(" + "|".join(grafana_escape(v) for v in listed) + ")"


def grafana_escape(value: str) -> str:
    """Grafana's escaping of a multi-value regex for PromQL: a backslash-escaped regex
    metacharacter, its backslash doubled inside the PromQL string."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def settings(base: str, chosen: Mapping[str, str]) -> dict[str, str]:
    """Each variable in order: the chosen value where given, else All."""
    values: dict[str, str] = {}
    for v in VARIABLES:
        listed = variable_values(base, v, values)
        assert listed, f"variable {v['name']} lists nothing"
        values[v["name"]] = chosen.get(v["name"]) or grafana_all(v, listed)
    return values


def test_every_variable_lists_the_simulated_cluster(stack: Stack) -> None:
    """cluster comes from the scrape label, node_pool from gpuscope_node_info, nodes from the
    agents within the pool, namespaces and projects from the workloads and quotas."""
    values: dict[str, str] = {}
    listed = {}
    for v in VARIABLES:
        listed[v["name"]] = variable_values(stack.prometheus, v, values)
        values[v["name"]] = grafana_all(v, listed[v["name"]])
    assert listed["cluster"] == [CLUSTER]
    assert "h100" in listed["node_pool"]
    assert len(listed["node"]) == 8
    assert listed["namespace"] and listed["project"]
    # a pool narrows the nodes to that pool's (the scenario's nodes are all h100)
    node = VARIABLES[2]
    assert (
        variable_values(stack.prometheus, node, {**values, "node_pool": "h100"}) == listed["node"]
    )
    assert variable_values(stack.prometheus, node, {**values, "node_pool": "a100"}) == []


QUERIES = [(d["uid"], q) for d in DASHBOARDS for q in panel_queries(d)]


@pytest.mark.parametrize("pool", ["All", "h100"])
def test_every_panel_query_returns_data(stack: Stack, pool: str) -> None:
    """With All everywhere, and with cluster and node pool chosen, each panel's query (as
    Grafana would send it) returns at least one series."""
    values = settings(stack.prometheus, {"cluster": CLUSTER, "node_pool": pool}
                      if pool != "All" else {})  # fmt: skip
    # rate() over $__rate_interval (10 s) needs that much history in Prometheus: asked
    # until every query answers (a loaded machine scrapes late), not after a fixed sleep
    pending = [substitute(q.expr, values) for _, q in QUERIES]
    deadline = time.monotonic() + 90
    while True:
        pending = [expr for expr in pending if not instant(stack.prometheus, expr)]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    names = {substitute(q.expr, values): f"{uid} / {q.panel}" for uid, q in QUERIES}
    assert not pending, "\n".join(f"{names[e]}: {e}" for e in pending)


def exported(urls: list[str]) -> set[str]:
    names: set[str] = set()
    for url in urls:
        for fam in text_string_to_metric_families(loopback.get(url, timeout=10).text):
            names.update(s.name for s in fam.samples)
    return names


def test_every_metric_named_is_exported_by_an_agent_or_the_collector(stack: Stack) -> None:
    """Read from the targets' own /metrics, not from Prometheus: a metric Prometheus has
    only because of another exporter would not count."""
    have = exported([*stack.agents, stack.collector])
    values = dict.fromkeys((v["name"] for v in VARIABLES), ".*")
    named = {n for _, q in QUERIES for n in metric_names(substitute(q.expr, values))}
    named |= {n for v in VARIABLES for n in metric_names(substitute(variable_query(v)[0], values))}
    assert named - have == set()


def test_the_committed_picture_is_a_png() -> None:
    """README shows docs/img/dashboards.png; `python -m dashboards.render` makes it."""
    png = Path(__file__).resolve().parents[2] / "docs" / "img" / "dashboards.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

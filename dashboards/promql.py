"""The dashboards' PromQL as Grafana would send it: queries read from the JSON, variables
substituted, and the metric names an expression reads (parsed, not pattern-matched).

Used by the tests (every query parses, names only exported metrics, and returns data from
a real Prometheus) and by the picture in the README.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser

DASHBOARD_DIR = Path(__file__).resolve().parent
#: What Grafana puts for its built-in interval variables; the test's Prometheus scrapes
#: every second, so ten seconds hold enough samples for rate().
BUILTINS = {"__rate_interval": "10s", "__range": "5m", "__interval": "5s"}
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class PanelQuery:
    dashboard: str
    panel: str
    expr: str


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARD_DIR.glob("*.json"))


def panel_queries(dashboard: Mapping[str, Any]) -> Iterator[PanelQuery]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield PanelQuery(dashboard["uid"], panel["title"], target["expr"])


def variable_query(variable: Mapping[str, Any]) -> tuple[str, str | None]:
    """The PromQL inside a ``label_values(...)``/``query_result(...)`` variable and the
    label it lists (None for query_result, whose ``regex`` picks the value)."""
    query = variable["definition"]
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query)
    if m:
        return m.group(1), m.group(2)
    m = re.fullmatch(r"query_result\((.*)\)", query)
    if m:
        return m.group(1), None
    raise ValueError(f"variable {variable['name']}: unsupported query {query!r}")


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``$name`` and ``${name}`` replaced by ``values``, then by Grafana's built-ins."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name in values:
            return values[name]
        if name in BUILTINS:
            return BUILTINS[name]
        raise KeyError(f"no value for ${name} in {expr!r}")

    return _VAR.sub(one, expr)


def parse(expr: str) -> Any:
    """The parsed expression; ValueError with the parser's message when it is not PromQL."""
    return promql_parser.parse(expr)


def metric_names(expr: str) -> set[str]:
    """The metric names every selector of ``expr`` reads."""
    names: set[str] = set()
    stack = [parse(expr)]
    while stack:
        node = stack.pop()
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    names.update(m.value.split("|"))
        elif isinstance(node, promql_parser.MatrixSelector):
            stack.append(node.vector_selector)
        elif isinstance(node, promql_parser.BinaryExpr):
            stack += [node.lhs, node.rhs]
        elif isinstance(node, promql_parser.Call):
            stack += list(node.args)
        elif isinstance(node, promql_parser.AggregateExpr):
            stack.append(node.expr)
            if node.param is not None:
                stack.append(node.param)
        elif isinstance(
            node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr
        ):
            stack.append(node.expr)
    return names

"""A small model of a Grafana dashboard and its JSON, so six dashboards share one look.

Every dashboard gets the same variables (data source, cluster, node pool, node, namespace,
project), every panel names its unit, and panels are laid out left to right in rows of
24 grid columns. The JSON is what Grafana's "Import dashboard" and file provisioning read
(schemaVersion 39, Grafana 10 and later); the data source is the ``datasource`` variable,
so nothing needs to be chosen at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

DS = {"type": "prometheus", "uid": "${datasource}"}
TAG = "gpuscope"
#: The variables' PromQL matchers, used by the panels' queries.
CLUSTER = 'cluster=~"$cluster"'
NODE = f'{CLUSTER}, node=~"$node"'
POOL = f'{CLUSTER}, pool=~"$node_pool"'
WORKLOAD = f'{NODE}, namespace=~"$namespace"'
PROJECT = f'{CLUSTER}, project=~"$project"'

PanelKind = Literal["timeseries", "stat", "bargauge", "table", "gauge"]
#: (value, colour) steps; the first value is None (the base colour).
Steps = Sequence[tuple[float | None, str]]
GOOD_LOW: Steps = ((None, "green"), (0.8, "orange"), (0.9, "red"))
GOOD_HIGH: Steps = ((None, "red"), (0.3, "orange"), (0.6, "green"))
NEUTRAL: Steps = ((None, "blue"),)


@dataclass(frozen=True, slots=True)
class Query:
    expr: str
    legend: str = ""
    #: An instant query (the latest value): for stats, bar gauges and tables.
    instant: bool = False


@dataclass(frozen=True, slots=True)
class Link:
    title: str
    uid: str


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    kind: PanelKind
    queries: Sequence[Query]
    unit: str
    description: str = ""
    steps: Steps = NEUTRAL
    min: float | None = None
    max: float | None = None
    width: int = 8
    height: int = 8
    links: Sequence[Link] = ()
    #: Units for table columns other than the default, by column (query legend) name.
    column_units: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Row:
    title: str
    panels: Sequence[Panel]


@dataclass(frozen=True, slots=True)
class Dashboard:
    uid: str
    title: str
    description: str
    rows: Sequence[Row]
    links: Sequence[Link] = ()

    @property
    def slug(self) -> str:
        return self.uid

    def panels(self) -> list[Panel]:
        return [p for row in self.rows for p in row.panels]


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    label: str
    #: ``label_values(...)`` or ``query_result(...)``, as Grafana's Prometheus source takes.
    query: str
    #: A regular expression picking the value out of a query_result line.
    regex: str = ""
    #: What "All" means; None expands All to the listed values.
    all_value: str | None = ".*"


#: The detail dashboards, for links.
NODES = Link("Nodes and GPUs", "gpuscope-nodes")
WORKLOADS = Link("Workloads", "gpuscope-workloads")
FRAGMENTATION = Link("Fragmentation", "gpuscope-fragmentation")
QUOTAS = Link("Quotas", "gpuscope-quotas")
INFINIBAND = Link("InfiniBand", "gpuscope-infiniband")


VARIABLES: tuple[Variable, ...] = (
    Variable("cluster", "Cluster", "label_values(gpuscope_agent_info, cluster)"),
    Variable("node_pool", "Node pool", f"label_values(gpuscope_node_info{{{CLUSTER}}}, pool)"),
    # every agent's node except those the inventory puts in another pool: a node the
    # inventory does not know (no collector inventory) is still listed
    Variable(
        "node",
        "Node",
        f"query_result(gpuscope_agent_info{{{CLUSTER}}} unless on (cluster, node) "
        f'gpuscope_node_info{{{CLUSTER}, pool!~"$node_pool"}})',
        regex='/node="([^"]+)"/',
        all_value=None,
    ),
    Variable(
        "namespace",
        "Namespace",
        f"label_values(gpuscope_gpu_workload_info{{{CLUSTER}}}, namespace)",
    ),
    Variable(
        "project", "Project", f"label_values(gpuscope_quota_guaranteed_gpus{{{CLUSTER}}}, project)"
    ),
)


def link_url(link: Link, *, carry: bool = True) -> str:
    """A panel link keeps the time range and variables through Grafana's macros; a
    dashboard link says so with its own flags instead."""
    base = f"/d/{link.uid}/{link.uid}"
    return base + "?${__url_time_range}&${__all_variables}" if carry else base


def _variable_json(v: Variable) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": v.name,
        "label": v.label,
        "type": "query",
        "datasource": DS,
        "query": {"query": v.query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "definition": v.query,
        "regex": v.regex,
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "hide": 0,
    }
    if v.all_value is not None:
        out["allValue"] = v.all_value
    return out


def _field_config(p: Panel) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "unit": p.unit,
        "color": {"mode": "palette-classic" if p.kind == "timeseries" else "thresholds"},
        "thresholds": {
            "mode": "absolute",
            "steps": [{"value": v, "color": c} for v, c in p.steps],
        },
        "links": [],
    }
    if p.min is not None:
        defaults["min"] = p.min
    if p.max is not None:
        defaults["max"] = p.max
    if p.kind == "timeseries":
        defaults["custom"] = {"fillOpacity": 10, "lineWidth": 1, "showPoints": "never"}
        if p.steps is not NEUTRAL:
            defaults["custom"]["thresholdsStyle"] = {"mode": "dashed"}
    overrides = [
        {
            "matcher": {"id": "byName", "options": column},
            "properties": [{"id": "unit", "value": unit}],
        }
        for column, unit in p.column_units.items()
    ]
    return {"defaults": defaults, "overrides": overrides}


_REDUCE = {"calcs": ["lastNotNull"], "fields": "", "values": False}


def _options(p: Panel) -> dict[str, Any]:
    if p.kind == "timeseries":
        return {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    if p.kind == "stat":
        return {
            "reduceOptions": _REDUCE,
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
            "justifyMode": "auto",
            "orientation": "auto",
        }
    if p.kind == "bargauge":
        return {
            "reduceOptions": _REDUCE,
            "displayMode": "gradient",
            "orientation": "horizontal",
            "showUnfilled": True,
            "minVizHeight": 10,
            "minVizWidth": 0,
        }
    if p.kind == "gauge":
        return {"reduceOptions": _REDUCE, "showThresholdMarkers": True}
    return {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}


def _panel_json(p: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    table = p.kind == "table"
    targets = [
        {
            "refId": chr(ord("A") + i),
            "datasource": DS,
            "expr": q.expr,
            "legendFormat": q.legend or "__auto",
            "instant": q.instant or table,
            "range": not (q.instant or table),
            "format": "table" if table else "time_series",
        }
        for i, q in enumerate(p.queries)
    ]
    out: dict[str, Any] = {
        "id": pid,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": DS,
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": _field_config(p),
        "options": _options(p),
        "links": [{"title": link.title, "url": link_url(link)} for link in p.links],
    }
    if table:
        merge = [{"id": "merge", "options": {}}] if len(p.queries) > 1 else []
        hide = {"Time": True, "__name__": True, "job": True, "instance": True}
        names = {f"Value #{t['refId']}": q.legend for t, q in zip(targets, p.queries, strict=True)}
        organize = {"excludeByName": hide, "renameByName": {k: v for k, v in names.items() if v}}
        out["transformations"] = [*merge, {"id": "organize", "options": organize}]
    return out


def dashboard_json(d: Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for row in d.rows:
        panels.append(
            {
                "id": pid,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        pid, y, x, line = pid + 1, y + 1, 0, 0
        for p in row.panels:
            if x + p.width > 24:
                x, y, line = 0, y + line, 0
            panels.append(_panel_json(p, pid, x, y))
            pid, x, line = pid + 1, x + p.width, max(line, p.height)
        y += line
    return {
        "uid": d.uid,
        "title": d.title,
        "description": d.description,
        "tags": [TAG],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                    "regex": "",
                    "options": [],
                },
                *(_variable_json(v) for v in VARIABLES),
            ]
        },
        "links": [
            *(
                {
                    "title": link.title,
                    "type": "link",
                    "url": link_url(link, carry=False),
                    "icon": "dashboard",
                    "includeVars": True,
                    "keepTime": True,
                    "targetBlank": False,
                    "asDropdown": False,
                    "tags": [],
                    "tooltip": "",
                }
                for link in d.links
            ),
            {
                "title": "gpuscope",
                "type": "dashboards",
                "tags": [TAG],
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
                "icon": "external link",
                "targetBlank": False,
                "tooltip": "",
                "url": "",
            },
        ],
        "panels": panels,
    }


def stat(title: str, expr: str, unit: str, **kw: Any) -> Panel:
    """A single-number panel of an instant query."""
    kw.setdefault("width", 4)
    kw.setdefault("height", 5)
    return Panel(title, "stat", [Query(expr, instant=True)], unit, **kw)

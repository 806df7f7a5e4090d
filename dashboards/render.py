"""A picture of what the dashboards show, for the README, where no Grafana is at hand.

``python -m dashboards.render`` starts the simulated stack (agents, collector, a real
Prometheus; see stack.py), lets it run ``--seconds``, then plots a selection of panels
with the very queries of the committed dashboard JSON (variables at All) into
``docs/img/dashboards.png``. ``--prometheus URL`` plots from a running Prometheus instead.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from dashboards.promql import DASHBOARD_DIR, load, substitute
from dashboards.stack import simulated_stack
from gpuscope.core.errors import UserError

OUT = DASHBOARD_DIR.parent / "docs" / "img" / "dashboards.png"
ALL = {"cluster": ".*", "node_pool": ".*", "node": ".*", "namespace": ".*", "project": ".*"}
#: (dashboard uid, panel title) of the panels drawn, in reading order.
PANELS: tuple[tuple[str, str], ...] = (
    ("gpuscope-overview", "GPUs allocated, busy and idle"),
    ("gpuscope-overview", "Efficiency of allocated GPUs"),
    ("gpuscope-overview", "Open findings by kind"),
    ("gpuscope-nodes", "GPU utilization"),
    ("gpuscope-workloads", "Utilization per project"),
    ("gpuscope-workloads", "Idle sessions and workloads"),
    ("gpuscope-fragmentation", "Free GPUs per node"),
    ("gpuscope-quotas", "Guaranteed, used and over quota"),
    ("gpuscope-infiniband", "Transmit, share of link rate"),
)


def panel(uid: str, title: str) -> dict[str, Any]:
    d = load(DASHBOARD_DIR / f"{uid}.json")
    found: list[dict[str, Any]] = [p for p in d["panels"] if p.get("title") == title]
    (p,) = found
    return p


def _get(base: str, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    body = httpx.post(f"{base}/api/v1/{path}", data=params, timeout=30).json()
    if body.get("status") != "success":
        raise UserError(f"prometheus {path} {params.get('query')}: {body.get('error')}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _legend(fmt: str, labels: dict[str, str]) -> str:
    out = fmt if fmt != "__auto" else ""
    for k, v in labels.items():
        out = out.replace("{{" + k + "}}", v)
    return out or ",".join(f"{k}={v}" for k, v in labels.items() if k != "__name__")


def _scale(unit: str) -> tuple[float, str]:
    names = {"percentunit": "%", "short": "", "s": "seconds", "bytes": "bytes"}
    return (100.0 if unit == "percentunit" else 1.0), names.get(unit, unit)


def _bars(ax: Axes, base: str, p: dict[str, Any], end: float, factor: float) -> None:
    """Latest values as horizontal bars, grouped by subject with one bar per query (a
    column of another unit is left out)."""
    other = {o["matcher"]["options"] for o in p["fieldConfig"]["overrides"]}
    targets = [t for t in p["targets"] if t["legendFormat"] not in other]
    values: dict[str, dict[str, float]] = {}
    for t in targets:
        for s in _get(base, "query", {"query": substitute(t["expr"], ALL), "time": end}):
            m = s["metric"]
            key = m.get("pod") or m.get("project") or _legend(t["legendFormat"], m)
            values.setdefault(key, {})[t["refId"]] = float(s["value"][1]) * factor
    keys = sorted(values)[:16]
    height = 0.8 / len(targets)
    for i, t in enumerate(targets):
        ys = [k + i * height for k in range(len(keys))]
        xs = [values[k].get(t["refId"], 0.0) for k in keys]
        name = t["legendFormat"] if len(targets) > 1 else None
        ax.barh(ys, xs, height=height, label=name)
    ax.set_yticks([k + 0.4 - height / 2 for k in range(len(keys))], keys)
    ax.invert_yaxis()
    if len(targets) > 1:
        ax.legend(fontsize=7)


def draw(ax: Axes, base: str, p: dict[str, Any], start: float, end: float) -> None:
    unit = p["fieldConfig"]["defaults"]["unit"]
    factor, label = _scale(unit)
    ax.set_title(p["title"], fontsize=10, loc="left")
    if p["type"] == "timeseries":
        for t in p["targets"]:
            query = substitute(t["expr"], ALL)
            params = {"query": query, "start": start, "end": end, "step": 2}
            for s in _get(base, "query_range", params):
                xs = [float(v[0]) - end for v in s["values"]]
                ys = [float(v[1]) * factor for v in s["values"]]
                ax.plot(xs, ys, linewidth=1, label=_legend(t["legendFormat"], s["metric"]))
        ax.set_ylabel(label, fontsize=8)
        ax.set_xlabel("seconds before now", fontsize=8)
        if len(ax.lines) <= 6:
            ax.legend(fontsize=7, loc="upper left")
    else:
        _bars(ax, base, p, end, factor)
        ax.set_xlabel(label, fontsize=8)
    ax.tick_params(labelsize=7)


def render(base: str, out: Path, window_s: float) -> None:
    end = time.time()
    fig, axes = plt.subplots(3, 3, figsize=(16, 11), constrained_layout=True)
    for ax, (uid, title) in zip(axes.flat, PANELS, strict=True):
        draw(ax, base, panel(uid, title), end - window_s, end)
    fig.suptitle(
        "gpuscope dashboards on the simulated cluster (panel queries from dashboards/*.json)",
        fontsize=12,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards.render", description=__doc__)
    parser.add_argument("--prometheus", help="plot from this Prometheus (default: simulate)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seconds", type=float, default=90.0, help="history to plot")
    parser.add_argument("--port", type=int, default=9490, help="the simulated Prometheus' port")
    args = parser.parse_args(argv)
    try:
        if args.prometheus:
            render(args.prometheus, args.out, args.seconds)
        else:
            with (
                tempfile.TemporaryDirectory() as tmp,
                simulated_stack(Path(tmp), port=args.port) as stack,
            ):
                print(f"simulating for {args.seconds:g} s ...", file=sys.stderr)
                time.sleep(args.seconds)
                render(stack.prometheus, args.out, args.seconds)
    except UserError as exc:
        print(f"render: {exc}", file=sys.stderr)
        return 2
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

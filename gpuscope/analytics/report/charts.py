"""The weekly report's charts: matplotlib figures rendered to PNG and embedded as data URIs.

Embedded images keep the HTML one self-contained file that opens without a network (a
mail attachment, a chat upload). Matplotlib runs on its Agg backend: no display, and safe
in the collector's scheduler thread (nothing global is shared but the rc defaults, which
are only read). Each chart function takes the report and returns a data URI, or None
when its table is empty (the section then says so instead of drawing nothing).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import polars as pl
from matplotlib.axes import Axes
from matplotlib.dates import DateFormatter, DayLocator
from matplotlib.figure import Figure

from gpuscope.analytics.report.data import WeeklyReport
from gpuscope.analytics.report.idle_policies import idle_policies_chart

#: Colour per quantity, the same in every chart (colour-blind safe: Okabe-Ito).
COLOURS = {
    "capacity": "#999999",
    "allocated": "#0072B2",
    "busy": "#0072B2",
    "used": "#009E73",
    "idle": "#D55E00",
    "no_data": "#CCCCCC",
    "guarantee": "#000000",
    "ratio": "#CC79A7",
    "peak": "#56B4E9",
    "hot": "#D55E00",
}
DPI = 110
#: Rows in a bar chart at most (the table under it has them all).
MAX_BARS = 15


def _uri(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(width: float = 9.0, height: float = 3.6) -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(figsize=(width, height))
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def daily_gpu_hours(report: WeeklyReport) -> str | None:
    """Per day: held GPU-hours split into busy / idle / no data, used and capacity on top."""
    d = report.tables["daily"]
    if d.height == 0 or d["allocated_gpu_hours"].sum() <= 0:
        return None
    fig, ax = _figure()
    days = [x.strftime("%a %d %b") for x in d["day"]]
    idle, no_data = d["idle_gpu_hours"].to_list(), d["no_data_gpu_hours"].to_list()
    busy = (d["allocated_gpu_hours"] - d["idle_gpu_hours"] - d["no_data_gpu_hours"]).to_list()
    ax.bar(days, busy, color=COLOURS["busy"], label="held, not idle")
    ax.bar(days, idle, bottom=busy, color=COLOURS["idle"], label="held, idle")
    tops = [b + i for b, i in zip(busy, idle, strict=True)]
    ax.bar(
        days,
        no_data,
        bottom=tops,
        color=COLOURS["no_data"],
        hatch="//",
        edgecolor="#777777",
        label="held, no data",
    )
    ax.plot(
        days,
        d["used_gpu_hours"].to_list(),
        "o-",
        color=COLOURS["used"],
        label="used (utilization-weighted)",
    )
    if d["capacity_gpu_hours"].null_count() < d.height:
        ax.plot(
            days,
            d["capacity_gpu_hours"].to_list(),
            "_",
            markersize=30,
            color=COLOURS["capacity"],
            label="capacity",
        )
    ax.set_ylabel("GPU-hours")
    ax.set_title(f"GPU-hours per day, {report.week.label} (UTC)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _uri(fig)


def hourly_gpus(report: WeeklyReport) -> str | None:
    """GPUs offered, held and used, hour by hour; hours without data shaded."""
    h = report.tables["hourly"]
    if h.height == 0 or h["allocated_gpus"].sum() <= 0:
        return None
    fig, ax = _figure(height=3.2)
    hours = h["hour"].to_list()
    if h["capacity_gpus"].null_count() < h.height:
        ax.step(
            hours,
            h["capacity_gpus"].fill_null(0).to_list(),
            where="post",
            color=COLOURS["capacity"],
            label="capacity",
        )
    ax.step(
        hours,
        h["allocated_gpus"].to_list(),
        where="post",
        color=COLOURS["allocated"],
        label="held (allocated)",
    )
    ax.step(
        hours,
        h["used_gpus"].to_list(),
        where="post",
        color=COLOURS["used"],
        label="used (utilization-weighted)",
    )
    ax.step(hours, h["idle_gpus"].to_list(), where="post", color=COLOURS["idle"], label="idle")
    dark = h.filter(
        (pl.col("allocated_gpus") > 0)
        & (pl.col("no_data_gpus") >= pl.col("allocated_gpus") * 0.999)
    )
    for i, hour in enumerate(dark["hour"].to_list()):
        ax.axvspan(
            hour,
            hour + (hours[1] - hours[0]),
            color=COLOURS["no_data"],
            alpha=0.6,
            lw=0,
            label="no data" if i == 0 else None,
        )
    ax.xaxis.set_major_locator(DayLocator())  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(DateFormatter("%a %d"))  # type: ignore[no-untyped-call]
    ax.set_ylabel("GPUs (hourly mean)")
    ax.set_title("GPUs over the week, hour by hour (UTC)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _uri(fig)


def _hbars(labels: list[str], series: dict[str, list[float]], title: str, xlabel: str) -> str:
    n = len(labels)
    fig, ax = _figure(height=max(2.0, 0.35 * n * max(1, len(series)) / 1.5 + 1))
    height = 0.8 / len(series)
    for k, (name, values) in enumerate(series.items()):
        ys = [i + k * height for i in range(n)]
        ax.barh(ys, values, height=height, color=COLOURS.get(name.split(" ")[0]), label=name)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(n)], labels)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend(loc="lower right", frameon=False)
    return _uri(fig)


def projects(report: WeeklyReport) -> str | None:
    p = report.tables["projects"].head(MAX_BARS)
    if p.height == 0:
        return None
    return _hbars(
        p["project"].to_list(),
        {
            "allocated": p["allocated_gpu_hours"].to_list(),
            "used": p["used_gpu_hours"].to_list(),
            "idle": p["idle_gpu_hours"].to_list(),
        },
        f"GPU-hours by project (top {p.height} by allocation)",
        "GPU-hours",
    )


def quotas(report: WeeklyReport) -> str | None:
    q = report.tables["quotas"].head(MAX_BARS)
    if q.height == 0:
        return None
    return _hbars(
        q["project"].to_list(),
        {
            "guarantee": q["guaranteed_gpus"].to_list(),
            "allocated (weekly mean)": q["average_gpus"].to_list(),
            "peak (busiest hour)": q["peak_hour_gpus"].to_list(),
        },
        "Guaranteed GPUs against GPUs held (weekly mean; busiest hour)",
        "GPUs",
    )


def fragmentation(report: WeeklyReport) -> str | None:
    f = report.tables["fragmentation"]
    if f.height == 0:
        return None
    fig, ax = _figure(height=3.0)
    at = f["at"].to_list()
    ax.step(
        at,
        f["fgd_fragmentation_ratio"].to_list(),
        where="post",
        color=COLOURS["ratio"],
        label="FGD fragmentation (share of free GPU capacity)",
    )
    ax.set_ylim(0, 1)
    ax.set_ylabel("ratio (0..1)")
    right = ax.twinx()
    right.step(
        at, f["free_gpus"].to_list(), where="post", color=COLOURS["capacity"], label="free GPUs"
    )
    right.set_ylabel("free GPUs")
    right.set_ylim(bottom=0)
    # the week, whatever the data: one snapshot alone would widen the axis by years, and a
    # tick a day over that took seconds (matplotlib's "Locator attempting ..." warning)
    ax.set_xlim(report.week.start, report.week.end)  # type: ignore[arg-type]
    ax.xaxis.set_major_locator(DayLocator())  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(DateFormatter("%a %d"))  # type: ignore[no-untyped-call]
    ax.set_title("GPU fragmentation over the week (UTC)")
    lines = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(
        lines[0] + more[0],
        lines[1] + more[1],
        loc="upper left",
        bbox_to_anchor=(1.08, 1.0),
        frameon=False,
    )
    return _uri(fig)


#: Line style per what-if policy (colour-blind safe, with "what happened" in black).
POLICY_STYLES = {
    "leastallocated": ("#E69F00", "-"),
    "mostallocated": ("#56B4E9", "-"),
    "bestfit": ("#009E73", "--"),
    "dotprod": ("#0072B2", "--"),
    "random": ("#999999", ":"),
    "fgd": ("#CC79A7", "-"),
    "what happened": ("#000000", "-"),
}


def whatif(report: WeeklyReport) -> str | None:
    """GPUs allocated hour by hour: one line per policy replayed, and what happened."""
    a = report.tables["whatif_allocation"]
    if a.height == 0:
        return None
    fig, ax = _figure(height=3.4)
    for (policy,), rows in a.group_by("policy", maintain_order=True):
        colour, style = POLICY_STYLES.get(str(policy), ("#777777", "-"))
        ax.step(
            rows["at"].to_list(),
            rows["allocated_gpus"].to_list(),
            where="post",
            color=colour,
            linestyle=style,
            linewidth=2.2 if policy == "what happened" else 1.4,
            label=str(policy),
        )
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(DayLocator())  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_formatter(DateFormatter("%a %d"))  # type: ignore[no-untyped-call]
    ax.set_ylabel("GPUs allocated")
    ax.set_title("What if: GPUs allocated over the week, per placement policy (UTC)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _uri(fig)


def ib_hotspots(report: WeeklyReport) -> str | None:
    ib = report.tables["ib_hotspots"].head(MAX_BARS)
    if ib.height == 0:
        return None
    labels = [f"{n} {d}/{p}" for n, d, p in ib.select("node", "device", "port").iter_rows()]
    return _hbars(
        labels,
        {"hot hours": ib["hot_hours"].to_list()},
        "InfiniBand ports: hours over the hot threshold",
        "hours",
    )


def idle_sessions(report: WeeklyReport) -> str | None:
    s = report.tables["idle_sessions"].head(MAX_BARS)
    if s.height == 0:
        return None
    labels = [
        f"{ns}/{pod} ({owner or '?'})"
        for ns, pod, owner in s.select("namespace", "pod", "owner").iter_rows()
    ]
    return _hbars(
        labels,
        {"idle": s["idle_gpu_hours"].to_list()},
        "Idle GPU-hours of the top idle workloads",
        "idle GPU-hours",
    )


#: Section -> chart, in the order of the report.
CHARTS: dict[str, Callable[[WeeklyReport], str | None]] = {
    "daily": daily_gpu_hours,
    "hourly": hourly_gpus,
    "projects": projects,
    "idle_sessions": idle_sessions,
    "idle_policies": idle_policies_chart,
    "quotas": quotas,
    "fragmentation": fragmentation,
    "whatif": whatif,
    "ib_hotspots": ib_hotspots,
}


def render_charts(report: WeeklyReport) -> dict[str, str]:
    """Every chart that has data, as data URIs by section."""
    out = {}
    for name, chart in CHARTS.items():
        uri = chart(report)
        if uri is not None:
            out[name] = uri
    return out

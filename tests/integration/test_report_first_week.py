"""The weekly report with no previous week stored, and its page at 1,280 px (issue 38).

Seen: with no previous week the banner said "changes are not shown" and the cluster table
showed "—", but the projects and namespaces tables (HTML and CSV) gave
``allocated_change_gpu_hours`` equal to the whole week's allocation; "at the
fewest.Every state" lacked its space; the topology lines repeated "64-GPU slots 0.0" for
every level; at 1,280 px pod and node names broke over three lines and two tables ran past
the content column.

The fortnight of tests/integration/report_week.py is reported for its first week
(2025-W09), before which nothing is stored. The layout is measured in headless Chromium
(``scripts/install-test-servers chromium``): a copy of the page gets a script that
measures it after layout and writes the figures into the DOM, which ``--dump-dom`` prints;
the page itself stays script-free. A screenshot is kept beside the test's files.
"""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from gpuscope.analytics.report.data import WeeklyReport, build_report
from gpuscope.analytics.report.html import render_html
from gpuscope.analytics.report.markdown import render_markdown
from gpuscope.analytics.report.week import Week
from gpuscope.analytics.report.weekly import report_files
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from tests.integration import report_week as rw
from tests.integration.helpers import installed

pytestmark = pytest.mark.integration
W09, W10 = Week(2025, 9), Week(2025, 10)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rw.build(tmp_path_factory.mktemp("first") / "week.duckdb")


def _report(db: Path, week: Week) -> WeeklyReport:
    with Store.open(db, read_only=True) as store:
        return build_report(store.cursor(), week, Settings(), now=rw.NOW)


def test_without_a_previous_week_no_table_shows_a_change(db: Path) -> None:
    report = _report(db, W09)
    assert any("changes are not shown" in n for n in report.notes)
    for name in ("projects", "namespaces"):
        df = report.tables[name]
        assert df.height and df["allocated_gpu_hours"].sum() > 0
        assert df["allocated_change_gpu_hours"].null_count() == df.height, name
        assert df["efficiency_change"].null_count() == df.height, name
    files, _ = report_files(report, None)
    for name in ("projects", "namespaces"):
        rows = list(csv.DictReader(io.StringIO(files[f"tables/{name}.csv"].decode())))
        assert rows and all(r["allocated_change_gpu_hours"] == "" for r in rows), name
    page = render_html(report)
    projects = page[page.index('<section id="projects">') : page.index('<section id="namespaces">')]
    assert "+336.0" not in projects and "—" in projects


def test_a_project_new_this_week_changed_from_zero(db: Path) -> None:
    """With a previous week stored, a key absent then changed from 0 (nlp: 132 GPU-h)."""
    rows = {r["project"]: r for r in _report(db, W10).tables["projects"].iter_rows(named=True)}
    assert rows["nlp"]["allocated_change_gpu_hours"] == pytest.approx(48 + 84)
    assert rows["vision"]["allocated_change_gpu_hours"] == pytest.approx(504 - 336)


LEAF = "network.topology.nvidia.com/leaf"
SPINE = "network.topology.nvidia.com/spine"


def test_topology_lines_say_each_figure_once(tmp_path: Path) -> None:
    """Two levels (leaf, spine) without a 64-GPU slot all week: one line names both, and
    the sentence after it starts after a space."""
    nodes = [
        NodeInfo(
            name=f"n{i}",
            allocatable_gpus=8,
            cpu_milli=64_000,
            labels={LEAF: f"l{i // 2}", SPINE: "s0"},
        )
        for i in range(4)
    ]
    pod = PodInfo(namespace="t", name="x", uid="x", node="n0", phase="Running",
                  start_time=None, gpu_request=1)  # fmt: skip
    with Store.open(tmp_path / "w.duckdb") as store:
        store.record_inventory(W10.start, nodes=nodes, pods=[pod])
        report = build_report(store.cursor(), W10, Settings(), now=W10.end + timedelta(hours=1))
    page = render_html(report)
    assert page.count("64-GPU slots 0.0") == 1
    assert f"{LEAF}, {SPINE}: 64-GPU slots 0.0" in page or f"{SPINE}, {LEAF}: 64-GPU" in page
    assert "fewest.Every" not in page and "at the fewest. Every state" in page
    text = render_markdown(report, None)
    assert text.count("64-GPU slots") == 1


# -- layout at 1,280 px -------------------------------------------------------------------
#: Measures the page after layout: the content column's right edge, each table's box
#: (its scrolling wrapper where it has one), the most lines any body cell's text takes.
MEASURE = """
<script>
addEventListener("load", () => {
  const body = document.body, cs = getComputedStyle(body);
  const right = body.getBoundingClientRect().right - parseFloat(cs.paddingRight);
  const tables = [...document.querySelectorAll("table")].map(t => {
    const box = t.parentElement.classList.contains("scroll") ? t.parentElement : t;
    return {section: t.closest("section")?.id, right: box.getBoundingClientRect().right};
  });
  let worst = {lines: 0, text: ""};
  for (const td of document.querySelectorAll("td")) {
    const range = document.createRange();
    range.selectNodeContents(td);
    const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
    if (tops.size > worst.lines) worst = {lines: tops.size, text: td.textContent};
  }
  const out = document.createElement("pre");
  out.id = "layout";
  out.textContent = JSON.stringify({right, tables, worst,
    pageWidth: document.documentElement.scrollWidth});
  body.appendChild(out);
});
</script>
"""

LONG_POD = "train-llama3-70b-sft-sweep-lr3e5-bs512-worker-7f9c4b6d8-x2kqz"
LONG_NODE = "gpu-h100-sxm5-80gb-rack07-slot03.us-east-2.compute.internal"


def _long_names(report: WeeklyReport) -> WeeklyReport:
    """The fortnight's tables with the pod and node names clusters have."""
    tables = {}
    for name, table in report.tables.items():
        df = table
        for col, value in (("pod", LONG_POD), ("node", LONG_NODE), ("nodes", LONG_NODE)):
            if col in df.columns and df[col].dtype == pl.String:
                df = df.with_columns(pl.lit(value).alias(col))
        tables[name] = df
    return replace(report, tables=tables)


def _chromium(args: list[str]) -> str:
    exe = installed("chromium")
    res = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,8000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_the_page_reads_at_1280_px(db: Path, tmp_path: Path) -> None:
    report = _long_names(_report(db, W10))
    page = render_html(report)
    assert "<script" not in page  # the page itself is self-contained and script-free
    shot = tmp_path / "report.html"
    shot.write_text(page)
    png = tmp_path / "report-1280.png"
    _chromium([f"--screenshot={png}", shot.as_uri()])
    assert png.stat().st_size > 10_000
    measured = tmp_path / "measured.html"
    measured.write_text(page.replace("</body>", MEASURE + "</body>"))
    dom = _chromium(["--virtual-time-budget=5000", "--dump-dom", measured.as_uri()])
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S)
    assert found, dom[-500:]
    got = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert got["pageWidth"] <= 1280
    over = [t for t in got["tables"] if t["right"] > got["right"] + 1]
    assert not over, (over, got["right"])
    assert got["worst"]["lines"] == 1, got["worst"]
    assert LONG_POD in page and LONG_NODE in page

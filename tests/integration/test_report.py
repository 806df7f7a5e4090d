"""The weekly report against hand-computed figures on a constructed fortnight.

tests/integration/report_week.py builds the store (through the collector's write paths and
its roll-up tables) and computes every expected figure by hand in its docstring: a week
with a day of missing data, a project with a guarantee and no usage at all.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuscope.analytics.report.data import TABLES, WeeklyReport, build_report
from gpuscope.analytics.report.week import Week
from gpuscope.analytics.report.weekly import weekly_report
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.service import CollectorService
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings, load_settings
from gpuscope.service import report_job
from tests.integration import report_week as rw
from tests.integration.helpers import ENV

pytestmark = pytest.mark.integration
W10 = Week(2025, 10)
PRICE = {"report": {"price_per_gpu_hour": 2.5, "currency": "EUR"}}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rw.build(tmp_path_factory.mktemp("report") / "week.duckdb")


def _report(db: Path, settings: Settings | None = None) -> WeeklyReport:
    with Store.open(db, read_only=True) as store:
        return build_report(store.cursor(), W10, settings or Settings(), now=rw.NOW)


@pytest.fixture(scope="module")
def report(db: Path) -> WeeklyReport:
    return _report(db, Settings.model_validate(PRICE))


def rows(df: pl.DataFrame, key: str) -> dict[str, dict[str, Any]]:
    return {r[key]: r for r in df.iter_rows(named=True)}


def test_cluster_figures_and_the_change_from_last_week(report: WeeklyReport) -> None:
    """636 allocated, 268.08 used, 180 idle, 84 without data, efficiency 268.08 / 552;
    the week before: 336 allocated, 201.6 used; capacity 8 GPUs x 168 h."""
    m = report.metric
    assert m("capacity_gpu_hours") == pytest.approx(1344)
    assert m("allocated_gpu_hours") == pytest.approx(636)
    assert m("used_gpu_hours") == pytest.approx(268.08)
    assert m("idle_gpu_hours") == pytest.approx(180)
    assert m("no_data_gpu_hours") == pytest.approx(84)
    assert m("efficiency") == pytest.approx(268.08 / 552)
    assert m("idle_share") == pytest.approx(180 / 552)
    assert m("allocated_gpu_hours", "previous_week") == pytest.approx(336)
    assert m("used_gpu_hours", "previous_week") == pytest.approx(201.6)
    assert m("allocated_gpu_hours", "change") == pytest.approx(300)
    assert m("efficiency", "change") == pytest.approx(268.08 / 552 - 0.6)


def test_a_day_without_data_is_reported_as_no_data_not_idle(report: WeeklyReport) -> None:
    """Thursday: the 84 GPU-hours held are 'no data' (not idle, not in efficiency), the
    gap is a table row and the first note, and the chat summary says it."""
    daily = {r["day"].date().isoformat(): r for r in report.tables["daily"].iter_rows(named=True)}
    thu = daily["2025-03-06"]
    assert thu["allocated_gpu_hours"] == pytest.approx(84)
    assert thu["no_data_gpu_hours"] == pytest.approx(84)
    assert thu["idle_gpu_hours"] == 0
    assert thu["efficiency"] is None
    assert thu["data_coverage"] == 0
    assert daily["2025-03-07"]["data_coverage"] == 1
    assert daily["2025-03-07"]["idle_gpu_hours"] == pytest.approx(24)  # nb-d, idle again
    gaps = report.tables["data_gaps"].to_dicts()
    assert gaps == [
        {"start": rw.THU, "end": rw.FRI, "hours": 24.0,
         "allocated_gpu_hours_without_data": pytest.approx(84)},
    ]  # fmt: skip
    assert "No utilization data from 2025-03-06 00:00 to 2025-03-07 00:00" in report.notes[0]
    assert "not as idle" in report.notes[0]


def test_projects_and_namespaces(report: WeeklyReport) -> None:
    """vision = train-a + nb-d; nlp = nb-b + infer-c (half a GPU); empty has nothing."""
    p = rows(report.tables["projects"], "project")
    assert p["vision"]["allocated_gpu_hours"] == pytest.approx(504)
    assert p["vision"]["used_gpu_hours"] == pytest.approx(233.28)
    assert p["vision"]["idle_gpu_hours"] == pytest.approx(144)
    assert p["vision"]["no_data_gpu_hours"] == pytest.approx(72)
    assert p["vision"]["efficiency"] == pytest.approx(233.28 / 432)
    assert p["vision"]["previous_allocated_gpu_hours"] == pytest.approx(336)
    assert p["vision"]["allocated_change_gpu_hours"] == pytest.approx(168)
    assert p["nlp"]["allocated_gpu_hours"] == pytest.approx(132)
    assert p["nlp"]["used_gpu_hours"] == pytest.approx(34.8)
    assert p["nlp"]["idle_gpu_hours"] == pytest.approx(36)
    assert p["nlp"]["previous_allocated_gpu_hours"] is None
    assert p["vision"]["idle_cost"] == pytest.approx(360)
    ns = rows(report.tables["namespaces"], "namespace")
    assert ns["nlp"]["project"] == "nlp"
    assert ns["nlp"]["allocated_gpu_hours"] == pytest.approx(132)


def test_a_project_with_no_usage_is_listed_with_zeros_not_dropped(report: WeeklyReport) -> None:
    """Its efficiency is unknown (nothing to divide), not 0 or 100 %."""
    empty = rows(report.tables["projects"], "project")["empty"]
    assert empty["allocated_gpu_hours"] == 0
    assert empty["used_gpu_hours"] == 0
    assert empty["efficiency"] is None
    q = rows(report.tables["quotas"], "project")["empty"]
    assert q["guaranteed_gpus"] == 2
    assert q["guaranteed_gpu_hours"] == pytest.approx(336)
    assert q["use_of_guarantee"] == 0


def test_quota_use_against_guarantees(report: WeeklyReport) -> None:
    """nlp (guarantee 1) held 1.5 GPUs for the first 48 h: 24 GPU-hours over."""
    q = rows(report.tables["quotas"], "project")
    assert q["vision"]["use_of_guarantee"] == pytest.approx(504 / 672)
    assert q["vision"]["hours_over_guarantee"] == 0
    assert q["nlp"]["peak_hour_gpus"] == pytest.approx(1.5)
    assert q["nlp"]["hours_over_guarantee"] == 48
    assert q["nlp"]["gpu_hours_over_guarantee"] == pytest.approx(24)
    assert q["nlp"]["average_gpus"] == pytest.approx(132 / 168)


def test_top_idle_sessions_and_who_owns_them(report: WeeklyReport) -> None:
    """nb-d (owner label) 144 idle GPU-hours, then nb-b (its StatefulSet) 36; busy pods
    are not listed."""
    idle = report.tables["idle_sessions"].to_dicts()
    assert [(r["namespace"], r["pod"], r["owner"]) for r in idle] == [
        ("vision", "nb-d", "dana"),
        ("nlp", "nb-b", "StatefulSet/nb-b"),
    ]
    assert idle[0]["idle_gpu_hours"] == pytest.approx(144)
    assert idle[0]["no_data_gpu_hours"] == pytest.approx(24)
    assert idle[0]["interactive"] is True
    assert idle[1]["idle_gpu_hours"] == pytest.approx(36)
    assert idle[1]["last_held"] == rw.WED


def test_fragmentation_through_the_week(report: WeeklyReport) -> None:
    """Until Wednesday 4.5 of 8 GPUs are held (half a GPU stranded); then 2 more are free.
    One row per inventory state, weighted by how long it lasted in the week."""
    f = {r["at"]: r for r in report.tables["fragmentation"].iter_rows(named=True)}
    assert sorted(f) == [rw.W10, rw.WED]
    assert (f[rw.W10]["hours"], f[rw.WED]["hours"]) == (48, 120)
    assert f[rw.W10]["total_gpus"] == 8
    assert f[rw.W10]["free_gpus"] == pytest.approx(3.5)
    assert f[rw.W10]["stranded_gpu_capacity"] == pytest.approx(0.5)
    assert f[rw.WED]["free_gpus"] == pytest.approx(4.5)


def test_worst_fragmentation_is_the_worst_state_of_the_week(db: Path, tmp_path: Path) -> None:
    """Regression (issue 12): sampled every 6 h from the week's start, the report said
    "worst 13 %" of a week whose last hours sat at 54 % with a 4-GPU job blocked. A state
    that lasts only Sunday 20:00-24:00 (a 4-GPU job pending, a 1-GPU pod on n1) is a row
    of 4 hours, the week's worst, and the summary's worst; the mean is time-weighted."""
    from gpuscope.analytics.report.fragmentation import weighted_mean
    from gpuscope.analytics.report.markdown import render_markdown

    copy = tmp_path / "late.duckdb"
    copy.write_bytes(db.read_bytes())
    late = rw.W10 + timedelta(days=6, hours=20)
    blocked = replace(rw.pod("vision", "big-e", "", gpus=4), node=None, phase="Pending")
    with Store.open(copy) as store:
        store.record_inventory(
            late, pods=[rw.A, rw.C, rw.D, rw.pod("nlp", "one-f", "n1", gpus=1), blocked]
        )
    report = _report(copy)
    frag = report.tables["fragmentation"]
    last = frag.filter(pl.col("at") == late).to_dicts()
    assert len(last) == 1 and last[0]["hours"] == pytest.approx(4)
    assert last[0]["pending_tasks"] == 1
    earlier = frag.filter(pl.col("at") < late)["fgd_fragmentation_ratio"].max()
    assert last[0]["fgd_fragmentation_ratio"] > earlier
    assert frag["fgd_fragmentation_ratio"].max() == last[0]["fgd_fragmentation_ratio"]
    assert frag["hours"].sum() == pytest.approx(168)
    mean = weighted_mean(frag)
    assert mean == pytest.approx(
        sum(r["fgd_fragmentation_ratio"] * r["hours"] for r in frag.to_dicts()) / 168
    )
    worst = f"{100 * last[0]['fgd_fragmentation_ratio']:.1f} %"
    assert f"worst {worst}" in render_markdown(report, None)


def test_infiniband_hot_spot(report: WeeklyReport) -> None:
    """n1 mlx5_0/1 at 90 % of its link for 10 hours from Tuesday 08:00."""
    [port] = report.tables["ib_hotspots"].to_dicts()
    assert (port["node"], port["device"], port["port"]) == ("n1", "mlx5_0", "1")
    assert port["hot_hours"] == pytest.approx(rw.HOT_HOURS)
    assert port["first_hot"] == rw.HOT_FROM
    assert port["last_hot"] == rw.HOT_FROM + timedelta(hours=rw.HOT_HOURS)
    assert port["peak_ratio"] == pytest.approx(0.9)
    assert port["hot_direction"] == "transmit"


def test_actions_and_the_gpu_hours_they_freed(report: WeeklyReport) -> None:
    """Executed: a delete that freed 12 GPU-hours and a warning (frees nothing); dry run: a
    stop that would have freed 60; last week's action is not this week's."""
    s = {(r["action"], r["mode"]): r for r in report.tables["actions_summary"].to_dicts()}
    assert set(s) == {("delete", "executed"), ("warn", "executed"), ("stop-notebook", "dry-run")}
    assert s["delete", "executed"]["gpu_hours_freed"] == pytest.approx(12)
    assert s["stop-notebook", "dry-run"]["gpu_hours_freed"] == pytest.approx(60)
    assert s["warn", "executed"]["gpu_hours_freed"] == 0
    assert report.tables["actions"]["id"].to_list() == ["a1", "a2", "a3"]


def test_cost_at_the_sites_price_else_an_estimate_said_to_be_one(
    db: Path, report: WeeklyReport
) -> None:
    """The site's price wins. Without one (issue 24: no money anywhere unless a price was
    configured) the report prices the week at gpuscope's default for the cluster's GPU
    models and says it is an estimate; `estimate_cost: false` shows no money at all."""
    from gpuscope.analytics.report.html import render_html
    from gpuscope.core.gpu_prices import estimated_price

    assert report.metric("idle_cost") == pytest.approx(180 * 2.5)
    assert report.metric("allocated_cost") == pytest.approx(636 * 2.5)
    assert not report.price_is_estimate and "an estimate" not in render_html(report)
    with Store.open(db, read_only=True) as store:
        models = dict(store.cursor().sql(
            "SELECT record->>'gpu_model', sum(TRY_CAST(record->>'allocatable_gpus' AS DOUBLE))"
            " FROM inventory_nodes WHERE valid_to IS NULL GROUP BY ALL").fetchall())  # fmt: skip
    price = estimated_price(models)
    assert price is not None and price > 0
    plain = _report(db)
    assert plain.price_is_estimate and plain.price_per_gpu_hour == pytest.approx(price)
    assert plain.metric("idle_cost") == pytest.approx(180 * price)
    assert "an estimate" in render_html(plain)
    off = _report(db, Settings.model_validate({"report": {"estimate_cost": False}}))
    assert off.metric("idle_cost") is None
    assert not any("cost" in c for df in off.tables.values() for c in df.columns)


def _scrape_raw(store: Store) -> None:
    """Sunday 20:00-22:00 of W10 at 60 s: one pod on GPU-0, idle (0.01) then busy (0.6)."""
    t0 = datetime(2025, 3, 9, 20, 0)
    for k in range(121):
        t = t0 + timedelta(minutes=k)
        g = {"node": "n1", "gpu": "0", "uuid": "GPU-0", "mig_instance": ""}
        names, labels, values = ["gpuscope_gpu_utilization_ratio"], [tuple(sorted(g.items()))], []
        values.append(0.01 if k < 60 else 0.6)
        if k < 120:
            info = g | {"namespace": "ml", "pod": "p", "container": "main", "project": "ml"}
            names.append(rw.INFO)
            labels.append(tuple(sorted(info.items())))
            values.append(1.0)
        ms = int(t.replace(tzinfo=UTC).timestamp() * 1000)
        store.append_cycle([(Batch("n1", ms, names, labels, values, {}), 0.01)])


def test_raw_samples_and_their_rollups_give_the_same_report(tmp_path: Path) -> None:
    """Before the hourly roll-up the report reads raw samples, after it the 5-minute
    roll-ups: the same figures (2 GPU-hours held, 1 idle, 0.6 used)."""
    path = tmp_path / "raw.duckdb"
    with Store.open(path) as store:
        _scrape_raw(store)
        before = build_report(store.cursor(), W10, Settings(), now=rw.NOW)
        store.apply_retention(rw.NOW)
        rolled = store.cursor().execute("SELECT count(*) FROM samples_5m").fetchone()
        after = build_report(store.cursor(), W10, Settings(), now=rw.NOW)
    assert rolled is not None and rolled[0] > 0
    for name in ("allocated_gpu_hours", "idle_gpu_hours", "used_gpu_hours"):
        assert before.metric(name) == pytest.approx(after.metric(name))
    assert after.metric("allocated_gpu_hours") == pytest.approx(2.0)
    assert after.metric("idle_gpu_hours") == pytest.approx(1.0)
    assert after.metric("used_gpu_hours") == pytest.approx(0.01 + 0.6)
    assert after.metric("no_data_gpu_hours") == 0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "report", "weekly", *args],
        capture_output=True, text=True, timeout=120, env=ENV,
    )  # fmt: skip


def test_cli_writes_a_self_contained_page_a_summary_and_every_table(
    db: Path, tmp_path: Path
) -> None:
    """HTML with inline charts and nothing fetched from a network; CSV and Parquet of each
    table, equal; the summary on stdout names the page."""
    config = tmp_path / "gpuscope.yaml"
    config.write_text("report: {price_per_gpu_hour: 2.5, dashboard_url: 'https://g/d/1'}\n")
    res = _cli("--db", str(db), "--out", str(tmp_path / "out"), "--week", "2025-W10",
               "--config", str(config))  # fmt: skip
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "out" / "2025-W10"
    assert f"Report: {folder / 'report.html'}" in res.stdout
    assert res.stdout == (folder / "summary.md").read_text()
    html = (folder / "report.html").read_text()
    assert len(re.findall(r'<img src="data:image/png;base64,', html)) >= 6
    links = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert all(u.startswith("data:") or u == "https://g/d/1" for u in links), links
    assert "<script" not in html and "<link" not in html
    assert "No utilization data from 2025-03-06 00:00" in html
    for name in TABLES:
        csv = pl.read_csv(folder / "tables" / f"{name}.csv")
        parquet = pl.read_parquet(folder / "tables" / f"{name}.parquet")
        assert csv.height == parquet.height and csv.columns == parquet.columns, name


def test_cli_json_names_the_week_the_files_and_the_numbers(db: Path, tmp_path: Path) -> None:
    """`report weekly --json`: one JSON object on stdout, for scripts, naming the files it
    wrote and the cluster numbers the page shows."""
    res = _cli("--db", str(db), "--out", str(tmp_path / "out"), "--week", "2025-W10", "--json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    folder = tmp_path / "out" / "2025-W10"
    assert got["week"] == "2025-W10" and got["html"] == str(folder / "report.html")
    assert str(folder / "summary.md") in got["files"]
    assert got["summary"] == (folder / "summary.md").read_text()
    assert got["cluster"]["allocated_gpu_hours"]["this_week"] > 0


def test_tiles_read_as_words_with_or_without_a_previous_week(report: WeeklyReport) -> None:
    """Issue 24: the tiles read "GPU-hours allocated (—)" when the previous week had no data;
    now the change is said in words when there is one, and left out when there is none."""
    from gpuscope.analytics.report.html import render_html

    with_change = render_html(report)
    assert "on the previous week)</span>" in with_change and "(—)" not in with_change
    cluster = report.tables["cluster"].with_columns(
        pl.lit(None).alias("previous_week"), pl.lit(None).alias("change")
    )
    first = render_html(replace(report, tables={**report.tables, "cluster": cluster}))
    assert "<span>GPU-hours allocated</span>" in first and "<span>efficiency</span>" in first
    assert "(—)" not in first


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--week", "2025-W60"], "not an ISO week"),
        (["--week", "next"], "expected YYYY-Www"),
        (["--week", "2999-W01"], "not over"),
    ],
)
def test_cli_bad_input_is_one_line(db: Path, tmp_path: Path, args: list[str],
                                   message: str) -> None:  # fmt: skip
    res = _cli("--db", str(db), "--out", str(tmp_path), *args)
    assert res.returncode == 2
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_cli_missing_database(tmp_path: Path) -> None:
    res = _cli("--db", str(tmp_path / "nope.duckdb"), "--out", str(tmp_path / "o"))
    assert res.returncode != 0
    assert "does not exist" in res.stderr and "Traceback" not in res.stderr


@pytest.fixture
def service(db: Path, tmp_path: Path) -> Iterator[CollectorService]:
    copy = tmp_path / "live.duckdb"
    copy.write_bytes(db.read_bytes())
    settings = load_settings(env={}, overrides={
        "collector": {"db": copy, "kubernetes": "none"},
        "report": {"out_dir": tmp_path / "reports"},
    })  # fmt: skip
    svc = CollectorService(settings, clock=rw.NOW.timestamp)
    try:
        yield svc
    finally:
        svc.stop()


def test_scheduled_job_writes_last_week_and_delivers_it(service: CollectorService) -> None:
    """On Monday 07:00 the job reports the week just ended and hands the summary and the
    page to the delivery callback (the chat notifier at assembly)."""
    delivered: list[tuple[str, Path]] = []
    result = report_job(service, lambda summary, html: delivered.append((summary, html)))
    assert result.report.week == W10
    [(summary, html)] = delivered
    assert html == service.settings.report.out_dir / "2025-W10" / "report.html"
    assert html.is_file()
    assert "**GPU utilization, week 2025-W10**" in summary


def test_written_report_replaces_the_previous_one_whole(db: Path, tmp_path: Path) -> None:
    """A second run swaps its folder in; no staging folder is left behind."""
    with Store.open(db, read_only=True) as store:
        for _ in range(2):
            weekly_report(store.cursor(), Settings(), now=rw.NOW, out_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2025-W10"]


def test_assembled_delivery_sends_the_summary_through_the_alerts_routes(
    db: Path, tmp_path: Path
) -> None:
    """gpuscope/service.py wires the report's delivery to the alerts routes: a route on
    kind="weekly_report" gets the summary and where the page is, in one message."""
    from gpuscope.service import AlertsNotices
    from tests.integration.alert_receivers import receiver

    with receiver() as chat:
        alerts_file = tmp_path / "alerts.yaml"
        alerts_file.write_text(
            "route: {receiver: ops, routes: [{matchers: ['kind=\"weekly_report\"'], receiver: chat}]}\n"
            "receivers:\n"
            "  - {name: ops, type: webhook, url: http://127.0.0.1:9/never}\n"
            f"  - {{name: chat, type: webhook, url: {chat.url}}}\n"
        )
        copy = tmp_path / "live.duckdb"
        copy.write_bytes(db.read_bytes())
        settings = load_settings(env={}, overrides={
            "collector": {"db": copy, "kubernetes": "none"},
            "report": {"out_dir": tmp_path / "reports", "dashboard_url": "https://grafana.example/d/x"},
            "alerts": {"config_file": alerts_file},
        })  # fmt: skip
        svc = CollectorService(settings, clock=rw.NOW.timestamp)
        try:
            result = report_job(svc, AlertsNotices(svc).deliver_report)
        finally:
            svc.stop()
        [body] = chat.bodies()
    [alert] = body["alerts"]
    text = json.dumps(alert)
    assert "GPU utilization, week 2025-W10" in text
    assert str(result.html) in text and "https://grafana.example/d/x" in text


def test_no_over_quota_before_the_first_quota_row(tmp_path: Path) -> None:
    """Regression (issue 12): "research over guarantee 1.0 h" came from reading the
    guarantees at the start of the hour (00:00), before the first quota row (00:10). The
    pods and quotas appear together at 00:10; research holds 1 GPU of its 16 all week:
    never over, by the quota detector's own definition integrated over the week."""
    from gpuscope.collector.cluster.inventory_records import PodInfo, QuotaInfo

    start = rw.W10 + timedelta(minutes=10)
    nb = PodInfo(namespace="research", name="nb", uid="nb", node="n1", phase="Running",
                 start_time=None, gpu_request=1, project="research")  # fmt: skip
    with Store.open(tmp_path / "q.duckdb") as store:
        store.record_inventory(start, nodes=rw.NODES, pods=[nb],
                               quotas=[QuotaInfo(project="research", guaranteed_gpus=16)])  # fmt: skip
        labels = {"node": "n1", "gpu": "0", "uuid": "GPU-0", "namespace": "research",
                  "pod": "nb", "container": "main", "project": "research"}  # fmt: skip
        for t in (start, rw.W11 - timedelta(minutes=5)):
            batch = Batch("n1", int(t.replace(tzinfo=UTC).timestamp() * 1000), [rw.INFO],
                          [tuple(sorted(labels.items()))], [1.0], {})  # fmt: skip
            store.append_cycle([(batch, 0.01)])
        report = build_report(store.cursor(), W10, Settings(), now=rw.NOW)
    q = rows(report.tables["quotas"], "project")["research"]
    assert q["hours_over_guarantee"] == 0 and q["gpu_hours_over_guarantee"] == 0
    assert q["allocated_gpu_hours"] > 160


def test_no_quota_configured_no_over_guarantee_line(tmp_path: Path) -> None:
    """Regression (issue 21): "Over guarantee: research 134 h" on a cluster with no quota
    at all. No ResourceQuota, queue or configured guarantee exists; research holds 1 GPU
    all week. Nothing promised it anything, so it is over no guarantee, and the summary
    has no such line (a summary line appears only when its subject exists)."""
    from gpuscope.analytics.report.markdown import render_markdown
    from gpuscope.collector.cluster.inventory_records import PodInfo

    start = rw.W10 + timedelta(minutes=10)
    nb = PodInfo(namespace="research", name="nb", uid="nb", node="n1", phase="Running",
                 start_time=None, gpu_request=1, project="research")  # fmt: skip
    with Store.open(tmp_path / "q.duckdb") as store:
        store.record_inventory(start, nodes=rw.NODES, pods=[nb])
        labels = {"node": "n1", "gpu": "0", "uuid": "GPU-0", "namespace": "research",
                  "pod": "nb", "container": "main", "project": "research"}  # fmt: skip
        for t in (start, rw.W11 - timedelta(minutes=5)):
            batch = Batch("n1", int(t.replace(tzinfo=UTC).timestamp() * 1000), [rw.INFO],
                          [tuple(sorted(labels.items()))], [1.0], {})  # fmt: skip
            store.append_cycle([(batch, 0.01)])
        report = build_report(store.cursor(), W10, Settings(), now=rw.NOW)
    q = rows(report.tables["quotas"], "project")["research"]
    assert q["allocated_gpu_hours"] > 160
    assert q["hours_over_guarantee"] == 0 and q["gpu_hours_over_guarantee"] == 0
    assert "Over guarantee" not in render_markdown(report)


@pytest.mark.parametrize("lane", ["allocation", "use"])
def test_an_error_in_either_input_lane_is_raised_once_both_stopped(
    db: Path, lane: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report reads its inputs in two threads (report/inputs.py): a failure in either
    reaches the caller (never a report missing a section), and the use lane's temp table
    is dropped from the caller's connection either way."""
    from gpuscope.analytics.report import inputs

    def broken(*_: object, **__: object) -> object:
        raise RuntimeError(f"{lane} lane broke")

    monkeypatch.setattr(inputs, "week_states" if lane == "allocation" else "hourly_use", broken)
    with Store.open(db, read_only=True) as store:
        cur = store.cursor()
        with pytest.raises(RuntimeError, match=f"{lane} lane broke"):
            build_report(cur, W10, Settings(), now=rw.NOW)
        held = cur.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'report_held'"
        ).fetchone()
        assert held == (0,)

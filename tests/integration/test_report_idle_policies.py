"""The weekly report's idle-policy section: the figures ``gpuscope whatif idle`` gives for
the week, the recommendation in the page and the chat summary, the chart, and the
configured policy (from the policy file) marked and compared."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from gpuscope.analytics.idle_whatif.figures import idle_whatif
from gpuscope.analytics.report.charts import render_charts
from gpuscope.analytics.report.data import build_report
from gpuscope.analytics.report.html import render_html
from gpuscope.analytics.report.markdown import render_markdown
from gpuscope.analytics.report.week import Week
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings, load_settings
from tests.integration.test_whatif_idle import NOTEBOOKS, busy_at, store_history

pytestmark = pytest.mark.integration

NOW = datetime(2025, 3, 20, 12, 0)
WEEK = Week(2025, 10)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report-idle") / "four.duckdb"
    store_history(path, lambda n, ts: 0.6 if busy_at(NOTEBOOKS[n], ts) else 0.01, list(NOTEBOOKS))
    return path


def _settings(tmp_path: Path) -> Settings:
    policies = tmp_path / "policies.yaml"
    policies.write_text(
        "policies:\n"
        "  - {name: idle-notebooks, type: idle, idle_minutes: 30, warning_minutes: 30,"
        " action: stop-notebook}\n"
        "  - {name: day-limit, type: time_limit, max_session_age_hours: 24}\n"
    )
    return load_settings(
        env={},
        overrides={
            "actions": {"policy_file": policies},
            "report": {"price_per_gpu_hour": 2.0},
        },
    )


def test_the_section_has_the_replay_of_the_week(db: Path, tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with Store.open(db, read_only=True) as store:
        report = build_report(store.cursor(), WEEK, settings, now=NOW)
        direct = idle_whatif(store.cursor(), WEEK.start, WEEK.end, settings)
    t = report.tables["idle_policies"]
    idle = t.filter(pl.col("kind") == "idle")
    # the ladder and the configured policy (30 + 30 minutes: stops at 60)
    assert idle.filter(~pl.col("configured"))["minutes"].to_list() == [
        15,
        30,
        60,
        120,
        240,
        480,
        1440,
    ]
    policy = idle.filter(pl.col("configured")).row(0, named=True)
    assert policy["policy"] == "policy idle-notebooks: 30 min idle + 30 min warning"
    sixty = idle.filter((pl.col("minutes") == 60) & ~pl.col("configured")).row(0, named=True)
    for col in ("sessions_stopped", "stopped_then_busy", "gpu_hours_freed"):
        assert policy[col] == sixty[col], col
    # the same figures as the CLI's for the week
    for row, e in zip(idle.filter(~pl.col("configured")).iter_rows(named=True),
                      [e for e in direct["thresholds"] if e["source"] == "ladder"], strict=True):  # fmt: skip
        assert (row["sessions_stopped"], row["gpu_hours_freed"]) == (
            e["sessions_stopped"], e["gpu_hours_freed"]
        )  # fmt: skip
    # the rule's pick: no stopped session comes back (nb-gap's morning pause is exactly
    # 120 minutes, 09:00-11:00: too short for 120, which stops it at 14:00 instead)
    rec = t.filter(pl.col("recommended")).row(0, named=True)
    assert rec["kind"] == "idle" and rec["stopped_then_busy"] == 0
    assert rec["minutes"] == direct["recommendation"]["idle_minutes"]
    assert rec["freed_cost"] == pytest.approx(rec["gpu_hours_freed"] * 2.0, abs=0.01)
    limits = t.filter(pl.col("kind") == "time_limit")
    assert "policy day-limit: 24 h limit + 30 min warning" in limits["policy"].to_list()
    assert "Against policy idle-notebooks" in report.idle_policy_text
    assert "Rule: the idle threshold that frees the most GPU-hours" in report.idle_policy_text
    assert f"- Idle policy: {report.idle_policy_text}" in render_markdown(report)
    assert "idle_policies" in render_charts(report)
    html = render_html(report)
    section = html[html.index('id="idle_policies"') :]
    section = section[: section.index("</section>")]
    assert re.search(r'<img src="data:image/png;base64,', section)
    assert report.idle_policy_text.split(":")[0] in section


def test_a_week_without_sessions_says_so(db: Path) -> None:
    with Store.open(db, read_only=True) as store:
        report = build_report(store.cursor(), Week(2025, 11), Settings(), now=NOW)
    assert "No interactive sessions held GPUs this week" in report.idle_policy_text
    assert "idle_policies" not in render_charts(report)

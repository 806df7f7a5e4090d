"""Every metric name the agent and the collector export passes ``promtool check metrics``.

The pages are built as users see them: the agent's exposition with a real InfiniBand sysfs
tree (hardware counters included), and the collector's ``/metrics`` after scraping simulated
agents and running every detector, so every analytics gauge a summary gives is on the page.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dashboards.stack import collector_service, start_agents
from gpuscope.alerts.metrics import AlertMetrics
from gpuscope.service import analytics_job
from gpuscope.sim import SimulatedCluster, default_scenario
from tests.paths import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")


def promtool_problems(page: str) -> list[str]:
    """promtool's complaints about a page, one per line (none: the names are clean)."""
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=page, capture_output=True, text=True, timeout=60
    )
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


@pytest.fixture(scope="module")
def collector_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The collector's page after six scrapes of an 8-node simulated cluster (on a clock
    that steps 5 s per scrape, nothing waits) and one run of every detector."""
    now = [1_795_000_000.0]
    cluster = SimulatedCluster(default_scenario(nodes=8))
    with ExitStack() as stack:
        agents = start_agents(cluster, stack, lambda: now[0])
        service = collector_service(
            tmp_path_factory.mktemp("names"), cluster, agents, clock=lambda: now[0]
        )
        stack.callback(service.stop)
        for _ in range(6):
            now[0] += 5.0
            service.scrape_cycle()
        analytics_job(service)
        alerts = AlertMetrics(service.metrics.registry)  # what the alerts engine adds
        alerts.alerts.labels("IdleGpuSession", "firing").set(0)
        alerts.notifications.labels("team", "ok").inc()
        service.metrics.actions.labels("delete", "would-do", "true").inc()
        yield generate_latest(service.metrics.registry).decode()


def agent_page() -> str:
    sysfs = FIXTURES / "infiniband-procfs" / "sys"
    done = subprocess.run(
        [sys.executable, "-m", "gpuscope.cli.main", "agent", "--gpu-source", "sim",
         "--sysfs-root", str(sysfs), "--once"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout


@needs_promtool
def test_agent_names_are_clean() -> None:
    page = agent_page()
    names = {f.name for f in text_string_to_metric_families(page)}
    assert {"gpuscope_ib_port_data_saturated", "gpuscope_ib_hw_events"} <= names
    assert promtool_problems(page) == []


@needs_promtool
def test_collector_names_are_clean(collector_page: str) -> None:
    names = {s.name for f in text_string_to_metric_families(collector_page) for s in f.samples}
    # the gauges that used to break the conventions are there under their new names
    assert {
        "gpuscope_idle_sessions",
        "gpuscope_idle_wasted_gpu_seconds",
        "gpuscope_quota_window_seconds",
        "gpuscope_quota_total_used_gpu_seconds",
        "gpuscope_fragmentation_mig_instances",
        "gpuscope_actions_total",
    } <= names
    assert promtool_problems(collector_page) == []


def test_a_bad_name_is_caught() -> None:
    """The check can fail: promtool flags a gauge in hours named like a counter."""
    if PROMTOOL is None:
        pytest.skip("promtool is not installed")
    page = "# HELP x_hours_total h\n# TYPE x_hours_total gauge\nx_hours_total 1\n"
    assert len(promtool_problems(page)) == 2

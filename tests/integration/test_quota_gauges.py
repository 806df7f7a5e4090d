"""The quota gauges after the assembled collector's first scheduled runs agree with the
findings of the same run, and say nothing before there is inventory to say it from.

Reproduces a start-up seen with ``gpuscope demo --serve``: the collector's own inventory job
(no Kubernetes API, no projects in the settings) ended the quotas the simulated API server
had recorded, so the first analytics run read every project as guaranteed 0 GPUs: the
gauges said 4 projects over quota while the findings of that run reported none.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dashboards.stack import collector_service
from gpuscope.collector.cluster.inventory import quota_from_clusterqueue
from gpuscope.collector.service import CollectorService
from gpuscope.service import analytics_job
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.kube import quotas_json

pytestmark = pytest.mark.integration
T0 = 1_795_000_000.0


def gauges(service: CollectorService, prefix: str) -> dict[tuple[str, str], float]:
    """``(name, project label or "")`` -> value, for the samples whose name starts so."""
    page = generate_latest(service.metrics.registry).decode()
    return {
        (s.name, s.labels.get("project", "")): s.value
        for fam in text_string_to_metric_families(page)
        for s in fam.samples
        if s.name.startswith(prefix)
    }


@pytest.fixture
def clock() -> list[float]:
    return [T0]


@pytest.fixture
def service(tmp_path: Path, clock: list[float]) -> Iterator[CollectorService]:
    s = collector_service(
        tmp_path, SimulatedCluster(default_scenario(nodes=8)), [], clock=lambda: clock[0]
    )
    yield s
    s.stop()


def test_first_scheduled_runs_keep_the_quotas_and_agree_with_the_findings(
    service: CollectorService, clock: list[float]
) -> None:
    cluster = SimulatedCluster(default_scenario(nodes=8))
    # what the ClusterQueues the simulated API server lists guarantee
    quotas = map(quota_from_clusterqueue, quotas_json(cluster)["items"])
    guarantees = {q.project: float(q.guaranteed_gpus) for q in quotas}
    clock[0] += 30
    service.inventory_cycle()  # the scheduler's first inventory run (no Kubernetes API)
    clock[0] += 30
    result = analytics_job(service)["quota"]  # and its first analytics run

    got = gauges(service, "gpuscope_quota_")
    guaranteed = {p: v for (n, p), v in got.items() if n == "gpuscope_quota_guaranteed_gpus"}
    assert guaranteed == guarantees and all(v > 0 for v in guaranteed.values())
    assert got[("gpuscope_quota_total_guaranteed_gpus", "")] == sum(guaranteed.values())

    # the gauges and the findings come from one computation
    over = {f.subject["project"]: f.evidence for f in result.findings}
    assert over, "the scenario plants a project over its quota while another waits"
    for project, evidence in over.items():
        assert got[("gpuscope_quota_over_quota_gpus", project)] == evidence["over_quota_gpus"]
        assert got[("gpuscope_quota_reclaimable_gpus", project)] == evidence["reclaimable_gpus"]
    reclaim = [v for (n, _), v in got.items() if n == "gpuscope_quota_reclaimable_gpus"]
    assert sum(reclaim) == got[("gpuscope_quota_total_reclaimable_gpus", "")]
    assert got[("gpuscope_quota_projects_over_quota", "")] == sum(
        1 for (n, _), v in got.items() if n == "gpuscope_quota_over_quota_gpus" and v > 0
    )
    page = generate_latest(service.metrics.registry).decode()
    for severity in ("info", "warning", "critical"):  # the plain series, always there
        assert f'gpuscope_findings{{kind="quota_overuse",severity="{severity}"}} 0.0' in page
    assert result.findings
    for f in result.findings:  # each under its project, for routing
        line = (f'gpuscope_findings{{kind="quota_overuse",project="{f.subject["project"]}",'
                f'severity="{f.severity}"}} 1.0')  # fmt: skip
        assert line in page


def test_no_quota_gauge_before_there_is_inventory(tmp_path: Path, clock: list[float]) -> None:
    """A collector with no inventory yet publishes no quota numbers (a 0 would claim that
    nobody is guaranteed or uses anything), only the zero count of quota findings."""
    from gpuscope.core.settings import load_settings

    settings = load_settings(
        env={}, overrides={"collector": {"db": tmp_path / "e.duckdb", "kubernetes": "none"}}
    )
    service = CollectorService(settings, clock=lambda: clock[0])
    try:
        service.inventory_cycle()
        analytics_job(service)
        assert gauges(service, "gpuscope_quota_") == {}
        page = generate_latest(service.metrics.registry).decode()
        assert 'gpuscope_findings{kind="quota_overuse",severity="warning"} 0.0' in page
    finally:
        service.stop()

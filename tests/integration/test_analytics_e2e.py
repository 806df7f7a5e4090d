"""The assembled service end to end: agents -> collector -> detectors -> findings, gauges,
and `gpuscope analyze` on the database afterwards, on the default scenario's story.

The agents and the collector share one injected clock that the test steps by exactly the
scrape interval: samples land on whole seconds one interval apart and hold exactly one
interval of the scenario's traffic, however loaded the machine is. (With the wall clock,
scrapes drifted to 1.2 s apart under load while samples are stored in whole seconds, and
the hot rail's share of time over the threshold fell below the detector's bar.)
"""

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from gpuscope.agent.devices.sim import scenario_clock
from gpuscope.collector.http_api.api import create_app
from gpuscope.collector.service import CollectorService
from gpuscope.core.settings import load_settings
from gpuscope.demo.parts import start_agents
from gpuscope.service import analytics_job
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.kube import namespaces_json, nodes_json, quotas_json
from gpuscope.sim.kube_pods import pods_json
from tests.fakes.kube_api import FakeKubeApi
from tests.integration.helpers import ENV

pytestmark = pytest.mark.integration
NODES = ("gpu-node-08", "gpu-node-10", "gpu-node-30", "gpu-node-31")
INTERVAL = 1.0


class SteppedClock:
    """Unix time that moves only when the test says, starting on a whole second."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now

    def step(self, seconds: float) -> None:
        self.now += seconds


@contextmanager
def sim_agents(cluster: SimulatedCluster, clock: SteppedClock) -> Iterator[list[str]]:
    """What `gpuscope agent --gpu-source sim --node NODE` serves for each of NODES, on the
    test's clock: the agent's own sources, exposition and HTTP server on loopback ports
    (as the demo runs them); yields their URLs."""
    servers = start_agents(cluster, list(NODES), scenario_clock(cluster.scenario, now=clock))
    try:
        yield [url for url, _ in servers]
    finally:
        for _, server in servers:
            server.shutdown()
            server.server_close()
            server.collector.close()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Run the service for 15 scrapes one interval apart on the stepped clock, then the
    analytics job, once."""
    tmp = tmp_path_factory.mktemp("e2e")
    scenario = default_scenario()
    cluster = SimulatedCluster(scenario)
    clock = SteppedClock()
    api = FakeKubeApi().start()
    # the agents play the scenario live_offset (6 h) in; the inventory shows the same moment
    origin = clock() - scenario.live_offset
    api.store.load(
        namespaces_json(cluster),
        nodes_json(cluster, origin=origin),
        pods_json(cluster, scenario.live_offset, origin=origin),
        quotas_json(cluster),
    )
    with ExitStack() as stack:
        urls = stack.enter_context(sim_agents(cluster, clock))
        settings = load_settings(
            env={},
            overrides={
                "collector": {
                    "db": tmp / "e2e.duckdb",
                    "kubernetes": api.url,
                    "targets": [{"url": u} for u in urls],
                },
                "analytics": {
                    "idle_window_minutes": 0.05,
                    "startup_grace_minutes": 0,
                    "ib_hot_window_minutes": 0.2,
                },
            },
        )
        service = CollectorService(settings, clock=clock)
        try:
            service.inventory_cycle()
            service.scrape_cycle()
            for _ in range(14):  # the hot-port window (12 s) must be covered by samples
                clock.step(INTERVAL)
                service.scrape_cycle()
            at = datetime.fromtimestamp(clock(), UTC)
            analytics_job(service)
            client = TestClient(create_app(service.api_state()))
            findings = client.get("/api/v1/findings", params={"limit": 1000}).json()["items"]
            metrics = client.get("/metrics").text
        finally:
            service.stop()
            api.stop()
    config = tmp / "analytics.yaml"
    config.write_text(
        "analytics: {idle_window_minutes: 0.05, startup_grace_minutes: 0, "
        "ib_hot_window_minutes: 0.2}\n"
    )
    return {
        "db": tmp / "e2e.duckdb",
        "findings": findings,
        "metrics": metrics,
        "at": at,
        "config": config,
    }


def kinds(findings: list[dict[str, object]]) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {}
    for f in findings:
        out.setdefault(str(f["kind"]), []).append(f)
    return out


def test_the_planted_story_is_found(finished: dict[str, object]) -> None:
    """The idle notebook, the hot rail, nlp over quota while vision waits, the blocked job."""
    found = kinds(finished["findings"])  # type: ignore[arg-type]
    idle = {(f["subject"]["namespace"], f["subject"]["pod"]) for f in found["idle_session"]}  # type: ignore[index]
    assert ("research", "nb-user01-0") in idle
    assert all(f["recommendation"] for f in found["idle_session"])
    hot = {f["subject"]["node"] for f in found["bandwidth_hotspot"]}  # type: ignore[index]
    assert hot == {"gpu-node-08"}
    over = {f["subject"]["project"] for f in found["quota_overuse"]}  # type: ignore[index]
    assert over == {"nlp"}
    frag = found["node_fragmentation"]
    # the 4-GPU job (the topology story's 8-GPU pods wait too, and are the target)
    assert any(4 in f["evidence"]["pending_blocked_job_gpus"] for f in frag)  # type: ignore[index]


def test_gauges_carry_the_headline_numbers(finished: dict[str, object]) -> None:
    """/metrics counts the findings and publishes the detectors' summaries."""
    metrics = str(finished["metrics"])
    assert 'gpuscope_findings{kind="idle_session",severity=' in metrics
    assert 'gpuscope_quota_used_gpus{project="nlp"}' in metrics
    assert "gpuscope_fragmentation_fgd_fragmentation_ratio" in metrics
    assert 'gpuscope_collector_analytics_seconds{detector="idle"}' in metrics


def test_analyze_all_on_the_database_finds_the_same(finished: dict[str, object]) -> None:
    """`gpuscope analyze all --db` (read-only) reports the same kinds of findings."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscope.cli.main",
            "analyze",
            "all",
            "--db",
            str(finished["db"]),
            "--json",
            "--config",
            str(finished["config"]),
            "--at",
            str(finished["at"].isoformat()),  # type: ignore[attr-defined]
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out["summary"]) == {"idle", "fragmentation", "quota", "bandwidth", "topology"}
    got = {f["kind"] for f in out["findings"]}
    assert {"quota_overuse", "node_fragmentation", "bandwidth_hotspot"} <= got
    # the topology story: the stored inventory's leaf labels, the pending 2 x 8 pod group
    assert "topology_fragmentation" in got
    text = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscope.cli.main",
            "analyze",
            "quota",
            "--db",
            str(finished["db"]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert text.returncode == 0 and "quota_overuse" in text.stdout


def test_consolidation_plans_room_for_the_blocked_job(finished: dict[str, object]) -> None:
    """The plan frees a node for the pending 4-GPU job by evicting preemptible batch pods
    only (never a notebook or an inference pod), naming each move as docs/design.md asks."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscope.cli.main",
            "analyze",
            "consolidation",
            "--db",
            str(finished["db"]),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["unplaceable"] == []
    # the 4-GPU job, and the topology story's pod group of two 8-GPU pods as one goal
    # inside one leaf (it was two goals, one a pod, before pod groups were planned whole)
    assert out["summary"]["goals_met"] == out["summary"]["goals"] == 2, out["summary"]
    (group,) = out["summary"]["pod_groups"]
    assert group["pod_group"] == "kueue-pod-group:nlp/gpt-16" and group["planned"], group
    assert (group["pods"], group["gpus_per_pod"], len(group["nodes"])) == (2, 8, 2)
    assert group["domain"].startswith("leaf-")
    moved = out["moves"] + [m for m in out["evictions"] if isinstance(m, dict)]
    assert moved
    for m in out["moves"]:
        assert {"namespace", "pod", "from_node", "to_node"} <= set(m)
        assert m["namespace"] == "vision" and "vit-sweep" in m["pod"]

"""``gpuscope demo``: the pipeline on a simulated cluster, with nothing but Python.

One agent per simulated node serves on a loopback port; the collector scrapes them over
HTTP into a DuckDB file, with the simulated cluster's Kubernetes inventory recorded
through the same parsers a real API server's objects go through; then every detector
runs. Every number printed comes from the stored data, not from the simulator's own
bookkeeping. The analysis windows are shortened to fit a run of seconds.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.registry import CollectorRegistry

from agent.exposition import AgentCollector
from agent.server import AgentHttpServer
from agent.sim import SimAttributor, SimGpuSource, SimIbSource, scenario_clock
from analytics.runner import as_json, render_text
from collector.inventory_records import node_from_json, pod_from_json, quota_from_clusterqueue
from collector.service import CollectorService, bind_listen
from gpuscope.errors import UserError
from gpuscope.service import add_analytics, analytics_job
from gpuscope.settings import Settings, load_settings
from gpuscope.sim import SimulatedCluster, default_scenario
from gpuscope.sim.kube import nodes_json, pods_json, quotas_json

DB_NAME = "gpuscope.duckdb"
#: Windows that a run of seconds can fill (the defaults are 30 and 5 minutes).
DEMO_ANALYTICS = {
    "idle_window_minutes": 0.1,
    "startup_grace_minutes": 0,
    "ib_hot_window_minutes": 0.3,
    "interval_minutes": 0.5,
}


def start_agents(cluster: SimulatedCluster, nodes: list[str]) -> list[tuple[str, AgentHttpServer]]:
    """One agent per node, each on its own loopback port, sharing one simulated cluster."""
    clock = scenario_clock(cluster.scenario)
    servers = []
    for node in nodes:
        collector = AgentCollector(
            node,
            SimGpuSource(cluster, node, clock),
            SimIbSource(cluster, node, clock),
            SimAttributor(cluster, node, clock),
        )
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        server = AgentHttpServer(("127.0.0.1", 0), registry, collector)
        server.start_in_thread()
        servers.append((f"http://127.0.0.1:{server.server_address[1]}/metrics", server))
    return servers


def record_simulated_inventory(service: CollectorService, cluster: SimulatedCluster) -> None:
    """What a Kubernetes API server would list for this cluster, parsed as the real one is."""
    clock = scenario_clock(cluster.scenario)
    t = clock()
    origin = time.time() - t
    node_objs = nodes_json(cluster, origin=origin)["items"]
    nodes = {n["metadata"]["name"]: node_from_json(n) for n in node_objs}
    pods = [
        pod_from_json(
            p, node=nodes.get(p["spec"].get("nodeName", "")), settings=service.settings.workloads
        )
        for p in pods_json(cluster, t, origin=origin)["items"]
    ]
    quotas = [quota_from_clusterqueue(q) for q in quotas_json(cluster)["items"]]
    service.store.record_inventory(
        datetime.now(UTC), nodes=list(nodes.values()), pods=pods, quotas=quotas
    )


def step(n: int, text: str) -> None:
    """The progress display: where the demo is, on stderr."""
    print(f"[{n}/5] {text}", file=sys.stderr, flush=True)


def _settings(db: Path, urls: list[str], listen: str) -> Settings:
    return load_settings(
        env={},
        overrides={
            "collector": {
                "db": db,
                "targets": [{"url": u} for u in urls],
                "kubernetes": "none",
                "scrape_interval_seconds": 1.0,
                "listen": listen,
            },
            "analytics": DEMO_ANALYTICS,
        },
    )


def run_demo(
    out: Path | None = None, nodes: int = 32, serve: bool = False, seconds: float = 25.0
) -> int:
    if nodes < 6:
        raise UserError("--nodes must be at least 6")
    out = out or Path(tempfile.mkdtemp(prefix="gpuscope-demo-"))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: {exc.strerror}") from None
    db = out / DB_NAME
    if db.exists():
        raise UserError(f"{db} exists already; give another --out (nothing was changed)")
    cluster = SimulatedCluster(default_scenario(nodes=nodes))
    step(1, f"starting {nodes} simulated agents (8 GPUs, 8 InfiniBand rails each) on loopback")
    servers = start_agents(cluster, cluster.node_names)
    service: CollectorService | None = None
    try:
        settings = _settings(db, [u for u, _ in servers], "127.0.0.1:8080")
        service = CollectorService(settings)
        step(2, f"collector on {db}; recording the simulated Kubernetes inventory")
        record_simulated_inventory(service, cluster)
        step(3, f"scraping every agent once a second for {seconds:g} s")
        deadline = time.time() + seconds
        samples = 0
        while time.time() < deadline:
            # cycles start on whole seconds: the store keeps whole-second timestamps, so
            # the intervals between samples (and the rates made of them) are then exact
            time.sleep(1.0 - time.time() % 1.0)
            samples += service.scrape_cycle()
        step(4, f"{samples:,} samples stored; running every detector")
        at = datetime.now(UTC)
        analyses = analytics_job(service)
        step(5, "writing the findings")
        (out / "findings.json").write_text(json.dumps(as_json(analyses), indent=2, default=str))
        print(render_text(analyses), end="")
        actions = plan_demo_actions(service, out, at)
        print(f"\ndatabase: {db}\nfindings: {out / 'findings.json'}\nactions (dry run): {actions}")
        config = out / "demo-settings.yaml"  # its short windows, so the hint reproduces it
        config.write_text(yaml.safe_dump({"analytics": DEMO_ANALYTICS}, sort_keys=False))
        print(
            f"again, from the database: gpuscope analyze all --db {db} --config {config} "
            f"--at {at.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        )
        if serve:
            _serve(service)
    except KeyboardInterrupt:
        pass
    finally:
        if service is not None:
            service.stop()
        for _, server in servers:
            server.shutdown()
            server.server_close()
    return 0


DEMO_POLICIES: dict[str, Any] = {
    "policies": [
        {"name": "idle-notebooks", "type": "idle", "warning_minutes": 0,
         "action": "stop-notebook"},
        {"name": "pack", "type": "consolidation", "max_evictions_per_run": 8},
    ]
}  # fmt: skip


def plan_demo_actions(service: CollectorService, out: Path, at: datetime) -> Path:
    """The policies as a dry run with no cluster to talk to: the warnings, then (the warning
    period being 0 here) the actions that would follow, and the consolidation steps; the
    audit log is in the database, and ``actions.json`` beside it."""
    from actions.policy import parse_policies
    from actions.runner import run_policies

    (out / "demo-policies.yaml").write_text(yaml.safe_dump(DEMO_POLICIES, sort_keys=False))
    policies = parse_policies(DEMO_POLICIES)
    runs = [
        run_policies(service.store, policies, service.settings, client=None, execute=False, at=t)
        for t in (at, at + timedelta(seconds=1))
    ]
    path = out / "actions.json"
    path.write_text(json.dumps([r.as_json() for r in runs], indent=2, default=str))
    by_kind: dict[str, list[str]] = {}
    for rec in (r for run in runs for r in run.records):
        target = f"{rec.namespace}/{rec.pod}" if rec.pod else f"node {rec.node}"
        by_kind.setdefault(f"{rec.kind} [{rec.policy}]", []).append(target)
    print("\nactions, dry run (policies in demo-policies.yaml):")
    for kind, targets in by_kind.items():
        more = f", ... ({len(targets)} in all)" if len(targets) > 3 else ""
        print(f"  would {kind}: {', '.join(targets[:3])}{more}")
    return path


def _serve(service: CollectorService) -> None:
    """Keep scraping and analysing, with the API and /metrics up, until Ctrl-C."""
    import uvicorn

    from collector.api import create_app

    sock = bind_listen("127.0.0.1", 8080, "127.0.0.1:8080")
    add_analytics(service)
    service.start_jobs()
    server = uvicorn.Server(
        uvicorn.Config(create_app(service.api_state()), log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    print("serving: http://127.0.0.1:8080/api/v1/status and /metrics (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    finally:
        server.should_exit = True
        thread.join(timeout=10)

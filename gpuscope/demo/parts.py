"""The demo's parts around the real pipeline: simulated agents on loopback, the simulated
cluster's Kubernetes inventory, a local sink for alerts, and the dry-run action plan.

Everything here either stands in for what cannot run without a cluster (agents on GPU
nodes, an API server, Slack) at the same boundary the real parts use, or drives the real
components (the alerts engine, the actions runner) with demo settings.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import weakref
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from gpuscope.agent.devices.sim import SimAttributor, SimGpuSource, SimIbSource
from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.agent.serving.server import AgentHttpServer
from gpuscope.collector.cluster.dra_apply import apply_object_set
from gpuscope.collector.cluster.inventory_records import (
    node_from_json,
    pod_from_json,
)
from gpuscope.collector.cluster.queue_records import quota_from_clusterqueue
from gpuscope.collector.service import CollectorService
from gpuscope.core.kube_objects import objects_from_documents
from gpuscope.sim import SimulatedCluster
from gpuscope.sim.cluster import SimPod
from gpuscope.sim.dra import dra_json, is_dra_pod
from gpuscope.sim.kube import nodes_json, quotas_json
from gpuscope.sim.kube_pods import pod_json

Clock = Callable[[], float]

DEMO_POLICIES: dict[str, Any] = {
    "policies": [
        {"name": "idle-notebooks", "type": "idle", "warning_minutes": 0,
         "action": "stop-notebook"},
        {"name": "pack", "type": "consolidation", "max_evictions_per_run": 8},
    ]
}  # fmt: skip


def start_agents(
    cluster: SimulatedCluster, nodes: list[str], sim_clock: Clock
) -> list[tuple[str, AgentHttpServer]]:
    """One agent per node, each on its own loopback port, sharing one simulated cluster."""
    servers = []
    for node in nodes:
        collector = AgentCollector(
            node,
            SimGpuSource(cluster, node, sim_clock),
            SimIbSource(cluster, node, sim_clock),
            SimAttributor(cluster, node, sim_clock),
        )
        # the page `gpuscope agent` serves; no process_* series: 32 agents share a process
        server = AgentHttpServer(("127.0.0.1", 0), None, collector, process_metrics=False)
        server.start_in_thread()
        servers.append((f"http://127.0.0.1:{server.server_address[1]}/metrics", server))
    return servers


def stop_agents(servers: list[AgentHttpServer]) -> None:
    """Stop every agent at once: each ``shutdown`` waits for its serving loop's next poll
    (half a second), which one after another made 32 agents take 8 s to stop."""
    stoppers = [threading.Thread(target=s.shutdown, daemon=True) for s in servers]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join()
    for s in servers:
        s.server_close()


def record_simulated_inventory(
    service: CollectorService,
    cluster: SimulatedCluster,
    at: float,
    origin: float,
    *,
    pods_only: bool = False,
) -> None:
    """What a Kubernetes API server would list for this cluster at ``at`` (Unix time),
    parsed as the real one is; ``origin`` is the scenario's origin in Unix time.
    ``pods_only`` leaves the nodes and quotas as last recorded (they do not change).

    The demo's history lists a steady-state cluster every 30 minutes of a week, so what
    does not change between listings is computed once (:class:`_Listing`): a pod's parsed
    record per state (Pending, Running), the DRA pool's nodes and pods per state of its
    pods, and a listing the same as the last recorded one is not sent again (recording it
    would change nothing: the store keeps versions). The DRA pool's nodes and pods
    (gpuscope/sim/dra.py) are folded in through its ResourceSlices and claims, as the
    collector's inventory does (gpuscope/collector/cluster/dra_apply.py)."""
    memo = _LISTINGS.get(cluster)
    if memo is None:
        memo = _LISTINGS[cluster] = _Listing(cluster, origin, service.settings.workloads)
    t = at - origin
    listed = memo.listed(t)
    state = tuple((pod.key, pod.node is not None and t >= pod.start) for pod in listed)
    if pods_only and state == memo.last.get(id(service.store)):
        return
    pods: list[dict[str, Any]] = []
    dra: list[SimPod] = []
    for pod, (_, running) in zip(listed, state, strict=True):
        if memo.dra_enabled and is_dra_pod(cluster, pod):  # its GPUs come through its claim
            dra.append(pod)
        else:
            pods.append(memo.record(pod, running, t))
    node_list = list(memo.nodes.values())
    if memo.dra_enabled:
        node_list, dra_records = memo.dra(dra, t)
        pods += dra_records
    quotas = None
    if not pods_only:
        quotas = [quota_from_clusterqueue(q) for q in quotas_json(cluster)["items"]]
    service.store.record_inventory(
        datetime.fromtimestamp(at, UTC),
        nodes=None if pods_only else node_list,
        pods=pods,
        quotas=quotas,
    )
    memo.last[id(service.store)] = state


class _Listing:
    """One simulated cluster's inventory as parsed records, kept between listings."""

    def __init__(self, cluster: SimulatedCluster, origin: float, settings: Any) -> None:
        self.cluster, self.origin, self.settings = cluster, origin, settings
        node_objs = nodes_json(cluster, origin=origin)["items"]
        self.nodes = {n["metadata"]["name"]: node_from_json(n) for n in node_objs}
        self.dra_enabled = any(n.dra for n in cluster.scenario.nodes)
        # when each pod is listed, [arrival, end), in placement order (the API's order)
        self.spans = [
            (p.start if p.workload.arrival is None else p.workload.arrival,
             math.inf if p.end is None else p.end, p)
            for p in cluster.pods
        ]  # fmt: skip
        self.records: dict[tuple[str, bool], dict[str, Any]] = {}
        self.dra_states: dict[tuple[Any, ...], tuple[list[Any], list[dict[str, Any]]]] = {}
        #: the pods (key, running) of the last listing recorded, per store (by id)
        self.last: dict[int, tuple[tuple[int, bool], ...]] = {}

    def listed(self, t: float) -> list[SimPod]:
        is_listed = self.cluster.is_listed  # an action's removal, on the few in their span
        return [p for s, e, p in self.spans if s <= t < e and is_listed(p, t)]

    def _parse(self, pod: SimPod, t: float) -> tuple[dict[str, Any], Any]:
        obj = pod_json(self.cluster, pod, origin=self.origin, t=t)
        node = self.nodes.get(obj["spec"].get("nodeName", ""))
        return obj, pod_from_json(obj, node=node, settings=self.settings)

    def record(self, pod: SimPod, running: bool, t: float) -> dict[str, Any]:
        """The pod's parsed record in this state (the same at any time in it)."""
        key = (pod.uid, running)
        got = self.records.get(key)
        if got is None:
            got = self.records[key] = dataclasses.asdict(self._parse(pod, t)[1])
        return got

    def dra(self, pods: list[SimPod], t: float) -> tuple[list[Any], list[dict[str, Any]]]:
        """The nodes and the DRA pods' records with the pool's claims folded in, for this
        state of the DRA pods (their claims change only when they start or end)."""
        key = tuple((p.uid, self.cluster.is_alive(p, t)) for p in pods)
        got = self.dra_states.get(key)
        if got is None:
            objects = objects_from_documents([("sim", dra_json(self.cluster, t))])
            parsed = [self._parse(p, t) for p in pods]
            applied = apply_object_set(
                list(self.nodes.values()), [r for _, r in parsed], [o for o, _ in parsed], objects
            )
            got = (list(applied.nodes), [dataclasses.asdict(p) for p in applied.pods])
            self.dra_states[key] = got
        return got


#: Per simulated cluster, its listings' memo (record_simulated_inventory).
_LISTINGS: weakref.WeakKeyDictionary[SimulatedCluster, _Listing] = weakref.WeakKeyDictionary()


class AlertSink:
    """A local webhook receiver standing in for Slack/PagerDuty: every notification it gets
    is appended to a JSON-lines log (``alerts.log``)."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.received = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with sink.log.open("a", encoding="utf-8") as f:
                    f.write(body.decode("utf-8", "replace").replace("\n", " ") + "\n")
                sink.received += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/alerts"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def demo_alerts_config(sink_url: str, out: Path) -> Path:
    """An alerts config routing everything to the local sink; the shipped rules with their
    ``for`` durations cut to 0, as the analysis windows are cut to fit the demo's minutes."""
    shipped = yaml.safe_load(
        files("gpuscope.alerts").joinpath("default_rules.yaml").read_text("utf-8")
    )
    rules = [{**r, "for": "0s"} for r in shipped["rules"] if r.get("type") == "finding"]
    config = {
        "route": {"receiver": "local-sink", "group_by": ["alertname", "namespace"]},
        "receivers": [{"name": "local-sink", "type": "webhook", "url": sink_url}],
        "rules": rules,
    }
    path = out / "demo-alerts.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_demo_alerts(service: CollectorService, config_path: Path, now: datetime) -> Any:
    """One run of the real alerts engine over the stored findings, delivering to the sink."""
    from gpuscope.alerts.config import load_alerts_config
    from gpuscope.alerts.engine import AlertsEngine

    engine = AlertsEngine(
        service.store, load_alerts_config(config_path), clock=service.clock, env={}
    )
    try:
        return engine.run(now.replace(tzinfo=None))
    finally:
        engine.close()


def plan_demo_actions(service: CollectorService, out: Path, at: datetime) -> list[Any]:
    """The policies as a dry run with no cluster to talk to: the warnings, then (the warning
    period being 0 here) the actions that would follow, and the consolidation steps. The
    audit log is in the database, and ``actions.json`` beside it."""
    from gpuscope.actions.policy import parse_policies
    from gpuscope.actions.runner import run_policies

    (out / "demo-policies.yaml").write_text(yaml.safe_dump(DEMO_POLICIES, sort_keys=False))
    policies = parse_policies(DEMO_POLICIES)
    # the second run shows the idle walk's next step; a dry run keeps no consolidation
    # state, so consolidation would only repeat its plan there
    idle_only = [p for p in policies if p.type != "consolidation"]
    runs = [
        run_policies(service.store, ps, service.settings, client=None, execute=False, at=t)
        for t, ps in ((at, policies), (at + timedelta(seconds=1), idle_only))
    ]
    (out / "actions.json").write_text(
        json.dumps([r.as_json() for r in runs], indent=2, default=str)
    )
    return [r for run in runs for r in run.records]

"""``gpuscope demo``: the simulated cluster's agents on loopback, scraped over HTTP.

Every number printed comes from what the agents exported and the demo scraped, never from
the simulator's own bookkeeping. Later components (collector, analytics, alerts, report)
join this pipeline as they land.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from agent.exposition import AgentCollector
from agent.server import AgentHttpServer
from agent.sim import SimAttributor, SimGpuSource, SimIbSource, scenario_clock
from gpuscope.errors import UserError
from gpuscope.sim import SimulatedCluster, default_scenario

#: A GPU held by a session below this utilization counts as idle in the summary.
IDLE_BELOW = 0.05


@dataclass
class Scrape:
    """What one scrape of one agent said, keyed by series."""

    node: str
    at: float = 0.0
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(lbl), v) for (n, lbl), v in self.values.items() if n == name]


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


def scrape(client: httpx.Client, url: str, node: str) -> tuple[Scrape, str]:
    text = client.get(url).raise_for_status().text
    result = Scrape(node, time.monotonic())
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            result.values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return result, text


def summarize(first: list[Scrape], second: list[Scrape]) -> list[str]:
    gpus = util_sum = 0.0
    held: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    util_by_uuid: dict[str, float] = {}
    shared: dict[str, int] = defaultdict(int)
    for s in second:
        for lbl, v in s.series("gpuscope_gpu_utilization_ratio"):
            gpus += 1
            util_sum += v
            util_by_uuid[lbl["uuid"]] = v
        for lbl, _ in s.series("gpuscope_gpu_workload_info"):
            held[(lbl["namespace"], lbl["pod"], lbl["interactive"])].append(lbl["uuid"])
            shared[lbl["uuid"]] += 1
    idle = [
        f"{ns}/{pod}"
        for (ns, pod, interactive), uuids in held.items()
        if interactive == "true" and all(util_by_uuid.get(u, 1) < IDLE_BELOW for u in uuids)
    ]
    hot = []
    for a, b in zip(first, second, strict=True):
        seconds = b.at - a.at
        before = {tuple(lbl.items()): v for lbl, v in a.series("gpuscope_ib_transmit_bytes_total")}
        rates = {
            tuple(lbl.items()): v for lbl, v in b.series("gpuscope_ib_port_rate_bytes_per_second")
        }
        for lbl, v in b.series("gpuscope_ib_transmit_bytes_total"):
            key = tuple(lbl.items())
            if key in before and key in rates and rates[key] > 0:
                share = (v - before[key]) / seconds / rates[key]
                if share > 0.9:
                    hot.append(f"{lbl['node']}/{lbl['device']} at {share:.0%} of link rate")
    return [
        f"GPUs reporting: {int(gpus)}, mean utilization {util_sum / max(gpus, 1):.0%}",
        f"pods holding GPUs: {len(held)}; GPUs shared by several pods: "
        f"{sum(1 for n in shared.values() if n > 1)}",
        f"idle interactive sessions (every GPU under {IDLE_BELOW:.0%} now): {len(idle)}",
        *[f"  {name}" for name in sorted(idle)[:10]],
        f"InfiniBand ports above 90 % of link rate: {len(hot)}",
        *[f"  {h}" for h in hot[:10]],
    ]


def run_demo(out: Path | None = None, nodes: int = 32, serve: bool = False) -> int:
    if nodes < 6:
        raise UserError("--nodes must be at least 6")
    out = out or Path(tempfile.mkdtemp(prefix="gpuscope-demo-"))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: {exc.strerror}") from None
    cluster = SimulatedCluster(default_scenario(nodes=nodes))
    names = cluster.node_names
    print(f"[1/3] starting {len(names)} simulated agents on loopback", file=sys.stderr)
    servers = start_agents(cluster, names)
    try:
        print("[2/3] scraping every agent twice over HTTP", file=sys.stderr)
        with httpx.Client(timeout=10) as client:
            first = [scrape(client, url, n)[0] for n, (url, _) in zip(names, servers, strict=True)]
            time.sleep(1.0)
            pairs = [scrape(client, url, n) for n, (url, _) in zip(names, servers, strict=True)]
        second = [p[0] for p in pairs]
        for node, (_, text) in zip(names, pairs, strict=True):
            (out / f"agent-{node}.prom").write_text(text)
        print("[3/3] summarizing what the agents exported", file=sys.stderr)
        for line in summarize(first, second):
            print(line)
        print(f"expositions written to {out}")
        if serve:
            print("agents serving (Ctrl-C to stop):")
            for node, (url, _) in zip(names, servers, strict=True):
                print(f"  {node}: {url}")
            threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        for _, server in servers:
            server.shutdown()
            server.server_close()
    return 0

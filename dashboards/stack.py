"""A simulated gpuscope behind a real Prometheus, for the dashboards' test and picture.

Simulated agents (one per node of the default scenario, real HTTP servers on loopback), a
collector recording the same cluster's inventory, scraping them and running every
detector, with its ``/metrics`` served on loopback, and a real Prometheus (the Debian
package's binary) scraping the agents and the collector with a ``cluster`` target label
and the collector's pool-bearing ``gpuscope_node_info``: everything the dashboards' queries
read, through the same path as in a cluster.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import CollectorRegistry

from gpuscope.agent.devices.sim import scenario_clock
from gpuscope.collector.service import CollectorService
from gpuscope.core.errors import UserError
from gpuscope.core.settings import load_settings
from gpuscope.demo.parts import record_simulated_inventory
from gpuscope.demo.parts import start_agents as demo_agents
from gpuscope.demo.run import DEMO_ANALYTICS
from gpuscope.service import analytics_job
from gpuscope.sim import SimulatedCluster, default_scenario

CLUSTER = "sim"
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Stack:
    prometheus: str
    agents: tuple[str, ...]
    collector: str
    service: CollectorService


def start_agents(cluster: SimulatedCluster, stack: ExitStack, clock: Clock) -> list[str]:
    """The demo's agents (one HTTP server per simulated node, on the scenario's timeline of
    ``clock``), stopped when ``stack`` closes."""
    urls = []
    for url, server in demo_agents(
        cluster, cluster.node_names, scenario_clock(cluster.scenario, now=clock)
    ):
        stack.callback(server.server_close)
        stack.callback(server.shutdown)
        urls.append(url)
    return urls


def collector_service(
    tmp: Path, cluster: SimulatedCluster, agents: list[str], clock: Clock = time.time
) -> CollectorService:
    """A collector on ``tmp`` with the cluster's inventory recorded and the demo's short
    analysis windows; nothing scheduled (the caller drives scrapes and analyses)."""
    settings = load_settings(
        env={},
        overrides={
            "collector": {
                "db": tmp / "gpuscope.duckdb",
                "targets": [{"url": u} for u in agents],
                "kubernetes": "none",
                "scrape_interval_seconds": 5.0,  # scraped every second; idle allows 3 intervals
            },
            "analytics": DEMO_ANALYTICS,
        },
    )
    service = CollectorService(settings, clock=clock)
    now = clock()
    origin = now - scenario_clock(cluster.scenario, now=clock)()
    record_simulated_inventory(service, cluster, now, origin)
    return service


def _serve_metrics(registry: CollectorRegistry, stack: ExitStack) -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), MetricsHandler.factory(registry))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stack.callback(server.server_close)
    stack.callback(server.shutdown)
    return f"http://127.0.0.1:{server.server_address[1]}/metrics"


def prometheus_config(jobs: dict[str, list[str]], interval_s: float) -> str:
    """A scrape config: one job per entry, every target labelled ``cluster``."""
    lines = [
        f"global: {{scrape_interval: {interval_s:g}s, evaluation_interval: {interval_s:g}s}}",
        "scrape_configs:",
    ]
    for job, urls in jobs.items():
        targets = ", ".join(f"'{httpx.URL(u).host}:{httpx.URL(u).port}'" for u in urls)
        lines += [
            f"  - job_name: {job}",
            f"    metrics_path: {httpx.URL(urls[0]).path}",
            f"    static_configs: [{{targets: [{targets}], labels: {{cluster: {CLUSTER}}}}}]",
        ]
    return "\n".join(lines) + "\n"


def start_prometheus(
    binary: str, root: Path, config: str, port: int, stack: ExitStack, timeout: float = 30
) -> str:
    (root / "prometheus.yml").write_text(config, encoding="utf-8")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stack.callback(proc.wait, timeout=20)
    stack.callback(proc.terminate)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(base + "/-/ready", timeout=2).status_code == 200:
                return base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise UserError(f"prometheus exited: {proc.communicate()[1].strip()[-300:]}")
        if time.monotonic() > deadline:
            raise UserError(f"prometheus not ready on {base} after {timeout:g} s")
        time.sleep(0.2)


def _drive(service: CollectorService, stop: threading.Event, analyse_every: float) -> None:
    """Scrape every second on the second; run every detector every ``analyse_every`` s."""
    last = time.monotonic()
    while not stop.wait(1.0 - time.time() % 1.0):
        service.scrape_cycle()
        if time.monotonic() - last >= analyse_every:
            analytics_job(service)
            last = time.monotonic()


@contextmanager
def simulated_stack(
    tmp: Path, *, port: int, nodes: int = 8, warmup_s: float = 8.0, analyse_every: float = 5.0
) -> Iterator[Stack]:
    """The whole simulated stack under a real Prometheus on ``port``; the collector keeps
    scraping and analysing until the block ends. Needs the ``prometheus`` binary."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise UserError("prometheus is not installed (scripts/install-test-servers prometheus)")
    cluster = SimulatedCluster(default_scenario(nodes=nodes))
    with ExitStack() as stack:
        agents = start_agents(cluster, stack, time.time)
        service = collector_service(tmp, cluster, agents)
        stack.callback(service.stop)
        for _ in range(int(warmup_s)):  # the detectors' windows fill before the first run
            time.sleep(1.0 - time.time() % 1.0)
            service.scrape_cycle()
        analytics_job(service)
        collector = _serve_metrics(service.metrics.registry, stack)
        stop = threading.Event()
        driver = threading.Thread(target=_drive, args=(service, stop, analyse_every), daemon=True)
        driver.start()
        stack.callback(driver.join, timeout=30)
        stack.callback(stop.set)
        config = prometheus_config(
            {"gpuscope-agent": agents, "gpuscope-collector": [collector]}, 1.0
        )
        prometheus = start_prometheus(binary, tmp, config, port, stack)
        yield Stack(prometheus, tuple(agents), collector, service)

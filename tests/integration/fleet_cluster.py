"""One simulated cluster, two ways into a store: scraped directly (the agents' real pages
through the collector's parse and store, every 15 s) and through an engine (the same pages
with timestamps, in VictoriaMetrics or Prometheus) read by fleet mode. The fleet-mode tests
compare the two."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.fleet_sim import FleetPages
from gpuscope.collector.cluster.inventory_records import node_from_json, pod_from_json
from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.page_outcome import page_to_outcome
from gpuscope.collector.storage.store import Store
from gpuscope.core.collector_settings import WorkloadSettings
from gpuscope.core.settings import Settings
from gpuscope.sim import SimulatedCluster
from gpuscope.sim.kube import nodes_json
from gpuscope.sim.kube_pods import pods_json
from gpuscope.sim.scenario import default_scenario

STEP_S = 15
BUCKET_S = 300


@dataclass
class SimRun:
    cluster: SimulatedCluster
    origin: float  # scenario time 0, Unix seconds
    start: float  # first sample (a multiple of 300)
    minutes: int
    _kept: FleetPages | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def end(self) -> float:
        return self.start + self.minutes * 60

    def times(self) -> list[float]:
        return [self.start + k * STEP_S for k in range(self.minutes * 60 // STEP_S)]

    def buckets(self) -> list[float]:
        return [self.start + k * BUCKET_S for k in range(self.minutes * 60 // BUCKET_S)]

    def pages(self) -> FleetPages:
        """The run's pages, each time's rendered once for every use of this run (direct
        scraping, each engine's push): rendering was most of a fleet module's CPU, the
        same pages up to five times (issue 39)."""
        if self._kept is None:
            self._kept = self.render()
        return self._kept

    def render(self) -> FleetPages:
        """What renders the run's pages, keeping them (a subclass plants its own)."""
        return FleetPages(self.cluster, self.cluster.node_names, self.origin, keep=True)


def sim_run(nodes: int = 8, minutes: int = 30, hours_ago: float = 3.0) -> SimRun:
    """The demo's scenario on ``nodes`` nodes, ``minutes`` long, ending ``hours_ago``
    before now on the 5-minute grid (inside both engines' retention)."""
    scenario = default_scenario(nodes)
    start = math.floor((time.time() - hours_ago * 3600) / BUCKET_S) * BUCKET_S
    # six hours into the scenario at `start`: the demo's notebooks are idle by then
    return SimRun(SimulatedCluster(scenario), start - scenario.live_offset, start, minutes)


def record_inventory(store: Store, run: SimRun, at: float, workloads: WorkloadSettings) -> None:
    """What the Kubernetes API would list at ``at``, as the collector records it."""
    objs = nodes_json(run.cluster, origin=run.origin)["items"]
    nodes = {n["metadata"]["name"]: node_from_json(n) for n in objs}
    pods = [
        pod_from_json(p, node=nodes.get(p["spec"].get("nodeName", "")), settings=workloads)
        for p in pods_json(run.cluster, at - run.origin, origin=run.origin)["items"]
    ]
    store.record_inventory(datetime.fromtimestamp(at, UTC), nodes=list(nodes.values()), pods=pods)


def scrape_directly(run: SimRun, db: Path, settings: Settings) -> Store:
    """Direct mode: every node's page every 15 s through parse and the store's cycles,
    written in one transaction (``append_cycles``, held equal to ``append_cycle`` of each
    in turn by tests/unit/test_store_bulk.py)."""
    store = Store.open(db)
    record_inventory(store, run, run.start, settings.workloads)
    pages = run.pages()
    cycles = []
    for t in run.times():
        outcomes = [
            page_to_outcome(Target(f"http://{node}:9835/metrics", "agent", node), page, t)
            for node, page in pages.pages(t)
        ]
        cycles.append([(o.batch, 0.0) for o in outcomes if o.batch is not None])
    store.append_cycles(cycles)
    return store


def node_summaries(store: Store) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Every ``gpuscope:node_*`` series by (metric, node): its (time, value) in order."""
    cur = store.cursor()
    rows = cur.execute(
        "SELECT metric, node, epoch(ts), value FROM samples JOIN series USING (series_id) "
        "WHERE metric LIKE 'gpuscope:node_%' ORDER BY 1, 2, 3"
    ).fetchall()
    cur.close()
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for metric, node, ts, value in rows:
        out.setdefault((metric, node), []).append((float(ts), float(value)))
    return out

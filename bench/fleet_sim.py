"""A simulated fleet in a metrics engine, without running an agent per node.

For tests and benchmarks of fleet mode: the agent's real page
(:meth:`gpuscope.agent.serving.exposition.AgentCollector.render`) for every node of a
:class:`SimulatedCluster` at each step of a time range, written with timestamps as

- Prometheus text lines with millisecond timestamps, pushed to VictoriaMetrics'
  ``/api/v1/import/prometheus`` (:func:`push_to_victoriametrics`), or
- one OpenMetrics file with second timestamps, every family's samples together, for
  ``promtool tsdb create-blocks-from openmetrics`` to write as Prometheus blocks
  (:func:`write_openmetrics`).

So 10,000 simulated GPUs need one process, not 1,250 agents. Each node's page is the page
``gpuscope agent --gpu-source sim`` serves at that scenario time (``process_*`` series left
out: they are the agent process's own), plus the ``instance``/``job`` labels a scraping
engine adds.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import httpx

from gpuscope.agent.devices.sim import SimAttributor, SimGpuSource, SimIbSource
from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.sim.cluster import SimulatedCluster


class FleetPages:
    """Renders the agents' pages of ``nodes`` at any scenario time. With ``keep`` each
    time's pages (in each format) are rendered once and kept: the tests hand the same run
    to direct scraping and to one engine or more (a page of 8 GPUs is ~43 KB; a fleet
    benchmark keeps none)."""

    def __init__(
        self, cluster: SimulatedCluster, nodes: Sequence[str], origin: float, *, keep: bool = False
    ) -> None:
        self.cluster, self.nodes, self.origin = cluster, list(nodes), origin
        self._kept: dict[tuple[float, bool], list[tuple[str, bytes]]] | None = {} if keep else None
        self._t = 0.0
        clock = self._scenario_time
        self._agents = [
            AgentCollector(
                n,
                SimGpuSource(cluster, n, clock),
                SimIbSource(cluster, n, clock),
                SimAttributor(cluster, n, clock),
            )
            for n in self.nodes
        ]

    def _scenario_time(self) -> float:
        return self._t

    def pages(self, unix_t: float, *, openmetrics: bool = False) -> Iterator[tuple[str, bytes]]:
        """``(node, page)`` for every node at ``unix_t``."""
        if self._kept is None:
            yield from self._render(unix_t, openmetrics)
            return
        key = (unix_t, openmetrics)
        if key not in self._kept:
            self._kept[key] = list(self._render(unix_t, openmetrics))
        yield from self._kept[key]

    def _render(self, unix_t: float, openmetrics: bool) -> Iterator[tuple[str, bytes]]:
        self._t = unix_t - self.origin
        for node, agent in zip(self.nodes, self._agents, strict=True):
            yield node, agent.render(openmetrics=openmetrics)

    def close(self) -> None:
        for agent in self._agents:
            agent.close()


def _with_engine_labels(line: str, node: str) -> str:
    """A sample line with the labels the scraping engine adds (instance, job)."""
    extra = f'instance="{node}:9835",job="gpuscope-agent"'
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and brace < space:
        return line[: brace + 1] + extra + "," + line[brace + 1 :]
    return line[:space] + "{" + extra + "}" + line[space:]


def import_lines(pages: Iterable[tuple[str, bytes]], unix_ms: int) -> Iterator[str]:
    """Text-format sample lines with a millisecond timestamp (VictoriaMetrics import)."""
    for node, page in pages:
        for line in page.decode().splitlines():
            if line and not line.startswith("#"):
                yield f"{_with_engine_labels(line, node)} {unix_ms}"


def push_to_victoriametrics(
    base_url: str,
    fleet: FleetPages,
    times: Iterable[float],
    *,
    client: httpx.Client | None = None,
    lines_per_request: int = 500_000,
) -> int:
    """Push every node's page at each of ``times`` (Unix seconds); returns lines pushed.
    Gzipped requests of at most ``lines_per_request`` lines keep memory bounded."""
    own = client is None
    http = client or httpx.Client(timeout=300)
    sent = 0

    def post(lines: list[str]) -> None:
        body = gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=1)
        r = http.post(
            base_url.rstrip("/") + "/api/v1/import/prometheus",
            content=body,
            headers={"Content-Encoding": "gzip"},
        )
        r.raise_for_status()

    try:
        for t in times:
            # a request per ``nodes_per_request`` nodes: a step of 12,500 nodes is 6.8 M
            # lines, which held at once would take gigabytes of the benchmark's memory
            chunk: list[str] = []
            for line in import_lines(fleet.pages(t), round(t * 1000)):
                chunk.append(line)
                if len(chunk) >= lines_per_request:
                    post(chunk)
                    sent += len(chunk)
                    chunk = []
            if chunk:
                post(chunk)
                sent += len(chunk)
    finally:
        if own:
            http.close()
    return sent


def write_openmetrics(fleet: FleetPages, times: Sequence[float], out: Path) -> int:
    """One OpenMetrics file of every node's page at each of ``times``, every family's
    samples together (as the format requires), timestamps in seconds. Returns samples."""
    headers: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    family = ""
    for t in times:
        for node, page in fleet.pages(t, openmetrics=True):
            for line in page.decode().splitlines():
                if not line or line == "# EOF":
                    continue
                if line.startswith("# "):
                    parts = line.split(" ", 3)
                    if parts[1] in ("HELP", "TYPE", "UNIT"):
                        family = parts[2]
                        got = headers.setdefault(family, [])
                        if line not in got:
                            got.append(line)
                    continue
                samples.setdefault(family, []).append(f"{_with_engine_labels(line, node)} {t:.3f}")
    n = 0
    with out.open("w", encoding="utf-8") as f:
        for fam, head in headers.items():
            rows = samples.get(fam, [])
            if not rows:
                continue
            f.write("\n".join(head) + "\n")
            f.write("\n".join(rows) + "\n")
            n += len(rows)
        f.write("# EOF\n")
    return n

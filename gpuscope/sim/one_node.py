"""One node's share of a simulated cluster: what a simulated node agent needs, and no more.

A node agent (``gpuscope agent --gpu-source sim``) reads one node. Its readings depend only
on the pods placed on that node (those running and those that ran there before, whose work
stays in the energy and traffic counters), on the node's spec and on the scenario's faults;
so it builds a :class:`~gpuscope.sim.SimulatedCluster` from the scenario cut down to the
workloads placed on its node (:func:`one_node`), which gives the same readings for that node
as the whole cluster does (tests/unit/test_sim_one_node.py checks it page for page) and
holds a thirtieth of the pods.

The default scenario's steady-state background (:mod:`gpuscope.sim.steady`) is a
cluster-wide simulation (every node's placement depends on every other's) that takes most of
a second; the agent would pay it at every start for the hundred-odd pods of its own node.
So the background of the default scenario as ``gpuscope agent`` runs it (32 nodes, seed 42)
ships with the package, node by node (:data:`SHIPPED`, written by
``python -m gpuscope.sim.one_node --write``). It is used only while it still is what the
simulation computes: the file names the planted scenario and the source of
:mod:`gpuscope.sim.steady` and :mod:`gpuscope.sim.steady_scheduler` it was made from
(:func:`fingerprint`), and with any other scenario, seed or source the background is
computed as before (slower, never wrong). A test recomputes it and fails when the file is
stale.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
from pathlib import Path

from gpuscope.sim.scenario import Scenario, WorkloadSpec, default_scenario, steady_background

#: The shipped background: a header line, then one line per node of its placed workloads.
SHIPPED = Path(__file__).with_name("data") / "default-background.jsonl.gz"
#: The default scenario's parameters the shipped background is for (``gpuscope agent``'s).
SHIPPED_NODES = 32
SHIPPED_SEED = 42
#: The steady loop's code: the jobs it draws, and its scheduler.
_STEADY_SOURCES = tuple(Path(__file__).with_name(n) for n in ("steady.py", "steady_scheduler.py"))


def one_node(scenario: Scenario, node: str) -> Scenario:
    """``scenario`` with only the workloads placed on ``node``, in their order.

    Equivalent for that node's readings because placement is per node: a workload pinned to
    other nodes never touches this node's GPUs, and a pending one is never placed. A
    workload the simulator places itself (first fit over all nodes) depends on the rest of
    the cluster, so a scenario with one is returned whole.
    """
    if any(not w.pending and not w.nodes for w in scenario.workloads):
        return scenario
    mine = tuple(w for w in scenario.workloads if not w.pending and node in w.nodes)
    return scenario.model_copy(update={"workloads": mine})


def fingerprint(planted: Scenario) -> str:
    """What a background is computed from: the planted scenario (its records' repr, which
    names every field) and the steady loop's code."""
    digest = hashlib.sha256(repr(planted).encode())
    for source in _STEADY_SOURCES:
        digest.update(source.read_bytes())
    return digest.hexdigest()


def _node_prefix(node: str) -> str:
    """How the line of ``node`` starts (found without parsing the other nodes' lines)."""
    return json.dumps({"node": node}, separators=(",", ":"))[:-1] + ","


def shipped_node_background(planted: Scenario, node: str) -> tuple[WorkloadSpec, ...] | None:
    """The shipped background workloads placed on ``node`` when the file is for
    ``planted`` and today's steady loop; None otherwise (compute it instead)."""
    try:
        with gzip.open(SHIPPED, "rt", encoding="utf-8") as f:
            header = json.loads(f.readline())
            if header.get("fingerprint") != fingerprint(planted):
                return None
            prefix = _node_prefix(node)
            for line in f:
                if line.startswith(prefix):
                    # made directly (checked by the records themselves, no pydantic):
                    # the file was written from these records
                    return tuple(WorkloadSpec(**w) for w in json.loads(line)["workloads"])
    except (OSError, ValueError, TypeError):
        return None
    return None


def default_node_scenario(node: str | None, seed: int) -> tuple[str, Scenario]:
    """The default scenario (``seed``) cut down to ``node`` (the first node when None), with
    the shipped background where it applies; the node's name and its scenario."""
    planted = default_scenario(seed=seed, steady=False)
    name = node or planted.nodes[0].name
    if name not in {n.name for n in planted.nodes}:
        return name, planted  # the caller reports the unknown node
    background = None
    if seed == SHIPPED_SEED and len(planted.nodes) == SHIPPED_NODES:
        background = shipped_node_background(planted, name)
    if background is None:
        return name, one_node(default_scenario(seed=seed), name)
    whole = planted.model_copy(update={"workloads": (*planted.workloads, *background)})
    return name, one_node(whole, name)


def write_shipped(path: Path = SHIPPED) -> int:
    """Compute the default scenario's background and write it, node by node; returns the
    number of placed workloads written."""
    planted = default_scenario(nodes=SHIPPED_NODES, seed=SHIPPED_SEED, steady=False)
    background = steady_background(planted)
    lines = [json.dumps({"fingerprint": fingerprint(planted)})]
    written = 0
    for n in planted.nodes:
        mine = [w for w in background if not w.pending and n.name in w.nodes]
        written += len(mine)
        dumped = [w.model_dump(mode="json", exclude_defaults=True) for w in mine]
        lines.append(json.dumps({"node": n.name, "workloads": dumped}, separators=(",", ":")))
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # same input, same bytes
        f.write(("\n".join(lines) + "\n").encode())
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description="Write the default scenario's shipped background.")
    ap.add_argument("--write", action="store_true", help=f"(re)write {SHIPPED.name}")
    args = ap.parse_args()
    if args.write:
        print(f"{write_shipped()} placed workloads written to {SHIPPED}")


if __name__ == "__main__":
    main()

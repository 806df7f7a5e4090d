"""Reading the what-if's inputs from files, and running a set of policies and seeds on them.

Two file inputs, told apart by their suffix as ``analyze --nodes/--pods`` tells them:

- the Alibaba openb CSVs: the trace's nodes, empty, and its tasks as the workload, with
  the FGD paper's arrival inflation (:func:`gpuscope.analytics.whatif.events.inflate`; 1.3 of
  the cluster's GPU capacity unless told otherwise);
- ``kubectl get nodes/pods -o json``: the nodes emptied, and the live pods as arrivals in
  their start order (each once), or, with an arrival share, drawn with replacement as the
  trace's tasks are.

The task mix FGD and the fragmentation figures use is learnt from the workload as given
(the trace's task list, the snapshot's pods), as the detector learns it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuscope.analytics.placement.allocation import Task
from gpuscope.analytics.placement.allocation_sources import records_from_kubectl
from gpuscope.analytics.placement.fragmentation import TaskMix, learn_task_mix
from gpuscope.analytics.trace import read_nodes, read_tasks
from gpuscope.analytics.whatif.engine import replay
from gpuscope.analytics.whatif.events import (
    Inventory,
    PodEvent,
    arrivals,
    empty_nodes,
    inflate,
    snapshot_events,
)
from gpuscope.analytics.whatif.history import History
from gpuscope.analytics.whatif.results import PolicyResult
from gpuscope.collector.cluster.inventory_records import NodeInfo, PodInfo
from gpuscope.core.errors import UserError
from gpuscope.core.kube_objects import ObjectSet
from gpuscope.core.settings import Settings

log = logging.getLogger(__name__)

#: The FGD paper's arrival share: tasks arrive until they ask for 130 % of capacity.
DEFAULT_ARRIVALS = 1.3
#: The FGD paper's artifacts run seeds 42, 43, ...
FIRST_SEED = 42
#: How far a stored window's replay with a later seed moves each arrival, either way:
#: the order of arrivals within a quarter of an hour is taken as noise.
ARRIVAL_JITTER_S = 900.0


@dataclass(frozen=True, slots=True)
class Workload:
    """A what-if's input: the empty cluster, the workload's tasks, and (for a snapshot
    replayed once) its pods as events."""

    inventory: Inventory
    tasks: tuple[Task, ...]
    mix: TaskMix
    source: str
    events: tuple[PodEvent, ...] | None = None
    #: The ``--objects`` files' Kubernetes objects (queues, DRA, topology...), for the
    #: readers of those kinds; empty when none were given.
    objects: ObjectSet = field(default_factory=ObjectSet)
    #: A kubectl snapshot's records (empty for the trace's CSVs), for the topology-aware
    #: what-if (:mod:`gpuscope.analytics.whatif.gangs`), which needs labels and pod groups.
    node_infos: tuple[NodeInfo, ...] = ()
    pod_infos: tuple[PodInfo, ...] = ()


def _kubectl(path: Path) -> dict[str, object]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not kubectl JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
        raise UserError(f"{path} is not a kubectl List (no 'items')")
    return doc


def read_workload(
    nodes: Path, pods: Path, settings: Settings, *, objects: ObjectSet | None = None
) -> Workload:
    """The inventory and workload of the files (module docstring); ``objects`` (from
    ``--objects``) travel with it for the readers of their kinds."""
    for flag, path in (("--nodes", nodes), ("--pods", pods)):
        if path.is_dir():
            raise UserError(f"{flag} {path} is a folder; expected a file")
        if not path.is_file():
            raise UserError(f"{flag} {path} does not exist")
    coverage = settings.analytics.fgd_task_coverage
    node_infos: list[NodeInfo] = []
    pod_infos: list[PodInfo] = []
    if nodes.suffix.lower() == ".csv" or pods.suffix.lower() == ".csv":
        inventory = Inventory(read_nodes(nodes))
        tasks = tuple(read_tasks(pods))
        source = "trace"
        events = None
    else:
        node_infos, pod_infos = records_from_kubectl(
            _kubectl(nodes), _kubectl(pods), settings.workloads, objects
        )
        inventory = Inventory(empty_nodes(node_infos))
        events = tuple(snapshot_events(pod_infos))
        tasks = tuple(e.request.task for e in events)
        source = "kubectl"
    if not inventory.nodes:
        raise UserError(f"{nodes} lists no nodes")
    if not inventory.gpu_capacity:
        raise UserError(f"{nodes}: no schedulable node has a GPU; nothing to place")
    if not any(t.gpus > 0 for t in tasks):
        raise UserError(f"{pods}: no pod asks for a GPU; nothing to replay")
    mix = learn_task_mix(tasks, coverage)
    return Workload(
        inventory, tasks, mix, source, events, objects or ObjectSet(),
        tuple(node_infos), tuple(pod_infos),
    )  # fmt: skip


def jittered(
    events: Sequence[PodEvent], seed: int, jitter_s: float = ARRIVAL_JITTER_S
) -> Sequence[PodEvent]:
    """The events as stored for the first seed; for each later one, every arrival moved
    by up to ``jitter_s`` either way (seeded), so the seeds' spread says how much of a
    difference between policies is noise (whatif/verdict.py)."""
    if seed == FIRST_SEED or jitter_s <= 0:
        return events
    rng = random.Random(seed)  # noqa: S311 (a seeded replay, not a secret)
    return tuple(
        dataclasses.replace(e, arrive=e.arrive + rng.uniform(-jitter_s, jitter_s)) for e in events
    )


def run_history(
    history: History,
    policies: Sequence[str],
    *,
    seeds: int = 1,
    drop: bool = False,
    coverage: float = 0.95,
) -> list[PolicyResult]:
    """Every policy on a stored window's events, run to the window's end; each seed after
    the first with its arrivals jittered (:func:`jittered`), the same for every policy."""
    mix = learn_task_mix([e.request.task for e in history.events], coverage)
    results = []
    for seed in range(FIRST_SEED, FIRST_SEED + seeds):
        events = jittered(history.events, seed)
        for policy in policies:
            results.append(
                replay(history.inventory, events, policy, seed=seed, mix=mix, drop=drop,
                       until=history.end)
            )  # fmt: skip
    return results


def run_policies(
    workload: Workload,
    policies: Sequence[str],
    *,
    seeds: int = 1,
    arrival_share: float | None = None,
    drop: bool = False,
) -> list[PolicyResult]:
    """Every policy on every seed's arrivals (the same arrivals for every policy)."""
    share = arrival_share
    if share is None and workload.events is None:
        share = DEFAULT_ARRIVALS
    results = []
    for seed in range(FIRST_SEED, FIRST_SEED + seeds):
        if share is None:
            events: Sequence[PodEvent] = workload.events or ()
        else:
            drawn = inflate(workload.tasks, workload.inventory.gpu_capacity, share, seed)
            events = arrivals(drawn)
        for policy in policies:
            results.append(
                replay(workload.inventory, events, policy, seed=seed, mix=workload.mix, drop=drop)
            )
            log.info(
                "whatif policy=%s seed=%d allocation_ratio=%.4f",
                policy,
                seed,
                results[-1].allocation_ratio,
            )
    return results

"""Scenarios: what a simulated cluster holds, written in code or in a YAML file.

A scenario names nodes (GPU model and count, InfiniBand ports, pool and rack), projects with
guaranteed GPUs, and workloads with their kind and behaviour over time. Times are seconds
relative to the scenario's origin, so the same scenario can be replayed at any wall-clock
time. Tests and benchmarks write small scenarios that plant exactly what they need.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from gpuscope.core.errors import ConfigError
from gpuscope.core.settings_layers import read_yaml_file
from gpuscope.sim.spec import Bounds, Spec

HOUR = 3600.0
DAY = 24 * HOUR


@dataclass(frozen=True, kw_only=True)
class GpuModel(Spec):
    """Static properties of a GPU model, as NVML reports them."""

    name: str
    memory_bytes: int
    idle_watts: float
    max_watts: float
    sm_clock_mhz: float = 1980.0
    memory_clock_mhz: float = 2619.0
    nvlink_bytes_per_second: float = 450e9


GPU_MODELS: dict[str, GpuModel] = {
    "H100": GpuModel(
        name="NVIDIA H100 80GB HBM3", memory_bytes=81559 * 2**20, idle_watts=70, max_watts=700
    ),
    "A100": GpuModel(
        name="NVIDIA A100-SXM4-80GB",
        memory_bytes=81920 * 2**20,
        idle_watts=55,
        max_watts=400,
        sm_clock_mhz=1410,
        memory_clock_mhz=1593,
        nvlink_bytes_per_second=300e9,
    ),
}

Kind = Literal["interactive", "training", "batch", "inference"]


@dataclass(frozen=True, kw_only=True)
class NodeSpec(Spec):
    name: str
    gpu_model: Literal["H100", "A100"] = "H100"
    gpus: Annotated[int, Bounds(ge=0, le=16)] = 8
    #: MIG profile every GPU of the node is split into ("" for none), e.g. "3g.40gb".
    mig_profile: str = ""
    ib_ports: Annotated[int, Bounds(ge=0, le=16)] = 8
    ib_rate_gbps: Annotated[float, Bounds(gt=0)] = 400
    cpu_milli: int = 128_000
    pool: str = "default"
    rack: str = ""
    #: Leaf-switch group: in a rail-optimised fabric the nodes whose rails share the same
    #: rail leaf switches (labelled network.topology.nvidia.com/leaf); "" for none.
    leaf: str = ""
    #: GPUs handed out through DRA only (ResourceSlices and claims, gpuscope/sim/dra.py):
    #: no ``nvidia.com/gpu`` in the node's allocatable.
    dra: bool = False


@dataclass(frozen=True, kw_only=True)
class ProjectSpec(Spec):
    name: str
    guaranteed_gpus: Annotated[float, Bounds(ge=0)] = 0
    #: Namespaces of the project; the project's own name when empty.
    namespaces: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec(Spec):
    """One workload: a notebook, a training job (``replicas`` pods), an inference server."""

    name: str
    namespace: str
    kind: Kind
    project: str = ""
    #: GPUs per pod; with ``gpu_fraction`` < 1 each pod takes that share of one GPU.
    gpus: Annotated[int, Bounds(ge=0, le=16)] = 1
    gpu_fraction: Annotated[float, Bounds(gt=0, le=1)] = 1.0
    #: Takes one MIG instance instead of whole GPUs (only on MIG nodes).
    mig: bool = False
    replicas: Annotated[int, Bounds(ge=1)] = 1
    cpu_milli: int = 8_000
    #: Nodes to place the pods on, one per replica; empty lets the simulator place them.
    nodes: tuple[str, ...] = ()
    #: GPU indices on the node (for each replica the same) when the placement is planted.
    gpu_indices: tuple[int, ...] = ()
    start: float = 0.0
    end: float | None = None
    #: When it was submitted, if it waited (Pending) for room before ``start``.
    arrival: float | None = None
    #: Never scheduled: a pending job that waits for room.
    pending: bool = False
    #: Mean GPU utilization while busy (0..1).
    utilization: Annotated[float, Bounds(ge=0, le=1)] = 0.85
    #: Interactive: seconds of use after start before the session goes idle (None: never).
    active_seconds: float | None = None
    #: Share of the InfiniBand link rate each pod drives (multi-node training), 0..1.
    ib_load: Annotated[float, Bounds(ge=0, le=1)] = 0.0
    memory_fraction: Annotated[float, Bounds(ge=0, le=1)] = 0.7
    priority: int = 0
    preemptible: bool = False
    #: Whether it may preempt lower-priority pods (its pods' ``preemptionPolicy``; a
    #: pending planted job that must stay pending, such as the blocked 4-GPU job, has
    #: ``Never``: waiting is its story).
    preempts: bool = True
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    def _check(self) -> None:
        if self.gpu_fraction < 1 and self.gpus != 1:
            raise ValueError("a fractional workload asks for gpus: 1")
        if self.nodes and len(self.nodes) != self.replicas:
            raise ValueError("nodes must name one node per replica")

    @property
    def project_name(self) -> str:
        return self.project or self.namespace


@dataclass(frozen=True, kw_only=True)
class Fault(Spec):
    """A planted fault: an erroring IB port or a GPU that falls off the bus."""

    kind: Literal["ib_errors", "gpu_lost"]
    node: str
    port: int = 1
    device_index: int = 0
    #: For ib_errors: symbol errors per hour.
    per_hour: float = 60.0
    at: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Scenario(Spec):
    name: str = "scenario"
    seed: int = 42
    #: Unix time of the scenario's origin; None lets the runner choose (e.g. now - live_offset).
    origin: float | None = None
    #: Where a live run starts on the timeline, so a fresh demo already has history.
    live_offset: float = 6 * HOUR
    nodes: tuple[NodeSpec, ...]
    projects: tuple[ProjectSpec, ...] = ()
    workloads: tuple[WorkloadSpec, ...] = ()
    faults: tuple[Fault, ...] = ()

    def _check(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        known = set(names)
        for w in self.workloads:
            for n in w.nodes:
                if n not in known:
                    raise ValueError(f"workload {w.name} names unknown node {n}")

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


def load_scenario(path: Path) -> Scenario:
    """Read a scenario from YAML; any problem is one ConfigError line (a binary file, YAML
    that does not parse, a document that is not a mapping, a field of the wrong type)."""
    data = read_yaml_file(path, "scenario file")
    if not isinstance(data, dict):
        raise ConfigError(f"scenario file {path} must hold a mapping (nodes:, workloads: ...)")
    from pydantic import ValidationError  # a file is read through pydantic (gpuscope/sim/spec.py)

    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"scenario file {path}: {where}: {err['msg']}") from None


#: Nodes per leaf-switch group in the default scenario: a rail-optimised fabric as in a
#: DGX BasePOD, where each node's 8 rails go to 8 rail leaf switches and a group of nodes
#: shares the same 8 leaves (one InfiniBand hop between them on every rail).
LEAF_NODES = 4
#: The Kueue pod group planted by :func:`topology_story`.
TOPOLOGY_STORY_GROUP = "gpt-16"


def topology_story() -> WorkloadSpec:
    """A pending 2-node, 16-GPU ``nlp`` job (a Kueue pod group of two 8-GPU pods) that
    requires one leaf: the cluster has more than 16 free GPUs, but no leaf holds two free
    nodes, so it waits until a plan clears a leaf."""
    return WorkloadSpec(
        name=TOPOLOGY_STORY_GROUP,
        namespace="nlp",
        kind="training",
        gpus=8,
        replicas=2,
        start=-20 * 60,
        pending=True,
        preempts=False,
        labels={"kueue.x-k8s.io/pod-group-name": TOPOLOGY_STORY_GROUP},
        annotations={
            "kueue.x-k8s.io/pod-group-total-count": "2",
            "kueue.x-k8s.io/podset-required-topology": "network.topology.nvidia.com/leaf",
        },
    )


#: Where the default scenario's time 0 falls in its week (seconds since Monday 00:00 UTC):
#: the demo's "now" is 00:10 on a Monday, its live part starting 6 hours after time 0.
DEFAULT_WEEK_PHASE = 7 * DAY - 6 * HOUR + 600


@functools.lru_cache(maxsize=8)  # a frozen model; the background takes a second or two
def default_scenario(
    nodes: int = 32, seed: int = 42, dra: bool = False, *, steady: bool = True
) -> Scenario:
    """The demo's cluster: 32 × 8 H100 with 8 × 400G IB rails each, four projects.

    With ``steady`` (the default) the cluster runs full from ten days before time 0 to
    half an hour before its live part: training jobs that come and go (openb's sizes and
    spread of durations), notebooks with working hours, inference that scales with the
    day (:mod:`gpuscope.sim.steady`), about 85 % of its GPUs allocated; the planted
    problems below are there on top, and alone at the end.

    What it plants, so that every detector has something true to find:
    - ``nlp`` trains across 8 nodes (64 GPUs) over its 48-GPU guarantee while ``vision``
      waits: quota over-use;
    - one ``nlp`` worker drives its rail near line rate: an InfiniBand hot spot; another
      node's port counts symbol errors;
    - notebooks in ``research`` of which several went idle hours ago and one is very old;
    - ``serving`` runs fractional inference pods, several sharing a GPU;
    - a 4-GPU ``vision`` job is pending: there are enough free GPUs, but scattered;
    - nodes sit in racks of 8 and leaf-switch groups of 4 (:data:`LEAF_NODES`), and (from
      16 nodes) a 2-node 16-GPU ``nlp`` job that must stay under one leaf waits
      (:func:`topology_story`).

    With ``dra`` (the demo's), a small DRA pool is added (:func:`dra_pool`): the same story
    must hold on nodes that hand GPUs out through ResourceSlices and claims only.
    """
    node_specs = tuple(
        NodeSpec(
            name=f"gpu-node-{i:02d}",
            gpu_model="H100",
            pool="h100",
            rack=f"rack-{i // 8}",
            leaf=f"leaf-{i // LEAF_NODES}",
        )
        for i in range(nodes)
    )
    names = [n.name for n in node_specs]
    if nodes < 6:
        raise ValueError("the default scenario needs at least 6 nodes")
    workloads: list[WorkloadSpec] = []
    half = nodes // 4
    serve_nodes = names[-2:]
    sweep_nodes = names[half + 1 : -2]
    # nlp: a multi-node pre-training job and a fine-tune whose rail runs hot
    train_nodes = tuple(names[:half])
    workloads.append(
        WorkloadSpec(
            name="llm-pretrain",
            namespace="nlp",
            kind="training",
            gpus=8,
            replicas=len(train_nodes),
            nodes=train_nodes,
            start=-3 * DAY,
            utilization=0.92,
            ib_load=0.55,
        )
    )
    workloads.append(
        WorkloadSpec(
            name="llm-finetune",
            namespace="nlp",
            kind="training",
            gpus=8,
            nodes=(names[half],),
            start=-1 * DAY,
            utilization=0.88,
            ib_load=0.97,
        )
    )
    # vision: preemptible sweeps that leave 1-3 GPUs free on every other node
    for j, node in enumerate(sweep_nodes):
        workloads.append(
            WorkloadSpec(
                name=f"vit-sweep-{j:02d}",
                namespace="vision",
                kind="batch",
                gpus=5 + (j % 3),
                nodes=(node,),
                start=-2 * HOUR - j * 600,
                utilization=0.7,
                preemptible=True,
                priority=-10,
            )
        )
    # ... so its 4-GPU job waits although enough GPUs are free in all
    workloads.append(
        WorkloadSpec(
            name="detector-train",
            namespace="vision",
            kind="training",
            gpus=4,
            start=-30 * 60,
            pending=True,
            preempts=False,
        )
    )
    # research: notebooks; two in three went idle 40 minutes after they started
    for j in range(min(12, len(sweep_nodes))):
        idle = j % 3 != 0
        workloads.append(
            WorkloadSpec(
                name=f"nb-user{j:02d}",
                namespace="research",
                kind="interactive",
                gpus=1,
                nodes=(sweep_nodes[j],),
                start=-(4 + j) * HOUR if j != 5 else -9 * DAY,
                active_seconds=(40 * 60.0 if idle else None),
                utilization=0.35,
                memory_fraction=0.3,
                labels={"app.kubernetes.io/owner": f"user{j:02d}"},
            )
        )
    # serving: fractional inference pods spread over six GPUs a node, two GPUs shared by
    # two pods: slivers of GPU stranded everywhere
    for j in range(16):
        workloads.append(
            WorkloadSpec(
                name=f"embed-{j:02d}",
                namespace="serving",
                kind="inference",
                gpu_fraction=0.5 if j % 4 else 0.25,
                nodes=(serve_nodes[j % 2],),
                gpu_indices=((j // 2) % 6,),
                start=-5 * DAY,
                utilization=0.45,
                memory_fraction=0.8,
            )
        )
    if nodes >= 4 * LEAF_NODES:  # a leaf story needs leaves to choose from
        workloads.append(topology_story())
    used_by_vision = sum(5 + (j % 3) for j in range(len(sweep_nodes)))
    faults = (Fault(kind="ib_errors", node=names[-1], port=3, per_hour=240.0),)
    serving_extra = 0.0
    if dra:
        dra_nodes, dra_workloads, serving_extra = dra_pool()
        node_specs += dra_nodes
        workloads += dra_workloads
    planted = Scenario(
        name="default",
        seed=seed,
        nodes=node_specs,
        projects=(
            ProjectSpec(name="nlp", guaranteed_gpus=float(max(8, (half + 1) * 8 * 2 // 3))),
            ProjectSpec(name="vision", guaranteed_gpus=float(used_by_vision + 16)),
            ProjectSpec(name="research", guaranteed_gpus=16),
            ProjectSpec(name="serving", guaranteed_gpus=16 + serving_extra),
        ),
        workloads=tuple(workloads),
        faults=faults,
    )
    if not steady:
        return planted
    background = steady_background(planted)
    return planted.model_copy(update={"workloads": (*planted.workloads, *background)})


def steady_background(planted: Scenario) -> list[WorkloadSpec]:
    """The steady-state background :func:`default_scenario` adds to its planted scenario,
    from ten days before time 0 to half an hour before the live part."""
    from gpuscope.sim.steady import steady_workloads  # it builds on this module's types

    return steady_workloads(
        planted,
        start=-10 * DAY,
        cutoff=planted.live_offset - 1800,
        phase=DEFAULT_WEEK_PHASE,
    )


def dra_pool() -> tuple[tuple[NodeSpec, ...], list[WorkloadSpec], float]:
    """Three nodes that hand their GPUs out through DRA only: two of 8 H100 and one of 8
    A100 split into 3g.40gb MIG devices. ``serving`` runs on them through claims, leaving
    at most 3 whole GPUs free on any node (so the pending 4-GPU job stays blocked by
    fragmentation) and 4 MIG devices free; its guarantee grows by the 12 GPUs it holds
    there (returned), so the quota story is unchanged."""
    nodes = (
        NodeSpec(name="dra-node-00", pool="h100-dra", rack="rack-dra", dra=True),
        NodeSpec(name="dra-node-01", pool="h100-dra", rack="rack-dra", dra=True),
        NodeSpec(name="dra-mig-00", gpu_model="A100", mig_profile="3g.40gb",
                 pool="a100-mig-dra", rack="rack-dra", ib_ports=0, dra=True),
    )  # fmt: skip
    workloads = [
        WorkloadSpec(name=f"llm-serve-{j}", namespace="serving", kind="inference", gpus=6,
                     nodes=(f"dra-node-0{j}",), start=-2 * DAY, utilization=0.6,
                     memory_fraction=0.85)
        for j in range(2)
    ]  # fmt: skip
    workloads.append(
        WorkloadSpec(name="asr-mig", namespace="serving", kind="inference", mig=True,
                     replicas=12, nodes=("dra-mig-00",) * 12, start=-1 * DAY, utilization=0.5)
    )  # fmt: skip
    return nodes, workloads, 12.0

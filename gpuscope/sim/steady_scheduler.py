"""The steady background's scheduler: kube-scheduler's default profile as it places GPU
pods, event by event (gpuscope/sim/steady.py's docstring says how).

:class:`Loop` keeps what the scheduler knows of each node (each GPU's share taken, CPU and
memory requested, the background pods on it), scores nodes as NodeResourcesFit's
``LeastAllocated`` does, and lets a planted pod that starts preempt the background pods on
its GPUs. gpuscope/sim/steady.py draws the jobs and runs the loop over them; both sources
are in the shipped background's fingerprint (gpuscope/sim/one_node.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuscope.sim.cluster import SimulatedCluster
from gpuscope.sim.scenario import Scenario

if TYPE_CHECKING:
    from gpuscope.sim.steady import Job

__all__ = ["MILLI", "NODE_MEMORY_MIB", "Holder", "Loop", "job_cpu", "pod_memory_mib"]


#: Milli-GPU: GPU requests scored in integers, as kube-scheduler scores extended resources.
MILLI = 1000
#: A node's allocatable memory in MiB (gpuscope/sim/kube.py's node objects: 2111541248Ki).
NODE_MEMORY_MIB = 2_111_541_248 // 1024


@dataclass(eq=False)
class Holder:
    """A background job running on a node: its GPUs, share and requests, and its end
    (moved earlier when a planted pod preempts it)."""

    spec: int  # its index in the output
    node: str
    gpus: tuple[int, ...]
    share: float
    cpu: int
    memory: int
    end: float
    gone: bool = False


@dataclass(eq=False)
class _Node:
    """What the scheduler knows of a node now: each GPU's share taken, CPU and memory
    requested, the background pods on it."""

    name: str
    taken: list[float]
    cpu: int = 0
    memory: int = 0
    holders: list[Holder] = field(default_factory=list)


def pod_memory_mib(gpus: int, fraction: float) -> int:
    """Host memory a pod requests (gpuscope/sim/kube.py writes the same into its object)."""
    return 1024 * (16 + 96 * gpus if fraction >= 1 else 8 + round(96 * fraction))


def job_cpu(job: Job) -> int:
    # CPUs in proportion to the GPU share (a node has 16 cores a GPU): GPUs, not CPUs,
    # decide where a job fits, here and in any replay of it
    return max(1000, round(14_000 * job.demand))


class Loop:
    """The background's scheduler: kube-scheduler's default profile as it places GPU pods,
    event by event (module docstring)."""

    def __init__(self, planted: Scenario, rng: random.Random) -> None:
        cluster = SimulatedCluster(planted)
        self.rng = rng
        specs = [n for n in planted.nodes if n.gpus and not n.mig_profile]
        self.nodes = {n.name: _Node(n.name, [0.0] * n.gpus) for n in specs}
        self.order = [n.name for n in specs]
        self.cpu_total = {n.name: n.cpu_milli for n in specs}
        self.capacity = sum(len(n.taken) for n in self.nodes.values())
        #: (time, 0 = ends / 1 = starts, node, GPU indices, share, cpu, memory)
        self.planted: list[tuple[float, int, str, tuple[int, ...], float, int, int]] = []
        for pod in cluster.pods:
            if pod.node not in self.nodes or not pod.assignments:
                continue
            w = pod.workload
            idx = tuple(a.gpu_index for a in pod.assignments)
            share = pod.assignments[0].share
            use = (pod.node, idx, share, w.cpu_milli, pod_memory_mib(w.gpus, w.gpu_fraction))
            self.planted.append((pod.start, 1, *use))
            if pod.end is not None:
                self.planted.append((pod.end, 0, *use))
        self.planted.sort(key=lambda e: (e[0], e[1]))
        self.spans = [(e[0], e[4] * len(e[3]), e[1]) for e in self.planted]

    def planted_at(self, t: float) -> float:
        """GPUs the planted pods hold at t."""
        return sum(share if kind else -share for at, share, kind in self.spans if at <= t)

    def score(self, node: _Node, job: Job, cpu: int, memory: int) -> int | None:
        """NodeResourcesFit's LeastAllocated score (cpu, memory and nvidia.com/gpu, weight
        1 each, the pod counted in), None where the pod does not fit."""
        if job.fraction >= 1:
            if sum(1 for x in node.taken if x <= 1e-9) < job.gpus:
                return None
        elif not any(1 - x >= job.fraction - 1e-9 for x in node.taken):
            return None
        cpu_total = self.cpu_total[node.name]
        if node.cpu + cpu > cpu_total or node.memory + memory > NODE_MEMORY_MIB:
            return None
        gpu_total = len(node.taken) * MILLI
        gpu_used = round(sum(node.taken) * MILLI) + round(job.demand * MILLI)
        parts = (
            (cpu_total - node.cpu - cpu) * 100 // cpu_total,
            (NODE_MEMORY_MIB - node.memory - memory) * 100 // NODE_MEMORY_MIB,
            (gpu_total - gpu_used) * 100 // gpu_total,
        )
        return sum(parts) // len(parts)

    def place(self, job: Job, now: float, only: str | None = None) -> Holder | None:
        """The job on the best-scoring node (ties at random, as kube-scheduler's
        selectHost), on its lowest-indexed free GPUs (a fraction: the fullest GPU it fits);
        None when no node fits. ``only``: the one node that may have room now."""
        cpu, memory = job_cpu(job), pod_memory_mib(job.gpus, job.fraction)
        best: int | None = None
        tied: list[_Node] = []
        for name in (only,) if only is not None else self.order:
            node = self.nodes[name]
            s = self.score(node, job, cpu, memory)
            if s is None:
                continue
            if best is None or s > best:
                best, tied = s, [node]
            elif s == best:
                tied.append(node)
        if best is None:
            return None
        node = tied[self.rng.randrange(len(tied))] if len(tied) > 1 else tied[0]
        if job.fraction >= 1:
            gpus = tuple([i for i, x in enumerate(node.taken) if x <= 1e-9][: job.gpus])
        else:
            fits = [i for i, x in enumerate(node.taken) if 1 - x >= job.fraction - 1e-9]
            gpus = (max(fits, key=lambda k: (node.taken[k], -k)),)
        holder = Holder(-1, node.name, gpus, job.fraction, cpu, memory, now + job.duration)
        self._take(node, holder)
        return holder

    def _take(self, node: _Node, h: Holder) -> None:
        for i in h.gpus:
            node.taken[i] += h.share
        node.cpu += h.cpu
        node.memory += h.memory
        node.holders.append(h)

    def release(self, h: Holder) -> None:
        node = self.nodes[h.node]
        for i in h.gpus:
            node.taken[i] = max(0.0, node.taken[i] - h.share)
        node.cpu -= h.cpu
        node.memory -= h.memory
        node.holders.remove(h)
        h.gone = True

    def planted_event(
        self, event: tuple[float, int, str, tuple[int, ...], float, int, int]
    ) -> list[Holder]:
        """A planted pod starts (preempting the background pods on its GPUs, which end
        now) or ends; returns the preempted."""
        at, starts, name, idx, share, cpu, memory = event
        node = self.nodes[name]
        sign = 1 if starts else -1
        victims: list[Holder] = []
        if starts:
            full = {i for i in idx if node.taken[i] + share > 1 + 1e-9}
            victims = [h for h in node.holders if full & set(h.gpus)]
            for h in victims:
                h.end = at
                self.release(h)
        for i in idx:
            node.taken[i] = max(0.0, node.taken[i] + sign * share)
        node.cpu += sign * cpu
        node.memory += sign * memory
        return victims

"""The replay's mutable node state, and the signature that lets identical nodes share work.

A replay changes one node per event, and most nodes of a large cluster look alike (all
empty 8-GPU nodes of one model are the same to every policy). A node's *signature* (its
static kind, free CPU and memory, the multiset of its GPUs' free milli-GPU, free MIG
instances) is all a policy's score and the FGD measure depend on, so scores and
fragmentation are computed once per signature and request type and shared by every node
that has it. Which GPU indices a pod takes is decided on the real node at placement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.analytics.placement.allocation import NodeState
from gpuscope.analytics.whatif.events import MILLI

#: (kind index, free CPU milli, free memory MiB, sorted free milli-GPU, free MIG instances)
Signature = tuple[int, int, int, tuple[int, ...], tuple[tuple[str, int], ...]]


@dataclass(slots=True)
class SimNode:
    """One node during the replay (mutable: the engine owns it; nothing escapes it)."""

    kind: int
    template: NodeState
    gpus: list[int]
    cpu: int
    memory: int
    mig: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, kind: int, node: NodeState) -> SimNode:
        return cls(
            kind=kind,
            template=node,
            gpus=[round(f * MILLI) for f in node.gpus],
            cpu=node.cpu_milli_free,
            memory=node.memory_mib_free,
            mig=dict(node.mig_free),
        )

    def signature(self) -> Signature:
        return (
            self.kind,
            self.cpu,
            self.memory,
            tuple(sorted(self.gpus)),
            tuple(sorted(self.mig.items())),
        )


def kind_key(node: NodeState) -> tuple[object, ...]:
    """What never changes about a node during a replay (nodes alike in it share a kind)."""
    return (
        node.pool,
        node.gpu_model,
        len(node.gpus),
        node.cpu_milli_total,
        node.memory_mib_total,
        node.ephemeral_mib_total,
        node.ephemeral_mib_free,
        node.mig_total,
        node.schedulable,
        node.taints,
        node.labels,
    )


def state_of(template: NodeState, sig: Signature) -> NodeState:
    """The allocation model's view of a node with this signature (name left out), so the
    FGD measure and the fit rules are the detector's own."""
    _, cpu, memory, gpus, mig = sig
    return NodeState(
        name="",
        pool=template.pool,
        gpu_model=template.gpu_model,
        gpus=tuple(g / MILLI for g in gpus),
        cpu_milli_free=cpu,
        cpu_milli_total=template.cpu_milli_total,
        mig_free=mig,
        mig_total=template.mig_total,
        schedulable=template.schedulable,
        memory_mib_free=memory,
        memory_mib_total=template.memory_mib_total,
        ephemeral_mib_free=template.ephemeral_mib_free,
        ephemeral_mib_total=template.ephemeral_mib_total,
        taints=template.taints,
        labels=template.labels,
    )

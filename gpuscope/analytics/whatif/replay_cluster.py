"""The replay's cluster: nodes grouped by signature, with memoised feasibility and scores,
and the pods placed on them (:mod:`gpuscope.analytics.whatif.engine` drives it).

Nodes with the same signature (:mod:`gpuscope.analytics.whatif.nodes`) share one score and
one FGD value per request type, so a replay of thousands of pods over a thousand nodes
scores a few dozen distinct node shapes per pod rather than every node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuscope.analytics.placement.allocation import NodeState
from gpuscope.analytics.placement.fragmentation import node_placements
from gpuscope.analytics.whatif.events import MILLI, Request
from gpuscope.analytics.whatif.nodes import Signature, SimNode, kind_key
from gpuscope.analytics.whatif.policies import GPU_CHOICE, SCORERS, Context, feasible, take
from gpuscope.analytics.whatif.results import HEADROOM_SIZES

#: (request type: the mix's group key plus MIG; hashable)
RequestKey = tuple[object, ...]


@dataclass(slots=True)
class Placed:
    node: int
    gpus: list[int]
    request: Request
    started: float
    key: str = ""
    priority: int = 0


def request_key(req: Request) -> RequestKey:
    t = req.task
    return (
        t.cpu_milli,
        req.share_milli,
        t.gpu_count,
        t.spec_text if t.gpu_count else "",
        t.memory_mib,
        t.ephemeral_mib,
        tuple(sorted(t.tolerations)),
        req.mig,
    )


class ReplayCluster:
    """The nodes, grouped by signature, with memoised feasibility and scores."""

    def __init__(self, nodes: Sequence[NodeState], policy: str, ctx: Context, ties: str) -> None:
        kinds: dict[tuple[object, ...], int] = {}
        self.templates: list[NodeState] = []
        self.nodes: list[SimNode] = []
        for node in nodes:
            key = kind_key(node)
            if key not in kinds:
                kinds[key] = len(self.templates)
                self.templates.append(node)
            self.nodes.append(SimNode.of(kinds[key], node))
        # signatures get small integer ids, so the hot loop hashes ints, not tuples
        self.ids: dict[Signature, int] = {}
        self.sig_of: list[Signature] = []
        self.sigs: list[Signature] = [n.signature() for n in self.nodes]
        self.node_sid: list[int] = [self._sid(sig) for sig in self.sigs]
        self.groups: dict[int, list[int]] = {}
        for i, sid in enumerate(self.node_sid):
            self.groups.setdefault(sid, []).append(i)
        self.scorer = SCORERS[policy]
        self.choice = GPU_CHOICE.get(policy, "best")
        self.ties = ties
        self.ctx = ctx
        self.scores: dict[RequestKey, dict[int, int | None]] = {}
        self.capacity = sum(len(n.gpus) for n in nodes if n.schedulable)
        self.allocated = 0  # milli-GPU

    def _sid(self, sig: Signature) -> int:
        sid = self.ids.get(sig)
        if sid is None:
            sid = self.ids[sig] = len(self.sig_of)
            self.sig_of.append(sig)
        return sid

    def score(self, sid: int, req: Request, rkey: RequestKey) -> int | None:
        """The policy's score of signature ``sid`` for the request, None where it does not
        fit (memoised per request type)."""
        cache = self.scores.setdefault(rkey, {})
        if sid in cache:
            return cache[sid]
        sig = self.sig_of[sid]
        template = self.templates[sig[0]]
        value = self.scorer(template, sig, req, self.ctx) if feasible(template, sig, req) else None
        cache[sid] = value
        return value

    def choose(self, req: Request) -> int | None:
        """The node the policy puts the pod on, None when none fits."""
        rkey = request_key(req)
        best: int | None = None
        tied: list[list[int]] = []
        cache = self.scores.setdefault(rkey, {})
        for sid, members in self.groups.items():
            s = cache[sid] if sid in cache else self.score(sid, req, rkey)
            if s is None:
                continue
            if best is None or s > best:
                best, tied = s, [members]
            elif s == best:
                tied.append(members)
        if best is None:
            return None
        if self.ties == "first":
            return min(min(m) for m in tied)
        pick = self.ctx.rng.randrange(sum(len(m) for m in tied))
        for members in tied:
            if pick < len(members):
                return members[pick]
            pick -= len(members)
        raise AssertionError("unreachable")

    def _move(self, i: int) -> None:
        old, new = self.sigs[i], self.nodes[i].signature()
        if old == new:
            return
        old_sid, new_sid = self.node_sid[i], self._sid(new)
        members = self.groups[old_sid]
        members.remove(i)
        if not members:
            del self.groups[old_sid]
        self.groups.setdefault(new_sid, []).append(i)
        self.sigs[i] = new
        self.node_sid[i] = new_sid

    def place(self, i: int, req: Request, now: float) -> Placed:
        node = self.nodes[i]
        template = self.templates[node.kind]
        gpus = take(node.gpus, req, self.choice, self.ctx, template, self.sigs[i])
        share = req.share_milli
        for g in gpus:
            node.gpus[g] -= share
            assert node.gpus[g] >= 0, "GPU over-committed"
        node.cpu -= req.task.cpu_milli
        if template.memory_mib_total:
            node.memory -= req.task.memory_mib
        for profile, count in req.mig:
            node.mig[profile] -= count
        assert node.cpu >= 0, "CPU over-committed"
        assert node.memory >= 0, "memory over-committed"
        self.allocated += share * len(gpus)
        self._move(i)
        return Placed(i, gpus, req, now)

    def restore(self, placed: Placed) -> None:
        """Take back exactly what ``placed`` held (a preemption's trial undone)."""
        node = self.nodes[placed.node]
        share = placed.request.share_milli
        for g in placed.gpus:
            node.gpus[g] -= share
        node.cpu -= placed.request.task.cpu_milli
        if self.templates[node.kind].memory_mib_total:
            node.memory -= placed.request.task.memory_mib
        for profile, count in placed.request.mig:
            node.mig[profile] -= count
        self.allocated += share * len(placed.gpus)
        self._move(placed.node)

    def fits(self, i: int, req: Request) -> bool:
        return self.score(self.node_sid[i], req, request_key(req)) is not None

    def release(self, placed: Placed) -> None:
        node = self.nodes[placed.node]
        share = placed.request.share_milli
        for g in placed.gpus:
            node.gpus[g] += share
        node.cpu += placed.request.task.cpu_milli
        if self.templates[node.kind].memory_mib_total:
            node.memory += placed.request.task.memory_mib
        for profile, count in placed.request.mig:
            node.mig[profile] += count
        self.allocated -= share * len(placed.gpus)
        self._move(placed.node)

    def fgd_ratio(self) -> float:
        """The cluster's FGD fragmentation ratio (fragmented / free GPU on open nodes)."""
        frag = free = 0.0
        for sid, members in self.groups.items():
            sig = self.sig_of[sid]
            template = self.templates[sig[0]]
            if not template.schedulable or not sig[3]:
                continue
            node_free = sum(sig[3]) / MILLI
            if node_free <= 0:
                continue
            free += node_free * len(members)
            frag += self.ctx.frag(template, sig) * len(members)
        return min(1.0, frag / free) if free > 0 else 0.0

    def headroom(self) -> tuple[tuple[int, int], ...]:
        free = [
            sum(1 for g in n.gpus if g >= MILLI)
            for n in self.nodes
            if self.templates[n.kind].schedulable and n.gpus
        ]
        return tuple((k, node_placements(free, k)[0]) for k in HEADROOM_SIZES)

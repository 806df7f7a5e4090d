"""The replay's cluster: nodes grouped by signature, with memoised feasibility and scores,
and the pods placed on them (:mod:`gpuscope.analytics.whatif.engine` drives it).

Nodes with the same signature (:mod:`gpuscope.analytics.whatif.nodes`) share one score and
one FGD value per request type, so a replay of thousands of pods over a thousand nodes
scores a few dozen distinct node shapes per pod rather than every node. The signatures
present are also indexed by how many GPUs they have wholly free and partly free, so a
pod asking for k GPUs looks only at node shapes with k GPUs it could use: on a busy
cluster most nodes are full and are never looked at. Whether a node admits a pod at all
(readiness, taints, model, labels) is a property of its kind and is decided once per kind
and request type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuscope.analytics.placement.allocation import NodeState, admits
from gpuscope.analytics.placement.fragmentation import node_placements
from gpuscope.analytics.whatif.events import MILLI, Request
from gpuscope.analytics.whatif.nodes import Signature, SimNode, kind_key, state_of
from gpuscope.analytics.whatif.policies import GPU_CHOICE, SCORERS, Context, has_free, take
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
    """Everything about a request that a node's fit and score depend on: requests with the
    same key share every memoised score (its node selector and model constraint included,
    so two pods pinned to different nodes never share one)."""
    t = req.task
    return (
        t.cpu_milli,
        req.share_milli,
        t.gpu_count,
        t.spec_text,
        t.memory_mib,
        t.ephemeral_mib,
        tuple(sorted(t.tolerations)),
        req.mig,
        t.node_terms,
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
        #: each signature's number of wholly free and of partly free GPUs
        self.counts: list[tuple[int, int]] = []
        self.sigs: list[Signature] = [n.signature() for n in self.nodes]
        self.node_sid: list[int] = [self._sid(sig) for sig in self.sigs]
        self.groups: dict[int, list[int]] = {}
        #: when each signature present last joined ``groups`` (its place in that dict's
        #: order, which random ties follow), and the signatures present by their number of
        #: wholly free and of partly free GPUs (the candidates for a k-GPU request)
        self.joined: dict[int, int] = {}
        self._joins = 0
        width = max((len(n.gpus) for n in nodes), default=0) + 1
        self.by_whole: list[dict[int, None]] = [{} for _ in range(width)]
        self.by_any: list[dict[int, None]] = [{} for _ in range(width)]
        for i, sid in enumerate(self.node_sid):
            self._join(sid, i)
        self.admitted: dict[tuple[int, RequestKey], bool] = {}
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
            gpus = sig[3]
            self.counts.append((sum(1 for g in gpus if g >= MILLI), sum(1 for g in gpus if g > 0)))
        return sid

    def _join(self, sid: int, i: int) -> None:
        members = self.groups.get(sid)
        if members is None:
            self.groups[sid] = [i]
            self.joined[sid] = self._joins
            self._joins += 1
            whole, part = self.counts[sid]
            self.by_whole[whole][sid] = None
            self.by_any[part][sid] = None
        else:
            members.append(i)

    def _leave(self, sid: int, i: int) -> None:
        members = self.groups[sid]
        members.remove(i)
        if not members:
            del self.groups[sid]
            whole, part = self.counts[sid]
            del self.by_whole[whole][sid]
            del self.by_any[part][sid]

    def score(self, sid: int, req: Request, rkey: RequestKey) -> int | None:
        """The policy's score of signature ``sid`` for the request, None where it does not
        fit (memoised per request type)."""
        cache = self.scores.setdefault(rkey, {})
        if sid in cache:
            return cache[sid]
        sig = self.sig_of[sid]
        template = self.templates[sig[0]]
        ok = has_free(template, sig, req) and self._admits(sig, req, rkey)
        value = self.scorer(template, sig, req, self.ctx) if ok else None
        cache[sid] = value
        return value

    def _admits(self, sig: Signature, req: Request, rkey: RequestKey) -> bool:
        """Whether nodes of this signature's kind admit the request at all (memoised per
        kind and request type: admission does not depend on what is free)."""
        key = (sig[0], rkey)
        ok = self.admitted.get(key)
        if ok is None:
            ok = self.admitted[key] = admits(state_of(self.templates[sig[0]], sig), req.task)
        return ok

    def _candidates(self, req: Request) -> list[dict[int, None]] | None:
        """The signature sets that may hold the request (None: look at every one)."""
        count, share = req.task.gpu_count, req.share_milli
        if not count or share <= 0:
            return None
        index = self.by_whole if share >= MILLI else self.by_any
        return index[count:] if count < len(index) else []

    def choose(self, req: Request) -> int | None:
        """The node the policy puts the pod on, None when none fits."""
        rkey = request_key(req)
        best: int | None = None
        tied: list[int] = []
        cache = self.scores.setdefault(rkey, {})
        buckets = self._candidates(req)
        for bucket in (self.groups,) if buckets is None else buckets:
            for sid in bucket:
                s = cache[sid] if sid in cache else self.score(sid, req, rkey)
                if s is None:
                    continue
                if best is None or s > best:
                    best, tied = s, [sid]
                elif s == best:
                    tied.append(sid)
        if best is None:
            return None
        if self.ties == "first":
            return min(min(self.groups[sid]) for sid in tied)
        # the tied nodes in the order of ``groups`` (as a scan of every node meets them)
        tied.sort(key=self.joined.__getitem__)
        pick = self.ctx.rng.randrange(sum(len(self.groups[sid]) for sid in tied))
        for sid in tied:
            members = self.groups[sid]
            if pick < len(members):
                return members[pick]
            pick -= len(members)
        raise AssertionError("unreachable")

    def _move(self, i: int) -> None:
        old, new = self.sigs[i], self.nodes[i].signature()
        if old == new:
            return
        old_sid, new_sid = self.node_sid[i], self._sid(new)
        self._leave(old_sid, i)
        self._join(new_sid, i)
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
        self._adjust(placed, -1)
        self._move(placed.node)

    def fits(self, i: int, req: Request) -> bool:
        return self.score(self.node_sid[i], req, request_key(req)) is not None

    def trial(self) -> TrialView:
        """A view for preemption's trials (release and restore, then
        :meth:`TrialView.settle`)."""
        return TrialView(self)

    def release(self, placed: Placed) -> None:
        self._adjust(placed, 1)
        self._move(placed.node)

    def _adjust(self, placed: Placed, sign: int) -> bool:
        """The node's free resources moved by ``sign`` times what ``placed`` holds (1: its
        release, -1: its restoring), its groups left as they were (:meth:`release` and
        :meth:`restore` then regroup it; a trial's step, :class:`TrialView`, does not);
        whether anything of its signature changed."""
        node = self.nodes[placed.node]
        template = self.templates[node.kind]
        share = placed.request.share_milli
        for g in placed.gpus:
            node.gpus[g] += sign * share
        task = placed.request.task
        node.cpu += sign * task.cpu_milli
        memory = task.memory_mib if template.memory_mib_total else 0
        node.memory += sign * memory
        for profile, count in placed.request.mig:
            node.mig[profile] += sign * count
        self.allocated -= sign * share * len(placed.gpus)
        return bool(
            (share and placed.gpus)
            or task.cpu_milli
            or memory
            or any(count for _, count in placed.request.mig)
        )

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


class TrialView:
    """Preemption's trials on a :class:`ReplayCluster` (the ``Trial`` protocol of
    :mod:`~gpuscope.analytics.whatif.preemption`) without regrouping a node at each step.

    Why: a trial releases a node's candidates, restores them one by one and puts the node
    back as it was, and each step moved the node between signature groups (a signature
    computed, a list searched): a third of a replay's time on the demo's week. Here a step
    only changes the node's numbers, :meth:`fits` reads the node's signature as it is then,
    and :meth:`settle` leaves the groups as the steps one by one would have: a node a step
    changed ends last in its group, and a group it was alone in joins again last (its place
    in the order random ties follow). The groups a node passed through in between kept no
    trace of it, so the replay's choices and figures are the same (tested).
    """

    def __init__(self, cluster: ReplayCluster) -> None:
        self._cluster = cluster
        #: the nodes a step changed, in the order of their first change
        self._moved: dict[int, None] = {}

    def release(self, placed: Placed) -> None:
        if self._cluster._adjust(placed, 1):
            self._moved.setdefault(placed.node, None)

    def restore(self, placed: Placed) -> None:
        if self._cluster._adjust(placed, -1):
            self._moved.setdefault(placed.node, None)

    def fits(self, i: int, req: Request) -> bool:
        c = self._cluster
        return c.score(c._sid(c.nodes[i].signature()), req, request_key(req)) is not None

    def settle(self) -> None:
        """The groups as the trials' steps would have left them; every node must be back
        as it was."""
        c = self._cluster
        for i in self._moved:
            if c.nodes[i].signature() != c.sigs[i]:
                raise AssertionError(f"a preemption trial left node {i} changed")
            sid = c.node_sid[i]
            c._leave(sid, i)
            c._join(sid, i)
        self._moved.clear()

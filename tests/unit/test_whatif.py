"""The what-if replay: no policy over-commits a node, and each placement is what an
independent brute-force replay (written here, from the policies' published formulas)
says the policy would choose."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.placement.allocation import NodeState, Task
from gpuscope.analytics.placement.fragmentation import TaskMix, learn_task_mix
from gpuscope.analytics.whatif import POLICIES, Inventory, Placement, PodEvent, Request, replay
from gpuscope.analytics.whatif.events import arrivals, inflate
from gpuscope.analytics.whatif.policies import TIES

MODELS = ("A100", "T4")


@st.composite
def nodes(draw: st.DrawFn) -> tuple[NodeState, ...]:
    out = []
    for i in range(draw(st.integers(1, 5))):
        gpus = draw(st.sampled_from((0, 1, 2, 4, 8)))
        cpu = draw(st.sampled_from((8_000, 32_000, 96_000)))
        memory = draw(st.sampled_from((0, 65_536)))
        out.append(
            NodeState(
                name=f"n{i}",
                gpu_model=draw(st.sampled_from(MODELS)) if gpus else "",
                gpus=(1.0,) * gpus,
                cpu_milli_free=cpu,
                cpu_milli_total=cpu,
                memory_mib_free=memory,
                memory_mib_total=memory,
            )
        )
    return tuple(out)


@st.composite
def task(draw: st.DrawFn) -> Task:
    count = draw(st.sampled_from((0, 1, 1, 1, 2, 4)))
    share = 1.0
    if count == 1:
        share = draw(st.sampled_from((1.0, 0.5, 0.25, 0.3, 0.7)))
    model = draw(st.sampled_from(("", "", "A100", "T4"))) if count else ""
    return Task(
        cpu_milli=draw(st.sampled_from((1_000, 4_000, 16_000))),
        gpu_count=count,
        gpu_share=share if count else 0.0,
        gpu_models=frozenset({model}) if model else frozenset(),
        gpu_spec=model,
        memory_mib=draw(st.sampled_from((0, 8_192, 32_768))),
    )


@st.composite
def histories(draw: st.DrawFn) -> list[PodEvent]:
    tasks = draw(st.lists(task(), min_size=1, max_size=14))
    events = []
    for i, t in enumerate(tasks):
        runs = draw(st.one_of(st.none(), st.integers(1, 6)))
        # distinct end times: no two departures, and no departure and arrival, coincide
        duration = None if runs is None else runs + 0.5 + i * 1e-3
        events.append(
            PodEvent(key=f"p{i}", request=Request(task=t), arrive=float(i), duration=duration)
        )
    return events


# --- the brute force: the policies' formulas, written again from their sources -------


@dataclass
class Free:
    gpus: list[int]
    cpu: int
    memory: int


def _fits(free: Free, node: NodeState, t: Task) -> bool:
    if t.gpu_models and node.gpu_model not in t.gpu_models:
        return False
    if t.cpu_milli > free.cpu:
        return False
    if node.memory_mib_total and t.memory_mib > free.memory:
        return False
    share = round(t.gpu_share * 1000)
    return sum(1 for g in free.gpus if g >= share) >= t.gpu_count


def _frag(free: Free, node: NodeState, mix: TaskMix) -> float:
    total = sum(free.gpus) / 1000
    if total <= 0:
        return 0.0
    value = 0.0
    for m, w in zip(mix.tasks, mix.weights, strict=True):
        if m.gpu_count == 0 or not _fits(free, node, m):
            value += w * total
        else:
            share = round(m.gpu_share * 1000)
            value += w * sum(g for g in free.gpus if g < share) / 1000
    return min(value, total)


def _after(free: Free, t: Task, idx: list[int]) -> Free:
    gpus = list(free.gpus)
    for i in idx:
        gpus[i] -= round(t.gpu_share * 1000)
    return Free(gpus, free.cpu - t.cpu_milli, free.memory - t.memory_mib)


def _k8s(policy: str, free: Free, node: NodeState, t: Task, req: int) -> int:
    pairs = [(node.cpu_milli_total, node.cpu_milli_total - free.cpu + (t.cpu_milli or 100))]
    if node.memory_mib_total:
        used = node.memory_mib_total - free.memory + (t.memory_mib or 200)
        pairs.append((node.memory_mib_total, used))
    if free.gpus:
        pairs.append((len(free.gpus) * 1000, len(free.gpus) * 1000 - sum(free.gpus) + req))
    scores = []
    for cap, used in pairs:
        if used > cap:
            scores.append(0)
        elif policy == "mostallocated":
            scores.append(used * 100 // cap)
        else:
            scores.append((cap - used) * 100 // cap)
    return sum(scores) // len(scores)


def _score(policy: str, free: Free, node: NodeState, t: Task, mix: TaskMix) -> int:
    req = t.gpu_count * round(t.gpu_share * 1000)
    if policy == "random":
        return 0
    if policy == "bestfit":
        waste = 0.5 * (free.cpu - t.cpu_milli) / 128_000 + 0.5 * (sum(free.gpus) - req) / 8000
        return int((1 - waste) * 100)
    if policy == "dotprod":
        dot = free.cpu / 128_000 * t.cpu_milli / 128_000 + sum(free.gpus) / 8000 * req / 8000
        return int(100 * (1 - dot / 2))
    if policy in ("leastallocated", "mostallocated"):
        return _k8s(policy, free, node, t, req)
    assert policy == "fgd"
    before = _frag(free, node, mix)
    share = round(t.gpu_share * 1000)
    if t.gpu_count == 1 and share < 1000:
        options = [[i] for i, g in enumerate(free.gpus) if g >= share]
    else:
        options = [[i for i, g in enumerate(free.gpus) if g >= 1000][: t.gpu_count]]
    return max(
        int(100 / (1 + math.exp(-(before - _frag(_after(free, t, o), node, mix))))) for o in options
    )


def check_replay(inventory: Inventory, events: list[PodEvent], policy: str, drop: bool) -> None:
    """Walk the engine's placements in time order against the brute force: each start is
    on a node where the pod fits with the best score there is; each pod that never started
    fitted nowhere when it arrived; no GPU, CPU or memory ever goes below zero."""
    mix = learn_task_mix([e.request.task for e in events])
    result = replay(inventory, events, policy, seed=3, mix=mix, drop=drop)
    by_key = {e.key: e for e in events}
    position = {e.key: i for i, e in enumerate(events)}
    index = {n.name: n for n in inventory.nodes}
    order = [n.name for n in inventory.nodes]
    free = {
        n.name: Free([1000] * len(n.gpus), n.cpu_milli_total, n.memory_mib_total)
        for n in inventory.nodes
    }
    # (time, 0 departure / 1 start / 2 never started, arrival order, pod, placement)
    actions: list[tuple[float, int, int, PodEvent, Placement | None]] = []
    for p in result.placements:
        seq = position[p.key]
        actions.append((p.start, 1, seq, by_key[p.key], p))
        if p.end is not None:
            actions.append((p.end, 0, seq, by_key[p.key], p))
    started = {p.key for p in result.placements}
    actions += [(e.arrive, 2, position[e.key], e, None) for e in events if e.key not in started]
    steps = sorted(actions, key=lambda a: a[:3])
    start_of = {p.key: p.start for p in result.placements}

    def nothing_waiting_fits(now: float) -> None:
        """With a queue, once a moment's events are done no waiting pod fits anywhere
        (it would have been started on arrival or on the departure that made room)."""
        for e in events:
            if not drop and e.arrive <= now < start_of.get(e.key, math.inf):
                fit = [n for n in free if _fits(free[n], index[n], e.request.task)]
                assert not fit, (policy, e.key, now, fit)

    for step, (when, kind, _, event, placed) in enumerate(steps):
        if step and steps[step - 1][0] < when:
            nothing_waiting_fits(steps[step - 1][0])
        t = event.request.task
        share = round(t.gpu_share * 1000)
        if placed is None:
            fit = [n for n in free if _fits(free[n], index[n], t)]
            assert not fit, f"{event.key} never started although {fit} fit"
            continue
        f = free[placed.node]
        sign = 1 if kind == 0 else -1
        if kind == 1:
            scores = {
                n: _score(policy, free[n], index[n], t, mix)
                for n in free
                if _fits(free[n], index[n], t)
            }
            assert placed.node in scores, f"{event.key} placed where it does not fit"
            assert scores[placed.node] == max(scores.values()), (policy, placed, scores)
            if TIES[policy] == "first":  # the first best node in inventory order
                best = [n for n in order if scores.get(n) == max(scores.values())]
                assert placed.node == best[0], (policy, placed, scores)
            assert len(placed.gpus) == t.gpu_count
        for g in placed.gpus:
            f.gpus[g] += sign * share
        f.cpu += sign * t.cpu_milli
        if index[placed.node].memory_mib_total:
            f.memory += sign * t.memory_mib
        assert min(f.gpus, default=0) >= 0
        assert f.cpu >= 0
        assert f.memory >= 0
    if steps:
        nothing_waiting_fits(steps[-1][0])


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventory=nodes(), events=histories(), drop=st.booleans())
def test_each_placement_is_the_brute_force_choice_and_nothing_is_over_committed(
    policy: str, inventory: tuple[NodeState, ...], events: list[PodEvent], drop: bool
) -> None:
    check_replay(Inventory(inventory), events, policy, drop)


def test_a_queued_pod_starts_when_a_departure_frees_room() -> None:
    node = NodeState(
        name="n0", gpu_model="A100", gpus=(1.0, 1.0), cpu_milli_free=8000, cpu_milli_total=8000
    )
    first = PodEvent("a", Request(Task(cpu_milli=1000, gpu_count=2, gpu_share=1.0)), 0.0, 3600.0)
    second = PodEvent("b", Request(Task(cpu_milli=1000, gpu_count=1, gpu_share=1.0)), 10.0, 60.0)
    queued = replay(Inventory((node,)), [first, second], "leastallocated", until=7200.0)
    assert [(p.key, p.start) for p in queued.placements] == [("a", 0.0), ("b", 3600.0)]
    # b waited 3590 s holding a request for 1 GPU
    assert queued.queued_gpu_hours == pytest.approx(3590 / 3600)
    assert queued.jobs_never_started == 0
    dropped = replay(Inventory((node,)), [first, second], "leastallocated", drop=True, until=7200.0)
    assert [p.key for p in dropped.placements] == ["a"]
    assert dropped.jobs_never_started == 1


def test_bestfit_packs_and_leastallocated_spreads() -> None:
    nodes_ = tuple(
        NodeState(
            name=f"n{i}",
            gpu_model="A100",
            gpus=(1.0,) * 4,
            cpu_milli_free=32_000,
            cpu_milli_total=32_000,
        )
        for i in range(2)
    )
    pods = [
        PodEvent(f"p{i}", Request(Task(cpu_milli=1000, gpu_count=1, gpu_share=1.0)), float(i))
        for i in range(2)
    ]
    packed = replay(Inventory(nodes_), pods, "bestfit")
    spread = replay(Inventory(nodes_), pods, "leastallocated")
    assert len({p.node for p in packed.placements}) == 1
    assert len({p.node for p in spread.placements}) == 2
    # packing leaves a 4-GPU job room; spreading does not
    assert dict(packed.headroom)[4] == 1
    assert dict(spread.headroom)[4] == 0


def test_inflation_reaches_the_share_of_capacity_and_is_seeded() -> None:
    tasks = [Task(cpu_milli=1000, gpu_count=1, gpu_share=0.5), Task(cpu_milli=500)]
    drawn = inflate(tasks, 10, 1.3, seed=7)
    assert sum(t.gpus for t in drawn) >= 13
    assert sum(t.gpus for t in drawn[:-1]) < 13
    assert drawn == inflate(tasks, 10, 1.3, seed=7)
    assert len(arrivals(drawn)) == len(drawn)


@pytest.mark.parametrize("policy", POLICIES)
def test_pods_alike_but_for_their_node_selector_each_go_where_it_allows(policy: str) -> None:
    """Two pods with the same requests select different nodes by label: each starts on its
    own node. A score memoised by request type alone would reuse the first pod's verdict
    for the second and place it against its selector."""
    nodes = tuple(
        NodeState(
            name=f"n{i}",
            gpu_model="A100",
            gpus=(1.0,) * 8,
            cpu_milli_free=64_000,
            cpu_milli_total=64_000,
            labels=(("team", team),),
        )
        for i, team in enumerate(("a", "b"))
    )

    def pod(key: str, team: str, at: float) -> PodEvent:
        task = Task(cpu_milli=1_000, gpu_count=1, gpu_share=1.0, node_terms=(f"team|In|{team}",))
        return PodEvent(key=key, request=Request(task=task), arrive=at)

    events = [pod("on-a", "a", 0.0), pod("on-b", "b", 1.0), pod("on-a-2", "a", 2.0)]
    result = replay(Inventory(nodes), events, policy, seed=1)
    assert {p.key: p.node for p in result.placements} == {
        "on-a": "n0",
        "on-b": "n1",
        "on-a-2": "n0",
    }

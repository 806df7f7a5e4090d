"""The capacity what-if on hand-made windows whose answers are known by hand."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from gpuscope.analytics.placement.allocation import NodeState, Task
from gpuscope.analytics.whatif.capacity import (
    _least,
    capacity_whatif,
    fewest_gpus,
    figures,
    first_seed,
    size_class,
)
from gpuscope.analytics.whatif.capacity_change import (
    AddNodes,
    Change,
    apply_change,
    parse_add,
    parse_mig,
    parse_selector,
    physical_gpus,
)
from gpuscope.analytics.whatif.events import Inventory, PodEvent, Request
from gpuscope.analytics.whatif.history import History
from gpuscope.collector.cluster.inventory_records import NodeInfo
from gpuscope.core.errors import UserError

HOUR = 3600.0
WEEK = 7 * 24 * HOUR


def node(name: str, model: str, gpus: int, **labels: str) -> NodeState:
    return NodeState(
        name=name, pool=model, gpu_model=model, gpus=(1.0,) * gpus, cpu_milli_free=64_000,
        cpu_milli_total=64_000, labels=tuple(sorted(labels.items())),
    )  # fmt: skip


def ev(key: str, gpus: int, at: float, hours: float | None, share: float = 1.0) -> PodEvent:
    task = Task(gpu_count=gpus, gpu_share=share)
    return PodEvent(key, Request(task), at, None if hours is None else hours * HOUR)


def window(nodes: list[NodeState], events: list[PodEvent]) -> History:
    return History(Inventory(tuple(nodes)), (), tuple(events), 0.0, WEEK)


def one_node_queue() -> History:
    """One 8-GPU node; a second 8-GPU job waits 10 h for the first to end: 80 GPU-h."""
    return window([node("a1", "A", 8)], [ev("first", 8, 0, 10), ev("second", 8, 0, 2)])


def test_one_more_node_of_the_model_clears_the_queue_exactly() -> None:
    cap = capacity_whatif(one_node_queue(), Change(add=(parse_add("A:1"),)), search=True)
    base, new = cap["baseline"], cap["changed"]
    assert base["queued_gpu_hours"] == pytest.approx(80.0)
    assert base["mean_wait_hours"]["5-8"] == {"jobs": 2, "never_started": 0, "mean_wait_hours": 5.0}
    assert base["gpus"] == 8 and new["gpus"] == 16
    assert base["mean_wait_hours_all"] == 5.0
    assert new["queued_gpu_hours"] == 0.0
    assert new["mean_wait_hours"]["5-8"]["mean_wait_hours"] == 0.0
    assert cap["difference"]["queued_gpu_hours"] == pytest.approx(-80.0)
    # both cuts need exactly one more node: 8 GPUs
    for key in ("fewest_gpus_half", "fewest_gpus_90"):
        assert cap[key] == {
            "model": "A", "nodes": 1, "gpus_per_node": 8, "gpus": 8, "queued_gpu_hours": 0.0,
            "jobs_never_started": 0, "mean_wait_hours_all": 0.0,
            # 8 GPUs for 10 h and 8 for 2 h over the week's 168 h
            "mean_allocated_gpus": round(8 * 12 / 168, 3),
        }  # fmt: skip
    assert cap["search"]["complete"] is True


def two_models() -> History:
    """An 8-GPU A node and a 4-GPU B node. An 8-GPU job holds A and a 4-GPU job holds B for
    10 h; two more 4-GPU jobs arrive together and wait for A to free: 2 x 4 x 10 h."""
    events = [ev("big", 8, 0, 10), ev("four1", 4, 1, 10), ev("four2", 4, 2, 10),
              ev("four3", 4, 2, 10)]  # fmt: skip
    return window([node("a1", "A", 8), node("b1", "B", 4)], events)


def test_search_answers_half_with_the_smaller_node_and_ninety_with_fewer_nodes() -> None:
    history = two_models()
    cap = capacity_whatif(history, Change(), search=True)
    base = cap["baseline"]["queued_gpu_hours"]
    assert base == pytest.approx(2 * 4 * (10 * HOUR - 2) / HOUR, abs=1e-3)
    # half: one 4-GPU B node starts one of the two waiting jobs (4 GPUs < A's 8)
    half = cap["fewest_gpus_half"]
    assert (half["model"], half["nodes"], half["gpus"]) == ("B", 1, 4)
    assert half["queued_gpu_hours"] == pytest.approx(base / 2, abs=1e-3)
    # 90 %: both must start: two B nodes or one A node, 8 GPUs either way; one node wins
    ninety = cap["fewest_gpus_90"]
    assert (ninety["model"], ninety["nodes"], ninety["gpus"]) == ("A", 1, 8)
    assert ninety["queued_gpu_hours"] == 0.0
    assert cap["search"]["models"]["B"]["fewest_gpus_90"] is None or (
        cap["search"]["models"]["B"]["fewest_gpus_90"]["gpus"] == 8
    )


def test_nothing_queued_needs_no_gpu() -> None:
    history = window([node("a1", "A", 8)], [ev("one", 4, 0, 1), ev("two", 4, 0, 1)])
    cap = capacity_whatif(history, Change(), search=True)
    assert cap["baseline"]["queued_gpu_hours"] == 0.0
    assert cap["fewest_gpus_half"]["gpus"] == 0
    assert cap["search"]["replays"] == 0  # the baseline's replay answers it


def test_a_job_no_node_shape_fits_has_no_answer() -> None:
    """A 16-GPU job fits no 8-GPU node however many are added: never started, no answer."""
    history = window([node("a1", "A", 8)], [ev("huge", 16, 0, 1)])
    cap = capacity_whatif(history, Change(), search=True)
    assert cap["baseline"]["jobs_never_started"] == 1
    assert cap["baseline"]["mean_wait_hours"][">8"]["never_started"] == 1
    assert cap["fewest_gpus_half"] is None and cap["fewest_gpus_90"] is None
    # up to one node (one GPU pod at most present), then the 90 % cut is not tried again
    assert cap["search"]["max_nodes"] == 1 and cap["search"]["replays"] == 1


def test_removing_the_node_a_job_needs_leaves_it_waiting_to_the_end() -> None:
    history = window(
        [node("a1", "A", 8, rack="r1"), node("a2", "A", 8, rack="r2")],
        [ev("x", 8, 0, 1), ev("y", 8, 0, 1)],
    )
    cap = capacity_whatif(history, Change(remove=(parse_selector("rack=r2"),)))
    assert cap["baseline"]["queued_gpu_hours"] == 0.0
    # y starts when x ends, an hour later: 8 GPU-h
    assert cap["changed"]["queued_gpu_hours"] == pytest.approx(8.0)
    assert cap["changed"]["nodes"] == 1
    assert cap["difference"]["gpus"] == -8


def test_size_classes() -> None:
    assert size_class(ev("f", 1, 0, 1, share=0.5)) == "fraction"
    assert size_class(ev("m", 0, 0, 1)) is None
    mig = PodEvent("mig", Request(Task(), mig=(("1g.10gb", 1),)), 0.0)
    assert size_class(mig) == "fraction"
    assert [size_class(ev("w", n, 0, 1)) for n in (1, 2, 4, 5, 8, 9)] == [
        "1", "2-4", "2-4", "5-8", "5-8", ">8"
    ]  # fmt: skip


def test_mean_wait_counts_never_started_to_the_window_end() -> None:
    # one 1-GPU node: a holds it all week; b arrives at 24 h and never starts
    history = window([node("a1", "A", 1)], [ev("a", 1, 0, None), ev("b", 1, 24 * HOUR, 1)])
    f = figures(history, first_seed(0.95)(history, "leastallocated"))
    assert f["mean_wait_hours"]["1"] == {
        "jobs": 2, "never_started": 1, "mean_wait_hours": pytest.approx((WEEK / HOUR - 24) / 2)
    }  # fmt: skip
    assert f["queued_gpu_hours"] == pytest.approx(WEEK / HOUR - 24)
    assert f["mean_allocated_gpus"] == pytest.approx(1.0)


def test_galloping_bisection_finds_the_least_count_of_any_falling_queue() -> None:
    rng = random.Random(5)
    for _ in range(200):
        steps = sorted(rng.sample(range(1, 300), 5))
        values = {k: 100.0 - 20 * sum(1 for s in steps if s <= k) for k in range(0, 301)}
        target = rng.choice([60.0, 40.0, 10.0, 0.0])
        calls: list[int] = []

        def queued(k: int, values: dict[int, float] = values, calls: list[int] = calls) -> float:
            calls.append(k)
            return values[k]

        want = next((k for k in range(0, 301) if values[k] <= target), None)
        assert _least(queued, target, 300) == want
        assert len(set(calls)) <= 2 * 9 + 2  # log-many replays, not a scan


def test_bisection_to_a_resolution_meets_the_target_close_to_the_least_count() -> None:
    """With a resolution of 2 % the answer still meets the target, is within 2 % (at least
    one node) of the least count, and takes fewer replays where the count is large; below
    100 nodes it is exact."""
    rng = random.Random(11)
    for _ in range(200):
        steps = sorted(rng.sample(range(1, 5000), 5))
        values = {k: 100.0 - 20 * sum(1 for s in steps if s <= k) for k in range(0, 5001)}
        target = rng.choice([60.0, 40.0, 10.0, 0.0])
        exact: list[int] = []
        coarse: list[int] = []

        def asked(calls: list[int], values: dict[int, float] = values) -> Any:
            return lambda n: calls.append(n) or values[n]

        want = _least(asked(exact), target, 5000)
        got = _least(asked(coarse), target, 5000, 0, 0.02)
        assert want is not None and got is not None
        assert values[got] <= target
        assert want <= got <= want + max(1, int(0.02 * got))
        if want < 100:
            assert got == want
        assert len(set(coarse)) <= len(set(exact))


def test_a_queue_that_rose_between_two_gallop_steps_is_probed_between_them() -> None:
    """The demo's week under leastallocated (queued GPU-hours replayed with --add-nodes,
    2026-12-07): 8 nodes just miss the 90 % cut, 16 to 32 queue twice as much (the new
    nodes take small pods), 64 meet it; 10 is the least count that does, and galloping on
    from 8 to 16, 32 and 64 then bisecting between 32 and 64 answered 36."""
    known = {0: 26669.3, 1: 25115.9, 2: 10104.4, 3: 4970.8, 4: 4499.5, 8: 2748.3, 9: 2700.0,
             10: 2562.4, 11: 2500.0, 12: 2426.5, 13: 2400.0, 14: 2296.8, 15: 2300.0,
             16: 5241.6, 32: 5198.1, 34: 5187.2, 35: 4341.6, 36: 2474.2, 40: 2140.6,
             48: 1866.8, 64: 330.1}  # fmt: skip

    def queued(k: int) -> float:  # the counts not replayed: as the nearest below
        return known[max(x for x in known if x <= k)]

    half = _least(queued, 26669.3 * 0.5, 64)
    assert half == 2  # a falling queue: as before
    # the deeper cut's search starts from one below the first cut's answer, as
    # fewest_gpus runs it: 2, 4, 8 (just over), 16 (twice as much), ...
    assert _least(queued, 26669.3 * 0.1, 64, half - 1) == 10
    assert _galloping_bisection(queued, 26669.3 * 0.1, 64, half - 1) == 36  # as it was


def _galloping_bisection(queued: Any, target: float, bound: int, lo: int = 0) -> int | None:
    """The search before it probed between gallop steps (the reference it must never do
    worse than)."""
    if queued(lo) <= target:
        return lo
    step, hi = 1, min(bound, lo + 1)
    while queued(hi) > target:
        if hi >= bound:
            return None
        lo, step = hi, step * 2
        hi = min(bound, hi + step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if queued(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def test_a_queue_that_is_not_falling_gets_an_answer_that_meets_the_cut_never_a_larger_one() -> None:
    """Random queues falling with bumps (a spreading policy queuing more with more nodes):
    the answer meets the target, is never above the plain galloping bisection's, and is the
    least count meeting it whenever that count lies between two gallop steps the queue
    rose across with at most SCAN counts between them."""
    rng = random.Random(7)
    found_lower = 0
    for _ in range(300):
        bound = rng.choice([20, 64, 200])
        values = [100.0 * 0.93**k for k in range(bound + 1)]
        for _ in range(rng.randint(1, 3)):  # bumps: a stretch of counts queuing more
            a = rng.randint(1, bound)
            for k in range(a, min(bound + 1, a + rng.randint(1, 40))):
                values[k] += rng.uniform(5, 60)
        target = rng.uniform(0.5, 60.0)
        calls: list[int] = []

        def queued(k: int, values: list[float] = values, calls: list[int] = calls) -> float:
            calls.append(k)
            return values[k]

        got = _least(queued, target, bound)
        plain = _galloping_bisection(lambda k, v=values: v[k], target, bound)
        if plain is None:
            continue  # the plain search found none; a found one must still meet it
        assert got is not None and values[got] <= target
        assert got <= plain
        found_lower += got < plain
        least = next(k for k in range(bound + 1) if values[k] <= target)
        steps = [0, 1]
        while steps[-1] < bound:
            steps.append(min(bound, steps[-1] + 2 ** (len(steps) - 1)))
        for lo, hi in itertools.pairwise(steps):
            rose_across = lo < least < hi and hi - lo - 1 <= 8 and values[hi] > values[lo]
            if rose_across and all(values[s] > target for s in steps if s <= lo):
                assert got == least
    assert found_lower > 0  # the probing between steps mattered somewhere


def test_search_stops_at_its_replay_budget() -> None:
    history = two_models()
    run = first_seed(0.95)
    base = run(history, "leastallocated")
    out = fewest_gpus(history, "leastallocated", base.queued_gpu_hours, run, base, max_replays=1)
    assert out["search"]["replays"] == 1
    assert out["search"]["complete"] is False


def test_unknown_policy_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown policy"):
        capacity_whatif(one_node_queue(), Change(), "nosuch")


# --- the change itself ----------------------------------------------------------------


def test_added_nodes_copy_the_models_most_common_shape() -> None:
    nodes = [node("a1", "A", 8, rack="r1"), node("a2", "A", 8, rack="r1"), node("a3", "A", 4)]
    inv, _ = apply_change(Inventory(tuple(nodes)), (), Change(add=(AddNodes("A", 2),)))
    added = inv.nodes[3:]
    assert [n.name for n in added] == ["whatif-a-1", "whatif-a-2"]
    assert all(len(n.gpus) == 8 and dict(n.labels) == {"rack": "r1"} for n in added)
    inv, _ = apply_change(Inventory(tuple(nodes)), (), Change(add=(parse_add("A:1:4"),)))
    assert len(inv.nodes[-1].gpus) == 4 and inv.nodes[-1].labels == ()
    # a count no node has: the most common shape, CPU scaled to the GPUs
    inv, _ = apply_change(Inventory(tuple(nodes)), (), Change(add=(parse_add("A:1:2"),)))
    assert len(inv.nodes[-1].gpus) == 2 and inv.nodes[-1].cpu_milli_total == 16_000


def test_node_records_follow_the_change() -> None:
    nodes = (node("a1", "A", 8), node("a2", "A", 8))
    infos = (NodeInfo("a1", "A", 8, labels={"kubernetes.io/hostname": "a1"}),
             NodeInfo("a2", "A", 8, labels={"kubernetes.io/hostname": "a2"}))  # fmt: skip
    change = Change(add=(parse_add("A:1"),), remove=(parse_selector("a2"),))
    inv, out = apply_change(Inventory(nodes), infos, change)
    assert [n.name for n in inv.nodes] == ["a1", "whatif-a-1"]
    assert [(i.name, dict(i.labels)) for i in out] == [
        ("a1", {"kubernetes.io/hostname": "a1"}),
        ("whatif-a-1", {"kubernetes.io/hostname": "whatif-a-1"}),
    ]


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("rack=r1", {"a1", "a2"}),
        ("rack==r1", {"a1", "a2"}),
        ("rack!=r1", {"b1", "b2"}),
        ("rack in (r2, r3)", {"b1"}),
        ("rack notin (r1)", {"b1", "b2"}),
        ("rack", {"a1", "a2", "b1"}),
        ("!rack", {"b2"}),
        ("rack=r1,tier=fast", {"a2"}),
        ("b2", {"b2"}),  # a node's name
    ],
)
def test_selector_is_kubectls(text: str, selected: set[str]) -> None:
    nodes = (node("a1", "A", 8, rack="r1"), node("a2", "A", 8, rack="r1", tier="fast"),
             node("b1", "B", 4, rack="r2"), node("b2", "B", 4))  # fmt: skip
    inv, _ = apply_change(Inventory(nodes), (), Change(remove=(parse_selector(text),)))
    assert {n.name for n in nodes} - {n.name for n in inv.nodes} == selected


def test_mig_layout_splits_and_joins_a_pools_gpus() -> None:
    nodes = (node("a1", "A", 8), node("b1", "B", 4))
    inv, _ = apply_change(Inventory(nodes), (), Change(mig=(parse_mig("A:3g.40gb=2,1g.10gb"),)))
    split = inv.nodes[0]
    assert split.gpus == () and dict(split.mig_total) == {"1g.10gb": 8, "3g.40gb": 16}
    assert physical_gpus(split) == 8 and inv.nodes[1] == nodes[1]
    assert inv.gpu_capacity == 4  # MIG-split GPUs take no whole-GPU pod
    back, _ = apply_change(inv, (), Change(mig=(parse_mig("A:none"),)))
    assert back.nodes[0].gpus == (1.0,) * 8 and back.nodes[0].mig_total == ()


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_add, "H100", "expected MODEL:COUNT"),
        (parse_add, "H100:0", "COUNT must be"),
        (parse_add, "H100:2:99", "GPUS must be"),
        (parse_selector, "rack in r1", "not a selector term"),
        (parse_selector, "", "expected a label selector"),
        (parse_mig, "A", "expected POOL:"),
        (parse_mig, "A:4g.40gb=2", "compute slices"),
        (parse_mig, "A:big", "not a MIG profile"),
        (parse_mig, "A:3g.40gb=x", "expected PROFILE=N"),
    ],
)
def test_bad_change_text_is_one_user_error(parse: object, text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse(text)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (Change(add=(AddNodes("Z", 1),)), "no schedulable 'Z' node to copy; .*A, B"),
        (Change(remove=(parse_selector("rack=none"),)), "selects no node"),
        (Change(mig=(parse_mig("C:none"),)), "no GPU node in pool 'C'"),
    ],
)
def test_a_change_the_cluster_cannot_take_is_a_user_error(change: Change, message: str) -> None:
    nodes = (node("a1", "A", 8), node("b1", "B", 4))
    with pytest.raises(UserError, match=message):
        apply_change(Inventory(nodes), (), change)


def test_the_search_bound_is_the_most_gpu_pods_present_at_once() -> None:
    from gpuscope.analytics.whatif.capacity import peak_pods

    # a and b overlap, c starts when a ends (not counted together), d asks no GPU
    events = [ev("a", 1, 0, 2), ev("b", 1, HOUR, None), ev("c", 1, 2 * HOUR, 1),
              PodEvent("d", Request(Task(cpu_milli=100)), 0.0)]  # fmt: skip
    assert peak_pods(window([node("a1", "A", 1)], events)) == 2


def test_the_setting_names_the_replays_policies_and_defaults_to_the_calibrated_one() -> None:
    """``analytics.whatif_policy`` takes exactly the replay's policy names (a name the
    replay does not know is a config error, not a failure at the first what-if) and
    defaults to kube-scheduler's default scoring, the policy calibration assumes."""
    from typing import get_args

    from gpuscope.analytics.whatif.calibration import DEFAULT_POLICY
    from gpuscope.analytics.whatif.policies import POLICIES
    from gpuscope.core.settings import AnalyticsSettings

    field = AnalyticsSettings.model_fields["whatif_policy"]
    assert set(get_args(field.annotation)) == set(POLICIES)
    assert AnalyticsSettings().whatif_policy == DEFAULT_POLICY

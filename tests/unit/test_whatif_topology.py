"""The topology-aware what-if: Kueue TAS BestFit and KAI's fullest-domain choice as their
docs describe them, and on the documented synthetic trace with pod groups the aware
policies start more multi-node jobs inside one leaf than topology-blind ones."""

from __future__ import annotations

import pytest

from gpuscope.analytics.whatif.topology import (
    TOPOLOGY_POLICIES,
    GangJob,
    TopoNode,
    bestfit_nodes,
    choose_domain,
    replay_gangs,
    synthetic_trace,
)


def test_bestfit_inside_a_domain_follows_the_kueue_kep_example() -> None:
    """KEP-2724: nodes that hold 3, 3, 2 and 1 pods, a PodSet of 7: BestFit takes the two
    3s, then the node that fits the last pod exactly (the 1), not the 2."""
    got = bestfit_nodes({"a": 3, "b": 3, "c": 2, "d": 1}, 7)
    assert sorted(got) == ["a", "a", "a", "b", "b", "b", "d"]
    assert bestfit_nodes({"a": 1}, 2) == []


def test_domain_choice_bestfit_tightest_kai_fullest() -> None:
    free = {"a1": 8, "a2": 8, "a3": 8, "b1": 8, "b2": 8, "b3": 3}
    domains = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"]}
    job = GangJob("j", 0, 1, 2, 8)
    # a holds 3 pods, b holds 2: BestFit picks the tightest that still fits (b)
    assert choose_domain(free, domains, job, "tas-bestfit") == "b"
    # KAI: fewest free GPUs relative to the request: b (19) before a (24)
    assert choose_domain(free, domains, job, "kai-fullest") == "b"
    assert choose_domain(free, domains, GangJob("big", 0, 1, 4, 8), "tas-bestfit") == ""


def test_a_gang_waits_until_one_domain_holds_it() -> None:
    nodes = [TopoNode("a1", 8, "a"), TopoNode("b1", 8, "b")]
    jobs = [
        GangJob("single", 0, 100, 1, 8),  # takes a1 until t=100
        GangJob("pair", 10, 50, 2, 8),  # never fits one leaf of one node
        GangJob("late", 20, 10, 1, 8),
    ]
    aware = replay_gangs(nodes, jobs, "tas-bestfit")
    assert aware.multi_node_started == 0 and aware.started == 2
    blind = replay_gangs(nodes, jobs, "leastallocated")
    assert blind.multi_node_spread == 1  # started at t=100, across both leaves
    assert blind.waits["pair"] == 90


def test_topology_aware_policies_start_more_multi_node_jobs_inside_one_leaf() -> None:
    nodes, jobs = synthetic_trace()
    results = {p: replay_gangs(nodes, jobs, p) for p in TOPOLOGY_POLICIES}
    assert sum(1 for j in jobs if j.pods >= 2) >= 50
    blind = max(results[p].multi_node_in_one_domain for p in ("leastallocated", "mostallocated"))
    for p in ("tas-bestfit", "kai-fullest"):
        r = results[p]
        assert r.multi_node_spread == 0
        assert r.multi_node_in_one_domain > blind, (p, r, blind)


def test_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown policy"):
        replay_gangs([], [], "fifo")


def test_a_preferred_gang_starts_spread_when_no_domain_holds_it() -> None:
    """Not required: the aware policies keep it in one domain where one holds it, else start
    it spread (as Kueue's preferred mode climbs up to the whole cluster); a required one
    waits."""
    nodes = [TopoNode("a1", 8, "a"), TopoNode("b1", 8, "b")]
    for policy in ("tas-bestfit", "kai-fullest"):
        preferred = replay_gangs(nodes, [GangJob("pair", 0, 10, 2, 8, required=False)], policy)
        assert (preferred.multi_node_started, preferred.multi_node_spread) == (1, 1)
        required = replay_gangs(nodes, [GangJob("pair", 0, 10, 2, 8)], policy)
        assert required.multi_node_started == 0


def test_until_ends_the_replay_and_counts_the_wait_of_those_never_started() -> None:
    nodes = [TopoNode("a1", 8, "a"), TopoNode("a2", 8, "a")]
    jobs = [GangJob("long", 0, float("inf"), 1, 8), GangJob("pair", 3600, 60, 2, 8)]
    r = replay_gangs(nodes, jobs, "tas-bestfit", until=7200)
    assert (r.multi_node_started, r.as_dict()["multi_node_never_started"]) == (0, 1)
    assert r.multi_node_queued_hours == 1.0
    assert r.started == 1


def test_a_high_priority_gang_preempts_lower_priority_jobs_to_start() -> None:
    """Issue 35: the demo's 8-node pre-training job really started by preempting the
    background; without preemption the gang replay never started it. Four 8-GPU nodes full
    of 1-GPU jobs at priority -20: a 2x8 job at priority 0 preempts two nodes' worth (the
    victims' replacements wait), one at preemptionPolicy Never waits, and one that must
    stay in one domain does not preempt here."""
    from gpuscope.analytics.whatif.topology import GangJob, TopoNode, replay_gangs

    nodes = [TopoNode(f"n{i}", 8, f"leaf-{i // 2}") for i in range(4)]
    small = [GangJob(f"s{i}", float(i), 10_000.0, 1, 1, priority=-20) for i in range(32)]
    for preempts, required, started in ((True, False, 1), (False, False, 0), (True, True, 0)):
        big = GangJob("big", 100.0, 3_600.0, 2, 8, required=required, priority=0,
                      preempts=preempts)  # fmt: skip
        r = replay_gangs(nodes, [*small, big], "leastallocated", until=5_000.0)
        assert r.multi_node_started == started, (preempts, required, r)
        assert r.started == 32 + started  # the replacements are not new jobs

"""Preemption's trials without regrouping at each step (replay_cluster.TrialView): the same
replay, choice for choice, as trials that move the node between signature groups at every
release and restore (what the replay did before, kept here as the reference)."""

from __future__ import annotations

import random
from dataclasses import asdict

import pytest

from gpuscope.analytics.placement.allocation import NodeState, Task
from gpuscope.analytics.whatif import replay_cluster
from gpuscope.analytics.whatif.engine import replay
from gpuscope.analytics.whatif.events import Inventory, PodEvent, Request
from gpuscope.analytics.whatif.replay_cluster import Placed, ReplayCluster


class EagerTrial:
    """The reference: every trial step through the cluster's own release and restore,
    which regroup the node at once."""

    def __init__(self, cluster: ReplayCluster) -> None:
        self.cluster = cluster

    def release(self, placed: Placed) -> None:
        self.cluster.release(placed)

    def restore(self, placed: Placed) -> None:
        self.cluster.restore(placed)

    def fits(self, i: int, req: Request) -> bool:
        return self.cluster.fits(i, req)

    def settle(self) -> None:
        pass


class UnsettledTrial(replay_cluster.TrialView):
    """The trial view with its settling left out: what the test must tell apart."""

    def settle(self) -> None:
        self._moved.clear()


def _eager(cluster: ReplayCluster) -> EagerTrial:  # a method: a class is not bound
    return EagerTrial(cluster)


def _unsettled(cluster: ReplayCluster) -> UnsettledTrial:
    return UnsettledTrial(cluster)


def _week(seed: int) -> tuple[Inventory, list[PodEvent]]:
    """Nodes of a few alike shapes (so many share a signature and ties are random) filled
    by low-priority pods, then higher-priority ones that must preempt to start."""
    rng = random.Random(seed)
    nodes = tuple(
        NodeState(
            name=f"n{i}",
            gpu_model="A100",
            gpus=(1.0,) * rng.choice((4, 8)),
            cpu_milli_free=64_000,
            cpu_milli_total=64_000,
            memory_mib_free=rng.choice((0, 262_144)),
            memory_mib_total=262_144,
        )
        for i in range(rng.randint(4, 10))
    )
    events = []
    t = 0.0
    for j in range(rng.randint(60, 140)):
        t += rng.choice((0.0, 30.0, 300.0))
        count = rng.choice((1, 1, 1, 2, 4, 8))
        share = rng.choice((1.0, 1.0, 0.5, 0.25)) if count == 1 else 1.0
        task = Task(
            cpu_milli=rng.choice((0, 1_000, 4_000)),
            gpu_count=count,
            gpu_share=share,
            memory_mib=rng.choice((0, 16_384)),
        )
        events.append(
            PodEvent(
                key=f"p{j}",
                request=Request(task),
                arrive=t,
                duration=rng.choice((None, 600.0, 3_600.0, 20_000.0)),
                priority=rng.choice((-20, -20, 0, 0, 100)),
                preempts=rng.random() < 0.9,
            )
        )
    return Inventory(nodes), events


def _run(seed: int, policy: str) -> dict[str, object]:
    inventory, events = _week(seed)
    return asdict(replay(inventory, events, policy, seed=seed, until=events[-1].arrive + 1e5))


@pytest.mark.parametrize("policy", ["leastallocated", "mostallocated", "random", "fgd"])
def test_trials_without_regrouping_replay_what_regrouping_each_step_replays(
    policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 random weeks a policy with preemption (random ties for three of the four):
    placements, timeline, queue and fragmentation figures equal, field for field."""
    seeds = range(40)
    fast = [_run(s, policy) for s in seeds]
    monkeypatch.setattr(ReplayCluster, "trial", _eager)
    eager = [_run(s, policy) for s in seeds]
    assert sum(r["jobs_preempted"] for r in eager) > 40  # type: ignore[misc]
    assert fast == eager


def test_the_comparison_sees_a_trial_that_does_not_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without settle (nodes left where they were in their groups) some random tie goes
    elsewhere: the test above would fail on a view that forgot the regrouping."""
    seeds = range(40)
    monkeypatch.setattr(ReplayCluster, "trial", _eager)
    eager = [_run(s, "leastallocated") for s in seeds]
    monkeypatch.setattr(ReplayCluster, "trial", _unsettled)
    unsettled = [_run(s, "leastallocated") for s in seeds]
    assert unsettled != eager

"""Minimal cases of KAI-Scheduler's reclaim (docs/analytics.md, Queues, "reclaim"): a
queue is bounded by its fair share, not its deserved quota, and the victims' queue is
weighed before each victim leaves."""

from __future__ import annotations

from tests.unit.test_queue_model import _judge, _kai, _kai_pod

#: a and b each deserve 2 of 12 GPUs; b weighs twice as much over quota.
QUEUES = [_kai("a", 2, weight=1, parent=""), _kai("b", 2, weight=2, parent="")]
#: a holds 10 in three preemptible jobs, b its 2: no GPU is free.
RUNNING = [
    _kai_pod("a", "a1", 4, "n1", minute=0),
    _kai_pod("a", "a2", 4, "n1", minute=1),
    _kai_pod("a", "a3", 2, "n1", minute=2),
    _kai_pod("b", "b1", 2, "n1", minute=3),
]


def test_a_queue_beyond_its_quota_but_within_its_fair_share_reclaims() -> None:
    """Fair shares (a asks 10, b 6): 6 and 6. b with 4 more holds 6, within its share
    though beyond its deserved 2 (gpuscope said "over quota, waits" before): the newest of
    a's jobs go until 4 GPUs are free (a3, then a2), a staying above its share of 6
    before each."""
    [v] = _judge(QUEUES, [*RUNNING, _kai_pod("b", "wait", 4, None, minute=9)],
                 free_gpus=0, capacity_gpus=12)  # fmt: skip
    assert v.rule == "kai.reclaim"
    assert sorted(j.job for j in v.victims) == ["Job/a2", "Job/a3"]


def test_a_request_beyond_the_fair_share_waits() -> None:
    """b asking 8 more: fair shares 5 (a) and 7 (b); b would hold 10, beyond 7: no reclaim."""
    [v] = _judge(QUEUES, [*RUNNING, _kai_pod("b", "wait", 8, None, minute=9)],
                 free_gpus=0, capacity_gpus=12)  # fmt: skip
    assert v.rule == "kai.over_fair_share" and v.victims == ()

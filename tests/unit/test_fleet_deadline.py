"""A fleet cycle's deadline, on an injected clock: a shard whose turn comes after the
deadline is not asked, and is shown ``not_asked`` (not ``timed_out``), so the next cycle
asks it first.

Was (seen once in a clean run of tests/integration/test_fleet_hung_engine.py, and here on
every run): the pool started each queued shard as soon as a worker was free, the shard
entered "asking", its query failed at once on the passed deadline, and it was shown
``timed_out`` as if the engine had not answered it; no shard was left ``not_asked``.
"""

from __future__ import annotations

import threading

from gpuscope.collector.querying.fleet import FleetSource
from gpuscope.collector.querying.fleet_questions import BUCKET_S, shard_of
from gpuscope.collector.querying.query_client import DeadlinePassed

NOW = 1_800_000_000.0
SHARDS = 6
NODES = [f"gpu-node-{i:03d}" for i in range(60)]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class SlowNodeList:
    """An engine whose node list answers when the cycle's deadline has passed; a shard's
    query is recorded and fails on the deadline, as the real client fails then."""

    shown_url = "http://engine"

    def __init__(self, clock: Clock, deadline: float) -> None:
        self.clock, self.deadline = clock, deadline
        self.asked: list[str] = []
        self.lock = threading.Lock()

    def query(self, path: str, params: dict[str, str], **_: object) -> dict[str, object]:
        q = params["query"]
        if q.startswith("count by (node)"):
            self.clock.t = self.deadline + 1.0  # the node list took the cycle's time
            at = float(params["start"])
            result = [{"metric": {"node": n}, "values": [[at, "1"]]} for n in NODES]
            return {"resultType": "matrix", "result": result}
        with self.lock:
            self.asked.append(q)
        raise DeadlinePassed("query API http://engine: cycle deadline passed")


def test_shards_whose_turn_comes_after_the_deadline_are_not_asked() -> None:
    clock = Clock()
    deadline = clock.t + 10.0
    engine = SlowNodeList(clock, deadline)
    src = FleetSource(engine, shards=SHARDS, concurrency=4, monotonic=clock)  # type: ignore[arg-type]
    for w in src.windows.values():
        w.cursor = NOW - 3 * BUCKET_S - BUCKET_S
    assert len({shard_of(n, SHARDS) for n in NODES}) == SHARDS  # every shard has nodes

    out = src.cycle(NOW, lambda *_: None, deadline=deadline)

    assert engine.asked == []
    assert {st.state for st in src.state.values()} == {"not_asked"}
    # the cycle says first what it came to as a whole
    assert f"{SHARDS} of {SHARDS} shards unanswered" in out.errors[0], out.errors
    # none counts as asked in this cycle, so the next cycle's order is theirs
    assert all(st.asked_in != src.cycles for st in src.state.values())

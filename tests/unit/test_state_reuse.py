"""state_from_records(reuse=...) builds the same state as without the cache.

The weekly report builds one state per inventory change and shares a cache of node
states between them (gpuscope/analytics/report/states.py): a node whose record, pods and
their GPU indices are the very objects of an earlier state is not rebuilt. These tests
hold each state built through the cache equal to the state built afresh, over random
sequences where records recur, change or go, and where GPU indices move.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.placement.allocation import StateReuse, state_from_records
from tests.unit.test_placement_reference import states


@settings(
    max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(first=states(), data=st.data())
def test_states_through_the_cache_equal_states_built_afresh(first: Any, data: Any) -> None:
    _, _, _, infos, pods, indices = first
    reuse = StateReuse()
    assert state_from_records(infos, pods, indices, reuse=reuse) == state_from_records(
        infos, pods, indices
    )
    for _ in range(3):
        # the next state: the same record objects where nothing changed, some pods gone,
        # one pod's new version (a new object), GPU indices moved or forgotten
        kept = [p for p in pods if data.draw(st.booleans(), label="keep") or not p.node]
        if kept and data.draw(st.booleans(), label="change one"):
            i = data.draw(st.integers(0, len(kept) - 1), label="which")
            kept[i] = dataclasses.replace(kept[i], cpu_milli=kept[i].cpu_milli + 1000)
        moved = {k: list(v) for k, v in indices.items() if data.draw(st.booleans(), label="idx")}
        for v in moved.values():
            if v and data.draw(st.booleans(), label="move"):
                v[0] = (v[0] + 1) % 8
        got = state_from_records(infos, kept, moved, reuse=reuse)
        assert got == state_from_records(infos, kept, moved)
        pods, indices = kept, moved

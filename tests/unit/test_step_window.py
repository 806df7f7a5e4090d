"""The query window (gpuscope/collector/querying/step_window.py) against a reference written apart:
whatever the cycle times (jitter, late cycles, pauses), every step the engine has is asked
exactly once, none inside the latency offset, none beyond the lag bound; a refused size is
never asked again."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.collector.querying.step_window import StepWindow


def run_cycles(
    step: float, offset: float, times: list[float], per_query: int, max_lag: int
) -> tuple[list[float], StepWindow]:
    """Drive the window with an engine that has every step up to now - offset."""
    w = StepWindow(step, latency_offset=offset, max_steps_per_query=per_query,
                   max_lag_steps=max_lag)  # fmt: skip
    asked: list[float] = []
    for now in times:
        plan = w.next(now)
        if plan is None:
            continue
        start, end = plan
        assert end >= start and (end - start) / step + 1 <= per_query
        assert end <= now - offset  # never inside the offset
        steps = [start + k * step for k in range(round((end - start) / step) + 1)]
        asked += steps
        w.answered(start, end, set(steps), now)
    return asked, w


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([1.0, 15.0, 60.0, 300.0]),
    st.sampled_from([0.0, 30.0]),
    st.lists(st.floats(0, 3.5), min_size=1, max_size=80),
    st.integers(1, 20),
    st.integers(5, 400),
)
def test_every_step_once_in_order(
    step: float, offset: float, gaps: list[float], per_query: int, max_lag: int
) -> None:
    t0 = 1_800_000_000.0
    times, now = [], t0
    for g in gaps:  # cycles about a step apart, with jitter and some long pauses
        now += g * step
        times.append(now)
    asked, w = run_cycles(step, offset, times, per_query, max_lag)
    # reference: the steps from the first cycle's newest to the last cycle's, on the grid
    first = math.floor((times[0] - offset) / step) * step
    want_until = math.floor((times[-1] - offset) / step) * step
    assert asked == sorted(set(asked))  # once each, in order
    assert all(abs(a / step - round(a / step)) < 1e-9 for a in asked)  # on the grid
    total = round((want_until - first) / step) + 1
    still_due = round((want_until - (w.cursor or first)) / step) + 1
    # every step is asked, or counted as skipped, or still due: none lost silently
    assert len(asked) + w.skipped + max(still_due, 0) == total
    assert w.skipped == 0 or total > max_lag


def test_a_refused_size_is_never_asked_again() -> None:
    w = StepWindow(15.0, latency_offset=0, max_steps_per_query=20, cursor=0.0)
    sizes = []
    for _ in range(12):
        start, end = w.next(20_000.0)  # type: ignore[misc]
        n = round((end - start) / 15) + 1
        sizes.append(n)
        if n > 3:  # the engine takes at most 3 steps
            w.refused(n)
        else:
            w.answered(start, end, {start + i * 15 for i in range(n)}, 20_000.0)
    # halved at each refusal, then back up to just under the smallest size refused
    assert sizes == [20, 10, 5, 2, 4, 2, 3, 3, 3, 3, 3, 3]


def test_a_missing_newest_step_waits_until_final() -> None:
    """The engine has not got the newest step yet: asked again, not lost; given up (empty)
    only once it is older than ``final_after``."""
    w = StepWindow(15.0, latency_offset=30, final_after=120, cursor=1000.0 * 15)
    start, end = w.next(1000 * 15 + 30 + 15)  # type: ignore[misc]
    w.answered(start, end, {start}, 1000 * 15 + 45)  # the second step missing
    assert w.cursor == start + 15 and w.empty == 0
    start2, end2 = w.next(1000 * 15 + 30 + 15 + 200)  # type: ignore[misc]
    assert start2 == start + 15
    w.answered(start2, end2, set(), 1000 * 15 + 245)
    assert w.cursor == start + 15  # still not final
    w.answered(start2, end2, set(), 1000 * 15 + 2000)
    assert w.cursor == end2 + 15 and w.empty == round((end2 - start2) / 15) + 1

"""The store's counter rule, vectorised (collector/storage/increases.py), against a
per-sample reference written from docs/storage.md's wording, on random cycles.

The reference shares no code with the product: a dict of last values and one ``if`` per
sample. Cycles mix counters and gauges, resets, NaN and infinities, new series, series
that skip a cycle and series twice in a cycle (the last row counts), and some steps are "rolled back" (computed, never applied), as a failed
transaction leaves them.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.collector.storage.increases import LastValues

VALUES = st.one_of(
    st.floats(min_value=0, max_value=1e15, allow_nan=False),
    st.sampled_from([0.0, 1.0, math.nan, math.inf, -math.inf]),
)


class Reference:
    """One series at a time, as a reader of the rule would do it by hand."""

    def __init__(self) -> None:
        self.kind: dict[int, bool] = {}
        self.last: dict[int, float] = {}

    def cycle(
        self, rows: list[tuple[int, float]]
    ) -> tuple[list[tuple[int, float]], dict[int, float]]:
        kept, last = [], dict(self.last)
        for sid, v in sorted(dict(rows).items()):  # a series twice: its last row
            if not self.kind[sid]:  # a gauge: as given, NaN and infinities too
                kept.append((sid, v))
                last[sid] = v
            elif math.isfinite(v):
                before = last.get(sid)
                if before is None:
                    kept.append((sid, 0.0))  # the first sample is the baseline
                elif v >= before:
                    kept.append((sid, v - before))
                else:
                    kept.append((sid, v))  # a reset: the new value is the increase
                last[sid] = v
            # a counter's NaN or infinity: not stored, the last value stays
        return kept, last


@st.composite
def histories(
    draw: st.DrawFn,
) -> tuple[dict[int, bool], list[tuple[list[tuple[int, float]], bool]]]:
    n = draw(st.integers(1, 12))
    kinds = {sid: draw(st.booleans()) for sid in range(n)}
    cycles = []
    for _ in range(draw(st.integers(1, 8))):
        present = draw(st.lists(st.sampled_from(range(n)), max_size=2 * n))  # repeats too
        rows = [(sid, draw(VALUES)) for sid in present]
        cycles.append((rows, draw(st.booleans()) if rows else True))  # (rows, committed)
    return kinds, cycles


# derandomized, so CI never draws a new case; raise max_examples by hand after a change
@settings(max_examples=300, deadline=None, derandomize=True)
@given(histories())
def test_the_vectorised_rule_stores_what_the_reference_stores(
    history: tuple[dict[int, bool], list[tuple[list[tuple[int, float]], bool]]],
) -> None:
    kinds, cycles = history
    ref, got = Reference(), LastValues()
    ref.kind = kinds
    got.define((sid, counter, None) for sid, counter in kinds.items())
    for rows, committed in cycles:
        want, last = ref.cycle(rows)
        step = got.step([sid for sid, _ in rows], [v for _, v in rows])
        kept = [
            (int(sid), float(v))
            for sid, v, s in zip(step.sids, step.value, step.stored, strict=True)
            if s
        ]
        assert [sid for sid, _ in kept] == [sid for sid, _ in want]
        for (_, a), (_, b) in zip(kept, want, strict=True):
            assert a == b or (math.isnan(a) and math.isnan(b))
        for sid, raw in zip(step.sids, step.raw, strict=True):
            expected = last.get(int(sid), math.nan)
            assert raw == expected or (math.isnan(raw) and math.isnan(expected))
        if committed:
            got.apply(step)
            ref.last = last


def test_a_store_reopened_from_series_rows_continues_each_counter() -> None:
    """define() with the series table's (id, counter, last_raw) rows, as Store.open does:
    a counter with a last value gives the increase, one without (NULL) a baseline."""
    state = LastValues()
    state.define([(0, True, 100.0), (1, True, None), (2, False, 0.5), (4000, True, 7.0)])
    step = state.step([4000, 2, 1, 0], [10.0, 0.25, 5.0, 130.0])
    assert step.sids.tolist() == [0, 1, 2, 4000]
    assert step.value.tolist() == [30.0, 0.0, 0.25, 3.0]
    assert step.order.tolist() == [3, 2, 1, 0]  # back to the caller's rows
    assert len(state) >= 4001
    assert np.isnan(state.step([1], [math.nan]).raw[0])  # still none: NULL in series

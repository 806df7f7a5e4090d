"""What the store keeps of a sample: a gauge's value, a counter's increase.

The rule (docs/storage.md): a counter's sample is stored as its increase since the previous
sample of its series; a decrease is a reset, so the increase is the new value; the first
sample of a series is its baseline (increase 0). A counter's NaN or infinite value is not
stored and does not become its last value, so it can neither poison sums nor make the next
sample one increase of the whole total. A gauge keeps NaN and infinities as given, as
Prometheus does.

Each series' kind and last raw value are held here, in arrays indexed by the store's dense
series ids, so a cycle's increases are a few vectorised steps and the store appends with a
plain insert instead of a join against ``series`` (measured with ``append_cycle`` on 32
agent-sized pages a transaction: 1.00 -> 0.86 us a sample). ``series.last_raw`` stays the
durable copy: the arrays are filled from it when the store opens, and a :class:`Step` is
applied only once its transaction has committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ids = npt.NDArray[np.uint32]
Flags = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Step:
    """One cycle's samples in series-id order, each series once, as they are to be stored.

    ``stored`` marks the rows that become samples (all but a counter's non-finite values);
    ``value`` is what a stored row keeps; ``raw`` is each series' last raw value after the
    cycle, NaN where a counter has none yet (``series.last_raw`` NULL)."""

    order: npt.NDArray[np.intp]
    sids: Ids
    value: Floats
    raw: Floats
    stored: Flags
    counter: Flags


def counter_increases(values: Floats, prev: Floats) -> Floats:
    """The counter rule, element-wise: each value's increase over ``prev`` (the series'
    previous raw value); a decrease is a reset, so the increase is the new value; no previous
    value (NaN) makes the sample the series' baseline, 0. The store's cycles and the fast
    history writer (bench/history_fast.py) both store what this returns."""
    with np.errstate(invalid="ignore"):
        increase = np.where(values >= prev, values - prev, values)  # a decrease is a reset
    out: Floats = np.where(np.isnan(prev), 0.0, increase)  # the first sample: baseline
    return out


class LastValues:
    """Per series id: is it a counter, and its last raw value (NaN: none yet)."""

    def __init__(self) -> None:
        self._counter: Flags = np.zeros(0, np.bool_)
        self._raw: Floats = np.zeros(0, np.float64)

    def __len__(self) -> int:
        return len(self._counter)

    def define(self, rows: Iterable[tuple[int, bool, float | None]]) -> None:
        """Set series ``(id, is_counter, last_raw or None)``, growing the arrays as needed.

        Called with the ``series`` table when the store opens and with a cycle's new series
        before its step (a new series has no last value; a retry of a failed cycle defines
        the same ids again)."""
        items = list(rows)
        if not items:
            return
        ids = np.fromiter((r[0] for r in items), np.int64, len(items))
        self._grow(int(ids.max()) + 1)
        self._counter[ids] = np.fromiter((r[1] for r in items), np.bool_, len(items))
        raws = (np.nan if r[2] is None else r[2] for r in items)
        self._raw[ids] = np.fromiter(raws, np.float64, len(items))

    def _grow(self, size: int) -> None:
        if size <= len(self._counter):
            return
        new = max(size, 2 * len(self._counter), 1024)
        counter, raw = np.zeros(new, np.bool_), np.full(new, np.nan)
        counter[: len(self._counter)] = self._counter
        raw[: len(self._raw)] = self._raw
        self._counter, self._raw = counter, raw

    def step(self, sids: Sequence[int], values: Sequence[float]) -> Step:
        """The cycle's rows sorted by id, a series twice keeping its last row, with what
        each stores. ``order`` indexes the rows kept, in the caller's numbering.

        Pure: nothing here changes until :meth:`apply`."""
        ids = np.asarray(sids, np.uint32)
        order = np.argsort(ids, kind="stable")  # a series' rows stay in the caller's order
        ids = ids[order]
        if len(ids) > 1 and not (last := ids[1:] != ids[:-1]).all():
            keep = np.append(last, True)  # the last row of each run of one series
            order, ids = order[keep], ids[keep]
        vals = np.asarray(values, np.float64)[order]
        counter, prev = self._counter[ids], self._raw[ids]
        finite = np.isfinite(vals)
        value = np.where(counter, counter_increases(vals, prev), vals)
        raw = np.where(counter & ~finite, prev, vals)
        return Step(order, ids, value, raw, ~counter | finite, counter)

    def raw_of(self, ids: Ids) -> Floats:
        """The last raw values of series ``ids`` (NaN: none yet)."""
        out: Floats = self._raw[ids]
        return out

    def counter_of(self, ids: Ids) -> Flags:
        """Which of series ``ids`` are counters."""
        out: Flags = self._counter[ids]
        return out

    def copy(self) -> LastValues:
        """An independent copy (the writer's memory kept to put back if a run fails)."""
        out = LastValues()
        out._counter, out._raw = self._counter.copy(), self._raw.copy()
        return out

    def with_raw(self, ids: Ids, raw: Floats) -> LastValues:
        """A copy with the last raw values of series ``ids`` set to ``raw`` (a run of
        cycles' values as they were before the run)."""
        out = self.copy()
        out._raw[ids] = raw
        return out

    def apply(self, step: Step) -> None:
        """Make ``step``'s raw values the series' last ones (after its commit)."""
        self._raw[step.sids] = step.raw

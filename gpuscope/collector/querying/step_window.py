"""Which steps to ask a query API for next: whole steps, never zero-wide, never growing.

The pull path used to ask ``[last end + step, now - interval]`` each cycle: a window
nominally zero seconds wide that scheduler jitter made empty about half the time (the cursor
moved on regardless: half the steps lost), that ended inside VictoriaMetrics' latency
offset (the newest 30 s are hidden: nothing stored at all), and that grew after each
failure until the engine refused it. This window instead:

- holds a cursor on the step grid (multiples of ``step``): the next step not yet stored;
- asks only steps at least ``latency_offset`` old (the engine's own offset respected);
- asks at most ``steps_per_query`` steps; a refusal for size halves that (down to one step)
  and caps it below the refused size from then on; success doubles it back up to that cap,
  so a refused query is never asked again as big;
- advances by the steps the engine answered: a step it has no data for yet is asked again,
  until it is older than ``final_after`` (then it is given up: empty);
- never falls further behind than ``max_lag_steps``: older steps are skipped, counted and
  shown, instead of becoming a catch-up query that cannot pass.

Pure: time is given, never read.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass


@dataclass
class StepWindow:
    step: float
    latency_offset: float = 30.0
    max_steps_per_query: int = 20
    max_lag_steps: int = 240
    #: A step older than this (seconds behind now, past the offset) with no answer is final.
    final_after: float = 120.0
    #: The next step to ask (a multiple of ``step``); None until the first cycle.
    cursor: float | None = None
    steps_per_query: int = 0
    #: The most steps a query may ask: one less than the smallest the engine refused.
    ceiling: int = 0
    skipped: int = 0
    empty: int = 0

    def __post_init__(self) -> None:
        if self.steps_per_query <= 0:
            self.steps_per_query = self.max_steps_per_query
        if self.ceiling <= 0:
            self.ceiling = self.max_steps_per_query

    def newest(self, now: float) -> float:
        """The newest step the engine is expected to answer at ``now``."""
        return math.floor((now - self.latency_offset) / self.step) * self.step

    def next(self, now: float) -> tuple[float, float] | None:
        """``(start, end)`` of the next query (both on the grid, end >= start), or None
        when no whole step is ready. Steps beyond the lag bound are skipped here."""
        newest = self.newest(now)
        if self.cursor is None:
            self.cursor = newest
        if newest < self.cursor:
            return None
        behind = round((newest - self.cursor) / self.step) + 1
        if behind > self.max_lag_steps:
            drop = behind - self.max_lag_steps
            self.skipped += drop
            self.cursor += drop * self.step
        end = min(newest, self.cursor + (self.steps_per_query - 1) * self.step)
        return self.cursor, end

    def answered(self, start: float, end: float, steps: Collection[float], now: float) -> None:
        """The engine answered ``[start, end]`` with data at ``steps``: move past what is
        done. A missing step at the end is asked again until it is final."""
        assert self.cursor is not None
        self.steps_per_query = min(self.ceiling, self.steps_per_query * 2)
        final_before = now - self.latency_offset - self.final_after
        done = end if (end in steps or end <= final_before) else max(steps, default=None)
        if done is None or done < start:
            return
        present = sum(1 for s in steps if start <= s <= done)
        self.empty += round((done - start) / self.step) + 1 - present
        self.cursor = done + self.step

    def refused(self, asked: int) -> None:
        """The engine refused a query of ``asked`` steps for size: ask fewer next time,
        and never as many again."""
        self.ceiling = max(1, min(self.ceiling, asked - 1))
        self.steps_per_query = max(1, min(self.steps_per_query // 2, self.ceiling))

    def lag(self, now: float) -> float | None:
        """Seconds the next step to store is behind now (None before the first cycle)."""
        return None if self.cursor is None else max(0.0, now - self.cursor)

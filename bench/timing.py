"""Timing a callable the way every benchmark should: repeated, beside its reference, spread.

One run of a callable on a shared machine says little: the figures carry min, median and
p99 of N runs, and where a reference exists (node_exporter beside the agent, the same
windows run one by one beside the batched query...) the product and the reference run
*alternately* in the same loop, so that a burst of load elsewhere falls on both alike
rather than on whichever happened to run second.

Usage::

    t = time_alternating(lambda: agent_scrape(), reference=lambda: node_exporter_scrape(), n=50)
    t.product.median, t.product.p99, t.reference.median
    Figure.timed("full scrape", t.product.scaled(1000), "ms", reference=...)

``clock`` defaults to :func:`time.perf_counter` (wall); pass :func:`time.process_time` for
CPU time of this process, or any zero-argument callable returning seconds (tests inject one).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Spread:
    """min, median and p99 of ``n`` timings, in the unit they were taken in (seconds)."""

    min: float
    median: float
    p99: float
    n: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        """The spread of ``samples`` (at least one). p99 is the nearest-rank percentile:
        with fewer than 100 samples it is the largest, which is the honest reading."""
        if not samples:
            raise ValueError("no timings")
        s = sorted(samples)
        n = len(s)
        mid = n // 2
        median = s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2
        p99 = s[max(0, math.ceil(0.99 * n) - 1)]
        return cls(min=s[0], median=median, p99=p99, n=n)

    def scaled(self, factor: float) -> Spread:
        """The same spread in another unit (``1000`` for ms, ``1/samples`` per sample...)."""
        return Spread(self.min * factor, self.median * factor, self.p99 * factor, self.n)

    def rate(self, amount: float) -> Spread:
        """``amount`` per unit of time (samples/s...): the fastest run gives the *max* rate,
        so min/median/p99 of the rate are taken from p99/median/min of the time (the
        "p99" of a rate is its slow tail, as for a time)."""
        return Spread(amount / self.min, amount / self.median, amount / self.p99, self.n)

    def to_dict(self) -> dict[str, float]:
        return {"min": self.min, "median": self.median, "p99": self.p99, "n": self.n}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spread:
        return cls(float(d["min"]), float(d["median"]), float(d["p99"]), int(d["n"]))


@dataclass(frozen=True)
class Timings:
    """The product's spread and, when one ran beside it, the reference's."""

    product: Spread
    reference: Spread | None = None
    #: what the last product call returned (so callers can check and describe it)
    result: Any = None
    reference_result: Any = None


def time_alternating(
    product: Callable[[], Any],
    *,
    reference: Callable[[], Any] | None = None,
    n: int = 5,
    warmup: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> Timings:
    """Run ``product`` (and ``reference``) ``n`` times each, alternating P, R, P, R...

    ``warmup`` untimed rounds go first (cache warm-up, imports). The order within a
    round alternates too (P R, then R P) so neither side always runs right after the
    other's garbage. Returns both spreads and the last results.
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    for _ in range(warmup):
        product()
        if reference is not None:
            reference()
    p_times: list[float] = []
    r_times: list[float] = []
    result: Any = None
    ref_result: Any = None

    def once(fn: Callable[[], Any], into: list[float]) -> Any:
        t0 = clock()
        out = fn()
        into.append(clock() - t0)
        return out

    for i in range(n):
        if reference is None:
            result = once(product, p_times)
        elif i % 2 == 0:
            result = once(product, p_times)
            ref_result = once(reference, r_times)
        else:
            ref_result = once(reference, r_times)
            result = once(product, p_times)
    return Timings(
        product=Spread.of(p_times),
        reference=Spread.of(r_times) if r_times else None,
        result=result,
        reference_result=ref_result,
    )


def time_round_robin(
    callables: Mapping[str, Callable[[], Any]],
    *,
    n: int = 5,
    warmup: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Timings]:
    """:func:`time_alternating` for several peers (a planner beside several baselines):
    ``n`` rounds, each running every callable once, the starting one rotating from round
    to round. Returns each name's spread and last result."""
    if n < 1:
        raise ValueError("n must be at least 1")
    names = list(callables)
    for _ in range(warmup):
        for name in names:
            callables[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    results: dict[str, Any] = {}
    for i in range(n):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            t0 = clock()
            results[name] = callables[name]()
            times[name].append(clock() - t0)
    return {name: Timings(Spread.of(times[name]), result=results[name]) for name in names}


def time_once(
    fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter
) -> tuple[float, Any]:
    """Seconds one call took and what it returned (for steps that run once by nature:
    building a history, the maintenance that follows it)."""
    t0 = clock()
    out = fn()
    return clock() - t0, out

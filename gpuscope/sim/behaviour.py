"""How busy a simulated workload is at time t, and how much work it did up to t.

Gauges (utilization now) add deterministic noise; counters (energy, bytes) integrate the
*mean* level in closed form, so a counter at any instant costs O(1), never decreases, and its
rate over a window matches the mean behaviour. Noise comes from a hash of (seed, key, time
bucket), not a random generator, so any reading can be recomputed exactly.
"""

from __future__ import annotations

import functools
import math

from gpuscope.sim.scenario import DAY, WorkloadSpec

_MASK = (1 << 64) - 1
#: Length of the time buckets in which noise is constant.
BUCKET_SECONDS = 15.0
#: Interactive sessions are busy in bursts: each burst bucket is this long.
BURST_SECONDS = 120.0


def mix(*values: int) -> int:
    """SplitMix64 over a tuple of integers: fast, stable across runs and platforms."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK)) & _MASK
        h = (h + 0x9E3779B97F4A7C15) & _MASK
        z = h
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        h = z ^ (z >> 31)
    return h


def noise(*values: int) -> float:
    """A deterministic number in [0, 1)."""
    return mix(*values) / 2.0**64


@functools.lru_cache(maxsize=65_536)
def stable_id(text: str) -> int:
    """A stable 64-bit id for a name (Python's hash() is salted per process); cached, as
    the same GPU and pod names are hashed at every reading."""
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & _MASK
    return h


def idle_at(w: WorkloadSpec, start: float) -> float | None:
    """When an interactive session went idle, or None if it never does."""
    if w.kind != "interactive" or w.active_seconds is None:
        return None
    return start + w.active_seconds


def level(w: WorkloadSpec, key: int, start: float, t: float) -> float:
    """Busy level of one pod (0..1 of its share of a GPU) at time t."""
    u = w.utilization
    bucket = int(t // BUCKET_SECONDS)
    n = noise(key, bucket)
    if w.kind == "training":
        return _clip(u + (n - 0.5) * 0.08)
    if w.kind == "batch":
        return _clip(u + (n - 0.5) * 0.3)
    if w.kind == "inference":
        return _clip(u * _diurnal(t) + (n - 0.5) * 0.1)
    went_idle = idle_at(w, start)
    if went_idle is not None and t >= went_idle:
        return 0.0
    burst = noise(key, int(t // BURST_SECONDS), 7)
    return _clip(2 * u * n) if burst < 0.5 else 0.0


def mean_level_integral(w: WorkloadSpec, start: float, t1: float, t2: float) -> float:
    """∫ mean level dt over [t1, t2] (seconds at full level), in closed form."""
    if t2 <= t1:
        return 0.0
    u = w.utilization
    if w.kind in ("training", "batch"):
        return u * (t2 - t1)
    if w.kind == "inference":
        w_ = 2 * math.pi / DAY
        return u * (0.6 * (t2 - t1) - 0.4 / w_ * (math.cos(w_ * t2) - math.cos(w_ * t1)))
    went_idle = idle_at(w, start)
    end = t2 if went_idle is None else min(t2, went_idle)
    # bursts half of the time, at a mean of u when busy
    return max(0.0, end - t1) * 0.5 * u


def _diurnal(t: float) -> float:
    return 0.6 + 0.4 * math.sin(2 * math.pi * t / DAY)


def _clip(x: float) -> float:
    return 0.0 if x < 0 else 1.0 if x > 1 else x

"""The simulator's behaviour (:mod:`gpuscope.sim.behaviour`) over arrays of times: the hash
noise, a workload's utilization level and its integral, for code that computes many
readings at once (the demo's week, ``gpuscope/demo/readings_fast.py``; the benchmarks'
vectorised history, ``bench/history_fast.py``). One copy, so the two cannot drift apart.

The daily cycle's sine and cosine are the caller's: the demo passes them computed with
``math`` time by time (its readings then equal the simulator's bit for bit), the benchmark
with numpy (equal within float rounding, and fast at 10,000 GPUs).
"""

from __future__ import annotations

import math

import numpy as np

from gpuscope.sim.behaviour import BUCKET_SECONDS, BURST_SECONDS, idle_at
from gpuscope.sim.scenario import DAY, WorkloadSpec

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)


def buckets(t: np.ndarray, seconds: float) -> np.ndarray:
    """``int(t // seconds)`` of each time as the 64-bit pattern :func:`mix` takes (negative
    times wrap as ``& _MASK``)."""
    out: np.ndarray = np.floor_divide(t, seconds).astype(np.int64).view(np.uint64)
    return out


def mix(*values: np.ndarray) -> np.ndarray:
    """gpuscope.sim.behaviour.mix over arrays (uint64 arithmetic wraps as ``& _MASK``)."""
    h = np.full(np.broadcast_shapes(*(np.shape(v) for v in values)), _GOLDEN, np.uint64)
    for v in values:
        h = (h ^ v.astype(np.uint64)) + _GOLDEN
        z = (h ^ (h >> np.uint64(30))) * _C1
        z = (z ^ (z >> np.uint64(27))) * _C2
        h = z ^ (z >> np.uint64(31))
    return h


def noise(*values: np.ndarray) -> np.ndarray:
    """gpuscope.sim.behaviour.noise over arrays: uniform in [0, 1)."""
    return mix(*values).astype(np.float64) / 2.0**64


def clip(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, 0.0, np.where(x > 1, 1.0, x))


def diurnal_numpy(t: np.ndarray) -> np.ndarray:
    """The daily cycle ``0.6 + 0.4 sin(2 pi t / DAY)`` with numpy's sine."""
    out: np.ndarray = 0.6 + 0.4 * np.sin(2 * math.pi * t / DAY)
    return out


def level(
    w: WorkloadSpec, key: int, start: float, t: np.ndarray, diurnal: np.ndarray
) -> np.ndarray:
    """gpuscope.sim.behaviour.level at every time of ``t`` (``diurnal``: its daily cycle
    at those times)."""
    u = w.utilization
    keys = np.full(t.shape, key, np.uint64)
    n = noise(keys, buckets(t, BUCKET_SECONDS))
    if w.kind == "training":
        return clip(u + (n - 0.5) * 0.08)
    if w.kind == "batch":
        return clip(u + (n - 0.5) * 0.3)
    if w.kind == "inference":
        return clip(u * diurnal + (n - 0.5) * 0.1)
    burst = noise(keys, buckets(t, BURST_SECONDS), np.full(t.shape, 7, np.uint64))
    out = np.where(burst < 0.5, clip(2 * u * n), 0.0)
    went_idle = idle_at(w, start)
    if went_idle is not None:
        out = np.where(t >= went_idle, 0.0, out)
    return out


def mean_level_integral(
    w: WorkloadSpec, start: float, t1: float, t2: np.ndarray, cos_t2: np.ndarray
) -> np.ndarray:
    """gpuscope.sim.behaviour.mean_level_integral with ``t2`` an array (``cos_t2``:
    ``cos(2 pi t2 / DAY)``)."""
    u = w.utilization
    if w.kind in ("training", "batch"):
        out = u * (t2 - t1)
    elif w.kind == "inference":
        w_ = 2 * math.pi / DAY
        out = u * (0.6 * (t2 - t1) - 0.4 / w_ * (cos_t2 - math.cos(w_ * t1)))
    else:
        went_idle = idle_at(w, start)
        end = t2 if went_idle is None else np.minimum(t2, went_idle)
        out = np.maximum(0.0, end - t1) * 0.5 * u
    result: np.ndarray = np.where(t2 <= t1, 0.0, out)
    return result

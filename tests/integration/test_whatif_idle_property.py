"""The idle-policy replay against a reference written here, on random session histories
stored through the collector's store (its bulk path); and its ladder monotonic.

The reference walks each session's 5-minute buckets one by one (the replay works on runs
in SQL and polars): a bucket's value on a GPU is its highest sample, busy at or over the
threshold; a bucket without a sample is idle when the nearest buckets with data on both
sides (inside the session's life) are idle and at most two hours apart, else unknown; a
session's bucket is busy if any GPU is, else unknown if any is, else idle. An idle
threshold stops a session in the first idle bucket whose end is past
``max(run start + N + warning, start + grace)``, where the run starts at the first idle
bucket after a busy or unknown one.
"""

from __future__ import annotations

import itertools
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.analytics.idle_whatif.figures import idle_whatif
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 3, 6, 0)
STEP = 150  # seconds: two samples a bucket
SAMPLES = 6 * 3600 // STEP  # scrapes at T0 + i * STEP, i in [0, SAMPLES]
FROM = T0 + timedelta(hours=1)
TO = T0 + timedelta(hours=6)
BUCKET = timedelta(minutes=5)
THRESHOLD = 0.05
VALUES = (0.0, 0.01, 0.049, 0.05, 0.6, None)  # None: no sample of the GPU then


@dataclass(frozen=True)
class Session:
    name: str
    gpus: int
    start: int  # first scrape that shows it
    end: int | None  # first scrape that no longer does (None: still held)
    values: tuple[tuple[float | None, ...], ...]  # per GPU, per scrape

    def t(self, i: int) -> datetime:
        return T0 + timedelta(seconds=i * STEP)

    @property
    def held(self) -> tuple[datetime, datetime]:
        end = TO if self.end is None else min(self.t(self.end), TO)
        return self.t(self.start), end


@st.composite
def gpu_values(draw: st.DrawFn) -> tuple[float | None, ...]:
    out: list[float | None] = []
    while len(out) <= SAMPLES:
        value = draw(st.sampled_from(VALUES))
        out += [value] * draw(st.integers(1, 40))
    return tuple(out[: SAMPLES + 1])


@st.composite
def sessions(draw: st.DrawFn) -> list[Session]:
    out = []
    for k in range(draw(st.integers(1, 3))):
        gpus = draw(st.integers(1, 2))
        start = draw(st.integers(0, SAMPLES - 10))
        end = draw(st.one_of(st.none(), st.integers(start + 2, SAMPLES + 1)))
        values = tuple(draw(gpu_values()) for _ in range(gpus))
        out.append(Session(f"nb-{k}", gpus, start, end, values))
    return out


def store_sessions(path: Path, sess: list[Session]) -> None:
    """The sessions' six hours as the collector's cycles, written in one transaction by
    ``Store.append_cycles`` (the store's bulk path, tests/unit/test_store_bulk.py holds it
    equal to ``append_cycle`` one cycle at a time; most of an example's time before)."""
    cycles: list[list[tuple[Batch, float]]] = []
    with Store.open(path) as store:
        for i in range(SAMPLES + 1):
            ts = T0 + timedelta(seconds=i * STEP)
            ms = int((ts - datetime(1970, 1, 1)).total_seconds() * 1000)
            batches = []
            for s in sess:
                names: list[str] = []
                labels: list[tuple[tuple[str, str], ...]] = []
                values: list[float] = []
                for g in range(s.gpus):
                    gpu = {"node": f"node-{s.name}", "gpu": str(g), "uuid": f"GPU-{s.name}-{g}",
                           "mig_instance": ""}  # fmt: skip
                    v = s.values[g][i]
                    if v is not None:
                        names.append("gpuscope_gpu_utilization_ratio")
                        labels.append(tuple(sorted(gpu.items())))
                        values.append(v)
                    if s.start <= i and (s.end is None or i < s.end):
                        info = {**gpu, "namespace": "ns", "pod": s.name, "container": "main",
                                "workload_kind": "interactive", "interactive": "true",
                                "project": "ns"}  # fmt: skip
                        names.append("gpuscope_gpu_workload_info")
                        labels.append(tuple(sorted(info.items())))
                        values.append(1.0)
                batches.append((Batch(f"node-{s.name}", ms, names, labels, values, {}), 0.01))
            cycles.append(batches)
        store.append_cycles(cycles)


def bucket_states(s: Session) -> list[tuple[datetime, datetime, str]]:
    """(t0, t1, B/I/U) of each 5-minute bucket the session held, in order."""
    a, b = s.held
    first = T0 + BUCKET * ((a - T0) // BUCKET)
    buckets = []
    t = first
    while t < b:
        buckets.append(t)
        t += BUCKET
    per_gpu = []
    for g in range(s.gpus):
        vals: list[float | None] = []
        for bk in buckets:
            got = [
                v
                for i, v in enumerate(s.values[g])
                if v is not None and bk <= s.t(i) < bk + BUCKET and s.t(i) < TO
            ]
            vals.append(max(got) if got else None)
        states = []
        for j, v in enumerate(vals):
            if v is not None:
                states.append("B" if v >= THRESHOLD else "I")
                continue
            before = next((k for k in range(j - 1, -1, -1) if vals[k] is not None), None)
            after = next((k for k in range(j + 1, len(vals)) if vals[k] is not None), None)
            bridged = (
                before is not None
                and after is not None
                and vals[before] < THRESHOLD  # type: ignore[operator]
                and vals[after] < THRESHOLD  # type: ignore[operator]
                and (after - before) * 300 - 300 <= 7200
            )
            states.append("I" if bridged else "U")
        per_gpu.append(states)
    out = []
    for j, bk in enumerate(buckets):
        col = [per_gpu[g][j] for g in range(s.gpus)]
        state = "B" if "B" in col else "U" if "U" in col else "I"
        out.append((max(bk, a), min(bk + BUCKET, b), state))
    return out


def _h(x: timedelta) -> float:
    return max(0.0, x.total_seconds() / 3600)


def reference(
    sess: list[Session], kind: str, after: timedelta, grace: timedelta
) -> dict[str, dict[str, Any]]:
    """Per session stopped: stop, freed, busy after, came back."""
    out = {}
    for s in sess:
        a, b = s.held
        if b <= FROM:
            continue
        states = bucket_states(s)
        stop = None
        if kind == "idle":
            run_start = None
            for t0, t1, state in states:
                if state != "I":
                    run_start = None
                    continue
                run_start = t0 if run_start is None else run_start
                cand = max(run_start + after, a + grace)
                if cand < t1:
                    stop = cand
                    break
        elif a + after < b:
            stop = a + after
        if stop is None or stop >= TO:
            continue
        busy = [
            (max(t0, stop, FROM), min(t1, TO)) for t0, t1, st_ in states if st_ == "B" and t1 > stop
        ]
        out[s.name] = {
            "freed": s.gpus * _h(b - max(stop, FROM)),
            "busy": s.gpus * sum(_h(hi - lo) for lo, hi in busy),
            "back": bool(busy),
        }
    return out


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    sess=sessions(),
    minutes=st.lists(st.sampled_from([10, 15, 25, 30, 45, 60, 90, 120]), min_size=2, max_size=4),
    warning=st.sampled_from([0.0, 10.0]),
    grace=st.sampled_from([0.0, 10.0, 40.0]),
    hours=st.sampled_from([1.0, 2.5]),
)
def test_replay_equals_the_reference(
    sess: list[Session], minutes: list[int], warning: float, grace: float, hours: float
) -> None:
    cfg = Settings(analytics={"startup_grace_minutes": grace})  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.duckdb"
        store_sessions(path, sess)
        with Store.open(path, read_only=True) as store:
            out = idle_whatif(store.cursor(), FROM, TO, cfg, idle_minutes=[float(m) for m in minutes],
                              time_limit_hours=[hours], warning_minutes=warning)  # fmt: skip
    entries = [(e, "idle", e["idle_minutes"]) for e in out["thresholds"]]
    entries += [(e, "time_limit", e["hours"] * 60) for e in out["time_limits"]]
    for e, kind, value in entries:
        wait = e["warning_minutes"]  # the detector's own point has none
        want = reference(sess, kind, timedelta(minutes=value + wait), timedelta(minutes=grace))
        label = f"{kind} {value} + {wait} ({e['source']})"
        assert e["sessions_stopped"] == len(want), label
        assert e["stopped_then_busy"] == sum(w["back"] for w in want.values()), label
        assert e["gpu_hours_freed"] == pytest.approx(
            sum(w["freed"] for w in want.values()), abs=1e-3
        ), label
        assert e["busy_gpu_hours_after_stop"] == pytest.approx(
            sum(w["busy"] for w in want.values()), abs=1e-3
        ), label
    ladder = [e for e in out["thresholds"] if e["source"] == "ladder"]
    assert [e["idle_minutes"] for e in ladder] == sorted(set(minutes))
    for shorter, longer in itertools.pairwise(ladder):
        assert longer["gpu_hours_freed"] <= shorter["gpu_hours_freed"] + 1e-9
        assert longer["stopped_then_busy"] <= shorter["stopped_then_busy"]
        assert longer["sessions_stopped"] <= shorter["sessions_stopped"]

"""The idle fold's read bound (gpuscope/analytics/detectors/idle_reads.py) changes what a
fold reads, never what it answers: over random histories (GPUs at 5, 15 or 60 s, busy and
idle stretches, outages, GPUs that start late or stop early) a collector's sequence of
runs gives, state for state, what the same runs give reading the whole 45-minute look-back
(the bound turned off), and the bounded runs read fewer samples."""

from __future__ import annotations

import random
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from gpuscope.analytics.detectors import idle
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import AnalyticsSettings
from tests.integration.test_idle import T0, Gpu, Work, fill


def _history(rng: random.Random) -> tuple[list[Gpu], list[Work], object, int, datetime]:
    step = rng.choice([5, 15, 60])
    end = T0 + timedelta(minutes=rng.choice([90, 150]))
    gpus = [Gpu(f"node-{n}", i) for n in "ab" for i in range(rng.choice([1, 2, 3]))]
    plan: dict[Gpu, list[tuple[datetime, datetime, float | None, bool]]] = {}
    for g in gpus:
        segments = []
        t = T0 + timedelta(minutes=rng.choice([0, 0, 20, 50]))  # some start late
        stop = end - timedelta(minutes=rng.choice([0, 0, 0, 40, 70]))  # some stop early
        while t < stop:
            length = timedelta(seconds=step * rng.choice([1, 2, 3, 5, 20, 60, 120]))
            value = rng.choice([None, 0.0, 0.01, 0.3, 0.9, 0.9])  # None: an outage
            flaky = rng.random() < 0.4  # samples missing at random: gaps of every length
            segments.append((t, min(t + length, stop), value, flaky))
            t += length
        plan[g] = segments

    def util(g: Gpu, ts: datetime) -> float | None:
        for lo, hi, value, flaky in plan[g]:
            if lo <= ts < hi:
                lost = flaky and random.Random(f"{g.uuid}{ts}").random() < 0.5
                return None if lost else value
        return None

    works = [Work("ml", f"pod-{g.node}-{g.index}", "interactive", (g,)) for g in gpus]
    return gpus, works, util, step, end


def _runs(rng: random.Random, end: datetime) -> list[datetime]:
    """Run times a collector might have: every few minutes, a stall past the look-back."""
    at, out = T0 + timedelta(minutes=rng.randint(2, 10)), []
    while at <= end:
        out.append(at)
        at += timedelta(seconds=rng.choice([30, 61, 300, 300, 300, 900, 3000]))
    return out


@pytest.mark.parametrize("seed", range(10))
def test_bounded_reads_answer_as_the_whole_look_back(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    gpus, works, util, step, end = _history(rng)
    cfg = AnalyticsSettings(idle_window_minutes=rng.choice([10, 30]))
    read: dict[str, list[datetime]] = {"bounded": [], "whole": []}
    fold = idle._fold

    def counting(cur, prior, lo, hi, params, bound=None):  # type: ignore[no-untyped-def]
        if mode == "whole":  # no bound at all: neither the query's nor any key's
            i = prior.schema.get_field_index("lookback_from")
            prior = prior.set_column(
                i, "lookback_from", pa.nulls(prior.num_rows, pa.timestamp("us"))
            )
            bound = None
        read[mode].append(idle.read_from(bound, lo, idle.LOOKBACK))
        return fold(cur, prior, lo, hi, params, bound)

    monkeypatch.setattr(idle, "_fold", counting)
    with Store.open(tmp_path / "a.duckdb") as a:
        fill(a, gpus, works, util, end=end, step=step)  # type: ignore[arg-type]
    # the same history in both files: written once and copied (half the test's CPU was
    # writing it twice)
    shutil.copyfile(tmp_path / "a.duckdb", tmp_path / "b.duckdb")
    with Store.open(tmp_path / "a.duckdb") as a, Store.open(tmp_path / "b.duckdb") as b:
        for at in _runs(rng, end):
            mode = "bounded"
            got, was_inc, _ = idle.activity_state(a, at, cfg, scrape_interval_s=step)
            mode = "whole"
            want, _, _ = idle.activity_state(b, at, cfg, scrape_interval_s=step)
            assert _rows(got) == _rows(want), (seed, at, was_inc)
    # the bound took effect: some folds read from later than the whole look-back
    assert any(x > y for x, y in zip(read["bounded"], read["whole"], strict=True))
    assert all(x >= y for x, y in zip(read["bounded"], read["whole"], strict=True))


def _rows(state: pa.Table) -> list[dict[str, object]]:
    """The state's answer, less the bound's own bookkeeping (``lookback_from``: the whole
    runs carry none)."""
    rows = state.drop_columns(["lookback_from"]).to_pylist()
    return sorted(rows, key=lambda r: str(r["uuid"]))

"""The scheduled analytics run stores the idle detector's findings once: the detector saves
its activity state, the job's one transaction stores every detector's findings (issue 39:
the idle findings were written twice a run). The findings stored are the detector's own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock

import pytest

import gpuscope.service as service_module
from gpuscope.analytics.detectors.idle import run_idle
from gpuscope.collector.storage.store import Store
from gpuscope.core.settings import Settings
from tests.integration.test_idle import END, Gpu, Work, fill


def idle_store(path: Path) -> Store:
    """An hour of two GPUs: one idle session, one busy training pod."""
    a, b = Gpu("n1", 0), Gpu("n1", 1)
    store = Store.open(path)
    works = [Work("team-a", "nb-1", "interactive", (a,)), Work("team-b", "train-1", "batch", (b,))]
    fill(store, [a, b], works, lambda g, ts: 0.0 if g is a else 0.8)
    return store


def test_idle_findings_stored_once_and_equal_to_the_detectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings()
    at = END.replace(tzinfo=UTC) + timedelta(seconds=30)
    with idle_store(tmp_path / "a.duckdb") as alone:
        expected = run_idle(
            alone, at, settings.analytics, settings.workloads, persist=True,
            scrape_interval_s=settings.collector.scrape_interval_seconds,
        ).findings  # fmt: skip
        stored_alone = sorted(f["id"] for f in alone.findings())
    assert {f.kind for f in expected} == {"idle_session"}
    assert stored_alone == sorted(f.id for f in expected)

    with idle_store(tmp_path / "b.duckdb") as store:
        writes: list[list[str]] = []
        record = store.record_findings

        def counted(findings: Any, now: datetime, *, kinds: Any) -> None:
            findings = list(findings)
            writes.append(sorted(f.id for f in findings))
            record(findings, now, kinds=kinds)

        monkeypatch.setattr(store, "record_findings", counted)
        svc = SimpleNamespace(
            settings=settings, store=store, clock=at.timestamp, metrics=MagicMock()
        )
        done = service_module.analytics_job(svc)  # type: ignore[arg-type]
        assert done["idle"].findings == expected
        assert len(writes) == 1  # one transaction for the run, idle's findings in it
        assert sorted(f["id"] for f in store.findings() if f["kind"] == "idle_session") == sorted(
            f.id for f in expected
        )
        # the state was saved all the same: the next run is incremental
        assert store.cursor().execute("SELECT count(*) FROM gpu_activity_state").fetchone() == (2,)

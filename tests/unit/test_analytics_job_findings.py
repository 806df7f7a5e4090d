"""The scheduled analytics run stores every detector's findings in one transaction, and
resolves a kind only when its own detector ran: a detector that fails leaves its open
findings as they were; one that ran and no longer reports a finding resolves it."""

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock

import pytest

import gpuscope.service as service_module
from gpuscope.analytics.base import Analysis
from gpuscope.analytics.runner import DETECTORS
from gpuscope.collector.storage.store import Store
from gpuscope.core.records import Finding, finding_id
from gpuscope.core.settings import Settings

T0 = datetime(2025, 3, 3, 10, 0, tzinfo=UTC)


def finding(kind: str, node: str) -> Finding:
    subject = {"node": node}
    return Finding(finding_id(kind, subject), kind, "warning", subject, T0, T0)


def test_findings_of_detectors_that_ran_are_stored_and_resolved_by_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found: dict[str, list[Finding]] = {name: [finding(f"{name}_kind", "a")] for name in DETECTORS}
    failing: set[str] = set()

    def run_on_store(store: Store, at: datetime, settings: Any, which: list[str], **_: Any) -> Any:
        (name,) = which
        if name in failing:
            raise RuntimeError("broken detector")
        return {name: Analysis(kinds=(f"{name}_kind",), findings=list(found[name]))}

    monkeypatch.setattr(service_module, "run_on_store", run_on_store)
    with Store.open(tmp_path / "s.duckdb") as store:
        metrics = MagicMock()
        writes: list[int] = []  # record_findings calls: one transaction a run
        record = store.record_findings

        def counted(findings: Any, now: datetime, *, kinds: Any) -> None:
            writes.append(1)
            record(findings, now, kinds=kinds)

        monkeypatch.setattr(store, "record_findings", counted)
        svc = SimpleNamespace(settings=Settings(), store=store, clock=T0.timestamp, metrics=metrics)
        done = service_module.analytics_job(svc)  # type: ignore[arg-type]
        assert sorted(done) == sorted(DETECTORS)
        assert len(writes) == 1
        assert sorted(f["kind"] for f in store.findings()) == sorted(f"{n}_kind" for n in DETECTORS)
        # the next run: "quota" fails, every other detector reports nothing (idle a new one)
        failing.add("quota")
        found.update({name: [] for name in DETECTORS})
        found["idle"] = [finding("idle_kind", "b")]
        done = service_module.analytics_job(svc)  # type: ignore[arg-type]
        assert "quota" not in done
        assert len(writes) == 2
        still = sorted((f["kind"], f["subject"]["node"]) for f in store.findings())
        assert still == [("idle_kind", "b"), ("quota_kind", "a")]
        resolved = [f for f in store.findings(open_only=False) if f["resolved_at"] is not None]
        assert len(resolved) == len(DETECTORS) - 1  # every first finding but quota's
        metrics.job_errors.labels.assert_called_with("analytics-quota")


def test_the_analyses_without_their_own_data_until_share_one_read_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpuscope.analytics.runner as runner_module

    reads: list[datetime] = []

    def newest_data(con: Any, at: datetime | None = None) -> datetime:
        reads.append(at)  # type: ignore[arg-type]
        # a later read finds more data: an analysis that read again would say so
        return datetime(2025, 3, 3, 9, 58 + min(len(reads), 2) - 1)

    monkeypatch.setattr(runner_module, "newest_data", newest_data)
    with Store.open(tmp_path / "s.duckdb") as store:
        svc = SimpleNamespace(
            settings=Settings(), store=store, clock=T0.timestamp, metrics=MagicMock()
        )
        done = service_module.analytics_job(svc)  # type: ignore[arg-type]
        assert sorted(done) == sorted(DETECTORS)
        # idle states its own (its state's newest sample); the others read the store once
        shared = [n for n in DETECTORS if n != "idle"]
        assert {done[n].summary["data_until"] for n in shared} == {"2025-03-03T09:58:00"}
        assert len(reads) == 1
        # a call of its own (the CLI, the API) reads it for itself, as before
        runner_module.run_on_store(store, T0, Settings(), shared, persist=False)
        assert len(reads) == 1 + len(shared)

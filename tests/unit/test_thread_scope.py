"""DuckDB's threads are lowered while the scheduled jobs run, and set back after them
(gpuscope/collector/storage/thread_scope.py), on a real database."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import gpuscope.service as service_module
from gpuscope.collector.storage.store import Store
from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import load_settings


def threads(store: Store) -> int:
    cur = store.cursor()
    try:
        return int(cur.execute("SELECT current_setting('threads')").fetchall()[0][0])
    finally:
        cur.close()


@pytest.fixture
def store(tmp_path: Path) -> Any:
    # 4 threads given, so that lowering shows on a machine of any core count
    with Store.open(tmp_path / "a.duckdb", threads=4) as opened:
        yield opened


def test_the_scope_lowers_the_threads_and_sets_them_back(store: Store) -> None:
    with store.thread_scope.lowered(1):
        assert threads(store) == 1
    assert threads(store) == 4


def test_the_threads_are_set_back_when_the_job_fails(store: Store) -> None:
    with pytest.raises(RuntimeError), store.thread_scope.lowered(1):
        raise RuntimeError("a job that fails")
    assert threads(store) == 4


def test_none_leaves_the_threads_and_a_higher_count_never_raises_them(store: Store) -> None:
    with store.thread_scope.lowered(None):
        assert threads(store) == 4
    with store.thread_scope.lowered(8):
        assert threads(store) == 4
    assert threads(store) == 4


def test_overlapping_scopes_set_the_threads_back_when_the_last_one_leaves(store: Store) -> None:
    """Two jobs at once: the first to leave must not give the second its threads back, and
    the last sets back what the database had before the first (not the lowered count)."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def job_b() -> None:
        a_in.wait(10)
        with store.thread_scope.lowered(2):
            b_in.set()
            a_out.wait(10)
            seen["b after a left"] = threads(store)

    other = threading.Thread(target=job_b)
    other.start()
    with store.thread_scope.lowered(1):
        a_in.set()
        b_in.wait(10)
        seen["both in"] = threads(store)
    a_out.set()
    other.join(10)
    assert seen == {"both in": 1, "b after a left": 1}
    assert threads(store) == 4


def test_the_scheduled_run_runs_the_detectors_and_the_rules_on_the_job_threads(
    store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[tuple[str, int]] = []
    monkeypatch.setattr(
        service_module, "analytics_job", lambda s: seen.append(("analytics", threads(s.store)))
    )
    monkeypatch.setattr(
        service_module, "alerts_job", lambda s, e: seen.append(("alerts", threads(s.store)))
    )
    settings = load_settings(env={}, overrides={"collector": {"job_db_threads": 1}})
    assert load_settings(env={}).collector.job_db_threads == 1  # the default
    service = SimpleNamespace(store=store, settings=settings)
    service_module.scheduled_run(service, None)  # type: ignore[arg-type]
    assert seen == [("analytics", 1), ("alerts", 1)]
    assert threads(store) == 4
    seen.clear()
    config = tmp_path / "gpuscope.yaml"
    config.write_text("collector:\n  job_db_threads: null\n")  # as db_threads
    unlowered = load_settings(config, env={})
    service_module.scheduled_run(SimpleNamespace(store=store, settings=unlowered), None)  # type: ignore[arg-type]
    assert seen == [("analytics", 4), ("alerts", 4)]
    with pytest.raises(ConfigError, match="job_db_threads"):
        load_settings(env={}, overrides={"collector": {"job_db_threads": 0}})

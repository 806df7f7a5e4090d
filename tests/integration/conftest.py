"""Fixtures the integration modules share, built once per test process (each pytest-xdist
worker is one) and handed out as copies, so no test sees another's writes."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def actions_history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The act tests' store (tests/integration/test_actions.py ``cluster``): three GPUs on two
    nodes scraped every ``STEP`` up to ``DATA_END`` through the store's own write path, the
    idle notebook's GPU at 0 %, the busy one's at 70 %; closed, so a test opens a copy. Built
    once: filling it cost about half of each act test (130 of them)."""
    from gpuscope.collector.storage.store import Store
    from tests.integration.test_actions import A0, A1, B0, DATA_END, NB_BUSY, NB_IDLE, STEP, TRAIN
    from tests.integration.test_idle import fill

    db = tmp_path_factory.mktemp("actions-history") / "act.duckdb"
    with Store.open(db) as store:
        fill(store, [A0, A1, B0], [NB_IDLE, NB_BUSY, TRAIN],
             lambda g, ts: 0.7 if g == A1 else 0.0, end=DATA_END, step=STEP)  # fmt: skip
    return db

"""The week's inventories read once (report/inventory_sweep.py) equal ``inventory_at``
instant by instant: the same node and pod records in the same order, the same GPU indices.

On random cluster histories (tests/integration/cluster_history.py: pods that start
partway, GPUs shared by fractions, gaps in data) and on the report's constructed
fortnight, at every instant the report evaluates (the inventory's change points) and at
instants between them.
"""

from __future__ import annotations

import itertools
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from gpuscope.analytics.inventory import inventory_at
from gpuscope.analytics.report.fragmentation import change_points
from gpuscope.analytics.report.inventory_sweep import inventories
from gpuscope.collector.storage.store import Store
from tests.integration import cluster_history as ch
from tests.integration import report_week as rw


def _check(store: Store, start: datetime, end: datetime) -> int:
    cur = store.cursor()
    instants = change_points(cur, start, end)
    between = [a + (b - a) / 2 for a, b in itertools.pairwise(instants)]
    every = sorted({*instants, *between, end - timedelta(microseconds=1)})
    swept = list(inventories(cur, every))
    assert len(swept) == len(every)
    for at, got in zip(every, swept, strict=True):
        assert got == inventory_at(cur, at), at
    return sum(bool(nodes) for nodes, _, _ in swept)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=ch.histories())
def test_sweep_equals_inventory_at_on_random_histories(h: ch.History) -> None:
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "h.duckdb") as store:
        ch.write(store, h)
        assert _check(store, ch.T0, h.end) > 0


def test_sweep_equals_inventory_at_on_the_report_fortnight(tmp_path: Path) -> None:
    """Pods that come and go on Monday and Wednesday, a pod held across the fortnight."""
    with Store.open(rw.build(tmp_path / "f.duckdb")) as store:
        assert _check(store, rw.W09, rw.W11) >= 3

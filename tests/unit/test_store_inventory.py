"""The inventory's history: ``Store.record_inventory`` writes only the objects that changed,
and the tables read back as the set-based close/open of every full snapshot left them."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpuscope.collector.storage.store import Store
from gpuscope.collector.storage.store_sql import INVENTORY

T0 = datetime(2025, 3, 3, 10, 0, 0)
TABLE = "inventory_pods"

#: The statements record_inventory ran on every full snapshot before it compared in Python:
#: the reference the new writes must leave the same rows as.
REFERENCE = (
    f"""UPDATE {TABLE} SET valid_to = $now
    WHERE valid_to IS NULL AND NOT EXISTS (
        SELECT 1 FROM snap
        WHERE snap.key = {TABLE}.key AND snap.record = CAST({TABLE}.record AS VARCHAR))""",
    f"""INSERT INTO {TABLE}
    SELECT key, record, $now, NULL FROM snap
    WHERE NOT EXISTS (
        SELECT 1 FROM {TABLE} AS t WHERE t.valid_to IS NULL AND t.key = snap.key)""",
)
SNAP = "CREATE OR REPLACE TEMP TABLE snap (key VARCHAR, record VARCHAR)"
SNAP_ROW = "INSERT INTO snap VALUES (?, ?)"
CREATE = (
    f"CREATE TABLE {TABLE} (key VARCHAR NOT NULL, record JSON NOT NULL, "
    "valid_from TIMESTAMP NOT NULL, valid_to TIMESTAMP)"
)
READ_PHASES = f"SELECT key, record->>'phase', valid_from, valid_to FROM {TABLE} ORDER BY ALL"
READ = f"SELECT key, CAST(record AS VARCHAR), valid_from, valid_to FROM {TABLE} ORDER BY ALL"


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    phase: str
    gpus: int


def reference_record(con: duckdb.DuckDBPyConnection, now: datetime, pods: list[Pod]) -> None:
    texts = [
        json.dumps(vars(p), sort_keys=True, separators=(",", ":"), allow_nan=False) for p in pods
    ]
    snap = dict(zip((INVENTORY[TABLE](vars(p)) for p in pods), texts, strict=True))
    con.execute(SNAP)
    con.executemany(SNAP_ROW, list(snap.items()))
    for sql in REFERENCE:
        con.execute(sql, {"now": now})


def snapshots(seed: int, n: int) -> list[list[Pod]]:
    """Listings of a few pods that come, change phase or size, go and come back, with
    listings repeated unchanged and a pod listed twice (the last one counts)."""
    rng = random.Random(seed)
    out: list[list[Pod]] = []
    for _ in range(n):
        if out and rng.random() < 0.3:
            out.append(list(out[-1]))  # unchanged
            continue
        pods = [
            Pod("ns", f"p{i}", rng.choice(["Pending", "Running"]), rng.choice([1, 8]))
            for i in range(6)
            if rng.random() < 0.7
        ]
        if pods and rng.random() < 0.2:
            pods.append(Pod(pods[0].namespace, pods[0].name, "Running", 2))
        out.append(pods)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_history_reads_back_as_the_full_snapshots_wrote_it(tmp_path: Path, seed: int) -> None:
    ref = duckdb.connect()
    ref.execute(CREATE)
    with Store.open(tmp_path / "gpuscope.duckdb") as store:
        for i, pods in enumerate(snapshots(seed, 40)):
            now = T0 + timedelta(minutes=30 * i)
            store.record_inventory(now, pods=pods)
            reference_record(ref, now, pods)
        got = store.cursor().execute(READ).fetchall()
    want = ref.execute(READ).fetchall()
    assert got == want
    assert len({k for k, *_ in want}) > 3 and any(to is not None for *_, to in want)


def test_an_unchanged_listing_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same pods again: no statement beyond reading the current versions."""
    from gpuscope.collector.storage import store_records

    pods: list[Any] = [Pod("ns", "a", "Running", 8), Pod("ns", "b", "Pending", 1)]
    with Store.open(tmp_path / "gpuscope.duckdb") as store:
        store.record_inventory(T0, pods=pods)
        written: list[str] = []
        real = store_records.run_with

        def spy(con: Any, name: str, table: Any, sql: str, params: Any) -> None:
            written.append(name)
            real(con, name, table, sql, params)

        monkeypatch.setattr(store_records, "run_with", spy)
        store.record_inventory(T0 + timedelta(minutes=30), pods=list(reversed(pods)))
        assert written == []
        store.record_inventory(
            T0 + timedelta(minutes=60), pods=[pods[0], Pod("ns", "b", "Running", 1)]
        )
        assert written == ["closing", "opening"]
        rows = store.cursor().execute(READ_PHASES).fetchall()
    t1 = T0 + timedelta(minutes=60)
    assert rows == [
        ("ns/a", "Running", T0, None),
        ("ns/b", "Pending", T0, t1),
        ("ns/b", "Running", t1, None),
    ]

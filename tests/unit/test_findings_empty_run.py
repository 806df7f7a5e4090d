"""A detector run that finds nothing (most runs on a healthy cluster) stores its result with
one statement, the resolve, not three (issue 39): it still resolves its kinds' open
findings, and leaves other kinds' and the resolved ones as they were."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpuscope.collector.storage.store import Store

T0 = datetime(2025, 3, 3, 10, 0, 0)


def finding(fid: str, kind: str) -> dict[str, Any]:
    return {"id": fid, "kind": kind, "severity": "warning", "subject": {"node": fid},
            "since": T0, "observed_at": T0, "evidence": {}, "recommendation": None}  # fmt: skip


def test_an_empty_run_resolves_its_kinds_with_one_statement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store.open(tmp_path / "f.duckdb") as store:
        store.record_findings(
            [finding("a", "idle_session"), finding("b", "quota_overuse")],
            T0,
            kinds=["idle_session", "quota_overuse"],
        )
        statements: list[str] = []
        transaction = store._transaction

        class Counting:
            def __init__(self, con: Any) -> None:
                self._con = con

            def execute(self, sql: str, *args: Any) -> Any:
                statements.append(sql)
                return self._con.execute(sql, *args)

        @contextmanager
        def counted(**tables: Any) -> Iterator[Any]:
            with transaction(**tables) as con:
                yield Counting(con)

        monkeypatch.setattr(store, "_transaction", counted)
        later = T0 + timedelta(minutes=5)
        store.record_findings([], later, kinds=["idle_session", "link_errors"])
        assert len(statements) == 1
        still = [(f["id"], f["resolved_at"]) for f in store.findings(open_only=False)]
        assert sorted(still) == [("a", later), ("b", None)]
        # a run with findings still updates and inserts them
        statements.clear()
        store.record_findings([finding("c", "link_errors")], later, kinds=["link_errors"])
        assert len(statements) == 3
        assert sorted(f["id"] for f in store.findings()) == ["b", "c"]

"""The store's record writers: inventory history, findings, the action log, alert state.

A mixin of :class:`gpuscope.collector.storage.store.Store`; records arrive as dataclasses or
mappings and are kept as JSON beside the columns the queries need.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from gpuscope.collector.storage.store_sql import (
    INVENTORY,
    SCD_SQL,
    Q,
    StoreParts,
    as_dict,
    json_records,
    run_with,
    utc,
)


class RecordsMixin(StoreParts):
    """Inventory, findings, actions and alert state of a
    :class:`~gpuscope.collector.storage.store.Store`."""

    def record_inventory(
        self,
        now: datetime,
        *,
        nodes: Iterable[Any] | None = None,
        pods: Iterable[Any] | None = None,
        quotas: Iterable[Any] | None = None,
        pdbs: Iterable[Any] | None = None,
    ) -> None:
        """Record full snapshots (NodeInfo/PodInfo/QuotaInfo or mappings; PodDisruptionBudgets
        as :func:`~gpuscope.collector.cluster.pdb_records.budget_record` mappings) as history.

        A changed or vanished object's current version ends at ``now``, a new or changed
        one starts there; ``None`` leaves that kind alone. The snapshot is compared with the
        current versions here, so only the objects that changed are written (a listing of
        a steady cluster writes nothing).
        """
        snapshots = dict(zip(INVENTORY, (nodes, pods, quotas, pdbs), strict=True))
        with self._transaction() as con:
            for table, records in snapshots.items():
                if records is None:
                    continue
                rows = [as_dict(r) for r in records]
                texts = json_records(rows, ())["record"].to_pylist()
                snap = dict(zip(map(INVENTORY[table], rows), texts, strict=True))
                current_sql, close_sql, open_sql = SCD_SQL[table]
                current = dict(con.execute(current_sql).fetchall())
                closing = [k for k, text in current.items() if snap.get(k) != text]
                opening = {k: text for k, text in snap.items() if current.get(k) != text}
                params = {"now": utc(now)}
                if closing:
                    run_with(con, "closing", pa.table({"key": closing}), close_sql, params)
                if opening:
                    table_ = pa.table({"key": list(opening), "record": list(opening.values())})
                    run_with(con, "opening", table_, open_sql, params)

    def record_findings(
        self, findings: Iterable[Any], now: datetime, *, kinds: Iterable[str]
    ) -> None:
        """Upsert one detector run's findings (docs/design.md shape, mappings or dataclasses).

        Open findings of ``kinds`` that the run no longer reports are resolved at ``now``;
        a resolved finding that recurs opens a new row.
        """
        unique = {f["id"]: f for f in map(as_dict, findings)}.values()
        incoming = json_records(unique, ("since", "observed_at"))
        with self._transaction(incoming=incoming) as con:
            if incoming.num_rows:  # none: nothing to update or insert (issue 39: a run
                # that finds nothing, as most do, costs one statement, not three)
                con.execute(Q["update_findings"], {"now": utc(now)})
                con.execute(Q["insert_findings"], {"now": utc(now)})
            con.execute(Q["resolve_findings"], {"now": utc(now), "kinds": list(kinds)})

    def findings(self, *, open_only: bool = True) -> list[dict[str, Any]]:
        """Findings in the docs/design.md shape plus ``resolved_at``, oldest observation first."""
        return [
            {**json.loads(rec), "since": since, "observed_at": seen, "resolved_at": resolved}
            for rec, since, seen, resolved in self._query(Q["select_findings"], [open_only])
        ]

    def record_actions(self, actions: Iterable[Any], now: datetime) -> None:
        """Append actions (planned or carried out) to the audit log, each kept whole as JSON.

        Each has ``id`` and ``kind``, and may have ``at`` (else ``now``), ``finding_id``,
        ``dry_run`` (default true) and ``result``.
        """
        incoming = json_records(actions, ("at",))
        with self._transaction(incoming=incoming) as con:
            con.execute(Q["insert_actions"], {"now": utc(now)})

    def record_action_outcome(
        self,
        actions: Iterable[Any],
        now: datetime,
        *,
        dry_run: bool,
        save: Iterable[Any] = (),
        delete: Iterable[str] = (),
    ) -> None:
        """Audit rows and the executor's state change they cause, in one transaction: the
        state never says more, or less, than the audit (a crash keeps both or neither)."""
        audit = json_records(actions, ("at",))
        rows = json_records(save, ("created_at", "due_at"))
        keys = list(delete)
        with self._transaction() as con:
            run_with(con, "incoming", audit, Q["insert_actions"], {"now": utc(now)})
            if keys:
                con.execute(Q["delete_action_state"], {"keys": keys, "dry_run": dry_run})
            if rows.num_rows:
                run_with(con, "incoming", rows, Q["upsert_action_state"], {"now": utc(now)})

    def save_action_state(self, rows: Iterable[Any], now: datetime) -> None:
        """Upsert the executor's state rows by (``key``, ``dry_run``); see schema v4."""
        incoming = json_records(rows, ("created_at", "due_at"))
        with self._transaction(incoming=incoming) as con:
            con.execute(Q["upsert_action_state"], {"now": utc(now)})

    def delete_action_state(self, keys: Iterable[str], *, dry_run: bool) -> None:
        with self._transaction() as con:
            con.execute(Q["delete_action_state"], {"keys": list(keys), "dry_run": dry_run})

    def action_state(self, *, dry_run: bool) -> dict[str, dict[str, Any]]:
        """The executor's state rows of one mode by key (record fields, times as datetimes)."""
        rows = self._query(Q["select_action_state"], {"dry_run": dry_run})
        return {
            key: {**json.loads(rec), "kind": kind, "created_at": created, "due_at": due}
            for key, kind, created, due, rec in rows
        }

    def count_actions_since(self, since: datetime, *, dry_run: bool) -> int:
        """Actions done (or that would be done, in a dry run) since ``since``: rate limit."""
        rows = self._query(Q["count_actions_since"], {"since": utc(since), "dry_run": dry_run})
        return int(rows[0][0])

    def save_alert_state(self, states: Iterable[Any], now: datetime) -> None:
        """Upsert alert states by ``alert_id``: ``state``, ``since``, ``last_notified_at``."""
        incoming = json_records(states, ("since", "last_notified_at"))
        with self._transaction(incoming=incoming) as con:
            con.execute(Q["upsert_alert_state"], {"now": utc(now)})

    def alert_states(self) -> dict[str, dict[str, Any]]:
        """Every alert's last saved record by ``alert_id``, with ``updated_at``."""
        rows = self._query(Q["select_alert_state"])
        return {aid: {**json.loads(rec), "updated_at": upd} for aid, rec, upd in rows}

"""The store's alert tables: silences, notification groups and the delivery log.

A mixin of :class:`gpuscope.collector.storage.store.Store` beside
:mod:`gpuscope.collector.storage.store_records`
(which keeps
the per-alert state of migration 1). The alerts package decides what the rows mean; this
module only reads and writes them, in single transactions, with bound parameters (SQL in
gpuscope/collector/storage/sql/alerts.sql).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from importlib.resources import files
from typing import Any

from gpuscope.collector.storage.store_sql import StoreParts, json_records, utc


def _load(name: str) -> dict[str, str]:
    text = files("gpuscope.collector.storage").joinpath("sql", name).read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    return {n: body.strip() for n, body in zip(parts[1::2], parts[2::2], strict=True)}


#: Named queries from gpuscope/collector/storage/sql/alerts.sql.
AQ = _load("alerts.sql")
SILENCE_COLUMNS: tuple[str, ...] = ("id", "matchers", "starts_at", "ends_at", "created_by")
SILENCE_COLUMNS += ("comment", "created_at")
DELIVERY_COLUMNS: tuple[str, ...] = ("ts", "receiver", "receiver_type", "group_key", "status")
DELIVERY_COLUMNS += ("alerts", "attempt", "outcome", "http_status", "error", "duration_s")


class AlertsMixin(StoreParts):
    """Silences, notification groups and deliveries of a
    :class:`~gpuscope.collector.storage.store.Store`."""

    def delete_alert_states(self, alert_ids: Sequence[str]) -> None:
        """Forget alerts (a pending one that went away, a resolved one past retention)."""
        if alert_ids:
            with self._transaction() as con:
                con.execute(AQ["delete_alert_states"], {"ids": list(alert_ids)})

    # -- silences ---------------------------------------------------------------------------
    def add_silence(self, silence: dict[str, Any], now: datetime) -> None:
        """Store a silence: ``id``, ``matchers`` (list of strings), ``starts_at``,
        ``ends_at``, ``created_by``, ``comment``."""
        params = {
            "id": silence["id"],
            "matchers": json.dumps(list(silence["matchers"])),
            "starts_at": utc(silence["starts_at"]),
            "ends_at": utc(silence["ends_at"]),
            "created_by": silence.get("created_by", ""),
            "comment": silence.get("comment", ""),
            "now": utc(now),
        }
        with self._transaction() as con:
            con.execute(AQ["insert_silence"], params)

    def silences(self, now: datetime, *, include_expired: bool = False) -> list[dict[str, Any]]:
        """Active silences at ``now`` (or every one kept), newest first."""
        rows = self._query(AQ["select_silences"], {"all": include_expired, "now": utc(now)})
        out = []
        for row in rows:
            rec = dict(zip(SILENCE_COLUMNS, row, strict=True))
            rec["matchers"] = json.loads(rec["matchers"])
            out.append(rec)
        return out

    def expire_silence(self, silence_id: str, now: datetime) -> bool | None:
        """End a silence now: True if it was active or pending, False if it had already
        ended, None if there is no such silence."""
        with self._transaction() as con:
            changed = con.execute(
                AQ["expire_silence"], {"id": silence_id, "now": utc(now)}
            ).fetchall()
            if changed:
                return True
            found = con.execute(AQ["silence_exists"], {"id": silence_id}).fetchone()
        return False if found and found[0] else None

    # -- notification groups ----------------------------------------------------------------
    def alert_groups(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(receiver, group key) -> ``notified`` (alert ids last sent as firing) and
        ``last_notified_at``."""
        return {
            (receiver, key): {"notified": json.loads(notified), "last_notified_at": last}
            for receiver, key, notified, last in self._query(AQ["select_alert_groups"])
        }

    def save_alert_groups(self, groups: Iterable[dict[str, Any]]) -> None:
        incoming = json_records(groups, ("last_notified_at",))
        if incoming.num_rows:
            with self._transaction(incoming=incoming) as con:
                con.execute(AQ["upsert_alert_groups"])

    # -- deliveries -------------------------------------------------------------------------
    def record_deliveries(self, attempts: Iterable[Any]) -> None:
        """Append delivery attempts (mappings or dataclasses with DELIVERY_COLUMNS)."""
        incoming = json_records(attempts, ("ts",))
        if incoming.num_rows:
            with self._transaction(incoming=incoming) as con:
                con.execute(AQ["insert_deliveries"])

    def deliveries(
        self, *, receiver: str | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[list[dict[str, Any]], int]:
        """The delivery log, newest first, and how many rows it holds in all."""
        params = {"receiver": receiver, "limit": limit, "offset": offset}
        rows = self._query(AQ["select_deliveries"], params)
        total = self._query(AQ["count_deliveries"], {"receiver": receiver})[0][0]
        return [dict(zip(DELIVERY_COLUMNS, r, strict=True)) for r in rows], int(total)

    def prune_alerts(self, cut: datetime) -> None:
        """Drop ended silences, quiet groups and delivery rows older than ``cut``."""
        with self._transaction() as con:
            for name in ("delete_old_silences", "delete_empty_alert_groups",
                         "delete_old_deliveries"):  # fmt: skip
                con.execute(AQ[name], {"cut": utc(cut)})

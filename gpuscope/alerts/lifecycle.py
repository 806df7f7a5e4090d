"""The alert lifecycle, pending -> firing -> resolved, as a pure step over time.

:func:`advance` takes the alerts as the store last kept them, the candidates whose
condition holds now, and ``now``; it returns the new alerts and the ids to forget. The
engine stores both before it notifies anyone, so a restart resumes from the same place:
it neither fires an alert twice nor forgets one that was firing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from gpuscope.alerts.model import Alert, Candidate


def advance(
    previous: Mapping[str, Alert],
    candidates: Iterable[Candidate],
    now: datetime,
    *,
    retention: timedelta = timedelta(days=7),
    keep_rules: frozenset[str] | set[str] = frozenset(),
) -> tuple[dict[str, Alert], list[str]]:
    """One evaluation: (alerts by id, ids to delete).

    - a new condition is ``pending`` (``firing`` at once when its rule has no ``for``);
    - a pending one fires once it has held for ``for``;
    - a firing one that no longer holds is ``resolved``; a pending one is forgotten;
    - a resolved one that holds again starts over as a new occurrence;
    - resolved alerts are kept for ``retention`` (the API shows them), then forgotten;
    - alerts of ``keep_rules`` (rules that could not be evaluated) stay as they were.
    """
    current: dict[str, Alert] = {}
    seen: set[str] = set()
    for c in candidates:
        if c.id in seen:  # two findings with the same labels: one alert
            continue
        seen.add(c.id)
        prev = previous.get(c.id)
        if prev is None or prev.state == "resolved":
            active_since = now
            fired_at = None
        else:
            active_since = prev.active_since
            fired_at = prev.fired_at
        held = (now - active_since).total_seconds()
        if fired_at is None and held >= c.for_seconds:
            fired_at = now
        current[c.id] = Alert(
            id=c.id,
            rule=c.rule,
            state="firing" if fired_at is not None else "pending",
            labels=dict(c.labels),
            annotations=dict(c.annotations),
            active_since=active_since,
            fired_at=fired_at,
            value=c.value,
            evidence=dict(c.evidence),
        )
    forget: list[str] = []
    for aid, prev in previous.items():
        if aid in current:
            continue
        if prev.rule in keep_rules:
            current[aid] = prev
        elif prev.state == "firing":
            current[aid] = dataclasses.replace(prev, state="resolved", resolved_at=now)
        elif prev.state == "pending" or (
            prev.resolved_at is not None and now - prev.resolved_at > retention
        ):
            forget.append(aid)
        else:
            current[aid] = prev
    return current, forget


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def to_record(alert: Alert) -> dict[str, Any]:
    """The ``alert_state`` record of an alert (``alert_id``, ``state``, ``since`` and the
    alert itself)."""
    rec = dataclasses.asdict(alert)
    rec["alert_id"] = rec.pop("id")
    rec["since"] = alert.since
    for key in ("active_since", "fired_at", "resolved_at"):
        if rec[key] is not None:
            rec[key] = rec[key].isoformat()
    return rec


def from_record(rec: Mapping[str, Any]) -> Alert:
    active = _time(rec.get("active_since")) or _time(rec.get("since"))
    assert active is not None
    return Alert(
        id=str(rec["alert_id"]),
        rule=str(rec.get("rule", "")),
        state=rec["state"],
        labels=dict(rec.get("labels") or {}),
        annotations=dict(rec.get("annotations") or {}),
        active_since=active,
        fired_at=_time(rec.get("fired_at")),
        resolved_at=_time(rec.get("resolved_at")),
        value=rec.get("value"),
        evidence=dict(rec.get("evidence") or {}),
    )

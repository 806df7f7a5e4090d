"""Who hears about which alert, and when (pure): routes, groups, silences, inhibition.

Semantics follow Alertmanager's, so a site that knows one knows the other: a route tree
matched depth-first (the first matching child wins unless it has ``continue``), groups keyed
by the route's ``group_by`` labels (``...``: every label), silences and inhibition that mute
an alert without changing its state. A group is notified when an alert in it starts firing,
when one it was told about resolves, and again every ``repeat_interval`` while it fires.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpuscope.alerts.config import AlertsConfig, RouteConfig
from gpuscope.alerts.matchers import Matcher, match_all, parse_matchers
from gpuscope.alerts.model import Alert, Notification


@dataclass(frozen=True, slots=True)
class Route:
    """A matched leaf of the route tree: where an alert goes and how it is grouped."""

    receiver: str
    group_by: tuple[str, ...]
    repeat_interval: float
    path: str


def routes_for(labels: Mapping[str, str], config: AlertsConfig) -> list[Route]:
    """The routes an alert with ``labels`` takes (none when no route names a receiver)."""
    out: list[Route] = []

    def walk(node: RouteConfig, receiver: str, group_by: tuple[str, ...], repeat: float,
             path: str) -> bool:  # fmt: skip
        if not match_all(parse_matchers(node.matchers), labels):
            return False
        receiver = node.receiver or receiver
        group_by = tuple(node.group_by) if node.group_by is not None else group_by
        repeat = node.repeat_interval if node.repeat_interval is not None else repeat
        matched_child = False
        for i, child in enumerate(node.routes):
            if walk(child, receiver, group_by, repeat, f"{path}.{i}"):
                matched_child = True
                if not child.continue_:
                    break
        if not matched_child and receiver:
            out.append(Route(receiver, group_by, repeat, path))
        return True

    walk(config.route, "", tuple(config.group_by), config.repeat_interval, "0")
    # one delivery per receiver and route, even if two branches lead to the same place
    return list(dict.fromkeys(out))


def group_of(alert: Alert, route: Route) -> tuple[str, dict[str, str]]:
    """The group key of an alert on a route and the group's labels."""
    if "..." in route.group_by:
        labels = dict(alert.labels)
    else:
        labels = {k: alert.labels[k] for k in route.group_by if alert.labels.get(k)}
    key = f"{route.path}:{json.dumps(labels, sort_keys=True, separators=(',', ':'))}"
    return key, labels


def silenced_by(labels: Mapping[str, str], silences: Sequence[Sequence[Matcher]]) -> bool:
    return any(match_all(s, labels) for s in silences)


def inhibited(
    alerts: Iterable[Alert],
    rules: Sequence[tuple[tuple[Matcher, ...], tuple[Matcher, ...], Sequence[str]]],
) -> set[str]:
    """Ids of firing alerts muted by another firing alert (a node down mutes its GPUs)."""
    firing = [a for a in alerts if a.state == "firing"]
    muted: set[str] = set()
    for source_m, target_m, equal in rules:
        sources = [a for a in firing if match_all(source_m, a.labels)]
        if not sources:
            continue
        keys = {tuple(s.labels.get(k, "") for k in equal) for s in sources}
        source_ids = {s.id for s in sources}
        for a in firing:
            if a.id in source_ids or not match_all(target_m, a.labels):
                continue
            if tuple(a.labels.get(k, "") for k in equal) in keys:
                muted.add(a.id)
    return muted


@dataclass
class GroupState:
    """What a receiver was last told about a group (the ``alert_groups`` row)."""

    receiver: str
    group_key: str
    notified: list[str] = field(default_factory=list)
    last_notified_at: datetime | None = None

    def record(self) -> dict[str, Any]:
        return {
            "receiver": self.receiver,
            "group_key": self.group_key,
            "notified": sorted(self.notified),
            "last_notified_at": self.last_notified_at,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """A notification to send and the group state to keep once it is delivered."""

    notification: Notification
    after: GroupState


def plan(
    alerts: Iterable[Alert],
    config: AlertsConfig,
    groups: Mapping[tuple[str, str], GroupState],
    now: datetime,
    *,
    muted: set[str] | frozenset[str] = frozenset(),
    send_resolved: Mapping[str, bool] | None = None,
    always: frozenset[str] | set[str] = frozenset(),
) -> tuple[list[Plan], list[GroupState]]:
    """Notifications due now, and group states that change without one.

    Receivers in ``always`` (Alertmanager, which expires what is not re-posted) are sent
    their firing groups on every run.

    ``muted`` alerts (silenced or inhibited) are neither announced nor resolved: a group
    that was told one fires keeps it on its list until it really resolves.
    """
    members: dict[tuple[str, str], tuple[Route, dict[str, str], list[Alert]]] = {}
    for alert in alerts:
        if alert.state == "pending":
            continue
        for route in routes_for(alert.labels, config):
            key, labels = group_of(alert, route)
            members.setdefault((route.receiver, key), (route, labels, []))[2].append(alert)
    plans: list[Plan] = []
    quiet: list[GroupState] = []
    for (receiver, key), (route, labels, group) in sorted(members.items(), key=lambda x: x[0]):
        state = groups.get((receiver, key)) or GroupState(receiver, key)
        told = set(state.notified)
        firing = [a for a in group if a.state == "firing" and a.id not in muted]
        still_firing_muted = {a.id for a in group if a.state == "firing" and a.id in muted}
        resolved = [a for a in group if a.state == "resolved" and a.id in told]
        new = [a for a in firing if a.id not in told]
        last = state.last_notified_at
        repeat_due = bool(firing) and (
            receiver in always
            or last is None
            or now - last >= timedelta(seconds=route.repeat_interval)
        )
        announce_resolved = resolved and (send_resolved or {}).get(receiver, True)
        after = GroupState(
            receiver, key, sorted({a.id for a in firing} | (told & still_firing_muted)), now
        )
        if new or announce_resolved or repeat_due:
            ordered = sorted(firing, key=_order) + sorted(resolved, key=_order)
            if not announce_resolved:
                ordered = sorted(firing, key=_order)
            if ordered:
                note = Notification(receiver, key, labels, tuple(ordered), config.dashboard_url)
                plans.append(Plan(note, after))
                continue
        if set(after.notified) != told:  # resolved without announcing: forget quietly
            quiet.append(GroupState(receiver, key, after.notified, state.last_notified_at))
    return plans, quiet


def _order(a: Alert) -> tuple[int, str, str]:
    rank = {"critical": 0, "warning": 1, "info": 2}.get(a.severity, 3)
    return rank, a.labels.get("alertname", ""), json.dumps(a.labels, sort_keys=True)

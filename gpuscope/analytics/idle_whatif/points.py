"""What the idle-policy replay tries: the ladder of thresholds and the configured policies.

A point is an idle threshold (stop a session the first instant it has been idle this many
minutes) or a time limit (stop it at this age), each with the warning period a policy
waits between its warning and its act (the session must stay idle through it, so an idle
point stops at ``minutes + warning``). The ladder covers every session replayed; a
configured policy covers what it selects (its namespaces and labels).

Configured policies are the ``idle`` and ``time_limit`` policies of
``actions.policy_file``. The actions layer sits above analytics (docs/design.md: layers
point one way), so the file is read here as plain YAML and only the fields the replay
needs are taken, with the same defaults as :class:`gpuscope.actions.policy.Policy` (a
test holds them equal); an unreadable file is one note, never an error: the replay is a
look back, and the actions job reports a bad file itself. Without an idle policy the
idle detector's window (``analytics.idle_window_minutes``) is the configured point, and
``analytics.max_session_age_hours`` without a time-limit policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import Settings
from gpuscope.core.settings_layers import read_yaml_file

#: The default ladder of idle thresholds, minutes: what sites run, from
#: jupyterhub-idle-culler's hour to Kubeflow's day.
IDLE_LADDER_MINUTES: tuple[float, ...] = (15, 30, 60, 120, 240, 480, 1440)
#: The default ladder of time limits, hours.
TIME_LIMIT_LADDER_HOURS: tuple[float, ...] = (8, 12, 24, 48, 72, 168)
#: gpuscope.actions.policy.Policy's default warning period (minutes).
POLICY_WARNING_MINUTES = 30.0
#: The longest idle threshold or time limit a replay takes (a week), minutes.
MAX_MINUTES = 7 * 24 * 60.0

Kind = Literal["idle", "time_limit"]


@dataclass(frozen=True, slots=True)
class Point:
    """One policy to replay: ``minutes`` idle (``idle``) or of age (``time_limit``), the
    warning period, where it comes from (``ladder``, ``policy``, ``detector``), the
    policy's name and what it selects (empty: every session replayed)."""

    kind: Kind
    minutes: float
    warning_minutes: float = 0.0
    source: str = "ladder"
    name: str = ""
    namespaces: tuple[str, ...] = ()
    match_labels: tuple[tuple[str, str], ...] = field(default=())

    @property
    def stop_after(self) -> timedelta:
        """Idle (or age) at which the session is stopped: the threshold and the warning."""
        return timedelta(minutes=self.minutes + self.warning_minutes)

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether this point selects a session in ``namespace`` with ``labels``."""
        if self.namespaces and namespace not in self.namespaces:
            return False
        return all(labels.get(k) == v for k, v in self.match_labels)

    @property
    def selective(self) -> bool:
        return bool(self.namespaces or self.match_labels)


def ladder(kind: Kind, values: Sequence[float] | None, warning_minutes: float = 0.0) -> list[Point]:
    """The ladder: ``values`` (minutes for idle, hours for time limits; None: the default
    ladder), each once, ascending."""
    if values is None:
        values = IDLE_LADDER_MINUTES if kind == "idle" else TIME_LIMIT_LADDER_HOURS
    scale = 1.0 if kind == "idle" else 60.0
    return [Point(kind, float(v) * scale, warning_minutes) for v in sorted(set(values))]


def _policy_point(raw: Mapping[str, Any], settings: Settings) -> Point | None:
    kind = raw.get("type")
    if kind not in ("idle", "time_limit"):
        return None
    warning = float(raw.get("warning_minutes", POLICY_WARNING_MINUTES))
    if kind == "idle":
        minutes = float(raw.get("idle_minutes") or settings.analytics.idle_window_minutes)
    else:
        minutes = float(raw["max_session_age_hours"]) * 60
    labels = raw.get("match_labels") or {}
    return Point(
        kind,
        minutes,
        warning,
        source="policy",
        name=str(raw.get("name", "")),
        namespaces=tuple(str(n) for n in raw.get("namespaces") or ()),
        match_labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
    )


def configured(settings: Settings) -> tuple[list[Point], list[str]]:
    """The configured points (idle and time limit) and notes on how they were found."""
    points: list[Point] = []
    notes: list[str] = []
    path = settings.actions.policy_file
    if path is not None:
        try:
            doc = read_yaml_file(path, "policy file")
            for raw in (doc or {}).get("policies") or []:
                point = _policy_point(raw, settings) if isinstance(raw, dict) else None
                if point is not None:
                    points.append(point)
        except (ConfigError, AttributeError, KeyError, TypeError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            notes.append(f"the policy file could not be read ({first}); no policy replayed")
            points = []
    an = settings.analytics
    if not any(p.kind == "idle" for p in points):
        points.append(Point("idle", an.idle_window_minutes, 0.0, source="detector"))
    if not any(p.kind == "time_limit" for p in points) and an.max_session_age_hours > 0:
        points.append(Point("time_limit", an.max_session_age_hours * 60, 0.0, source="detector"))
    return points, notes


def describe(point: Point) -> str:
    """How a point reads in a sentence."""
    amount = (
        f"{point.minutes:g} minutes idle"
        if point.kind == "idle"
        else f"{point.minutes / 60:g} hours of age"
    )
    if point.warning_minutes:
        amount += f" + {point.warning_minutes:g} minutes' warning"
    if point.source == "policy":
        return f"policy {point.name} ({amount})"
    if point.source == "detector":
        return f"the idle detector's setting ({amount}; no policy configured)"
    return amount

"""One way to write a time for people and programs: RFC 3339 in UTC with a ``Z``.

The API, the CLI's hints and the demo print times this way, and ``--at`` and the API's
query parameters read it back, so a time copied from one answer can be pasted into the next
question. The store keeps naive UTC ``TIMESTAMP`` values and some records keep Unix seconds;
:func:`api_times` rewrites the time fields of an answer, whatever form they arrive in.
Standard library only: the agent imports this package too.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

#: Keys whose values are points in time in the API's answers (records, evidence, alerts,
#: silences, targets, inventory), wherever they nest.
TIME_KEYS = frozenset(
    {
        "since", "observed_at", "resolved_at", "idle_since", "waiting_since", "as_of",
        "last_scrape", "last_success", "start_time", "start", "end", "ts",
        "starts_at", "ends_at", "created_at", "updated_at", "active_since", "fired_at",
        "last_notified_at", "due_at", "valid_from", "valid_to", "data_until", "at",
    }
)  # fmt: skip
#: The years a time the CLI (``--at``, ``--week``) or the API (``at``, ``week``) names may
#: fall in: further out, the detectors' look-back windows and the report's week arithmetic
#: leave the calendar.
FIRST_YEAR, LAST_YEAR = 1970, 2999
#: Numbers below this (1 Jan 2001) under a time key are not Unix times; left alone.
_MIN_EPOCH = 978_307_200


def rfc3339(value: datetime | float) -> str:
    """``2026-11-23T00:10:26Z`` (fractions of a second kept when there are any); a naive
    datetime is taken as UTC, as the store keeps them; a number is Unix seconds."""
    if isinstance(value, int | float):
        dt = datetime.fromtimestamp(float(value), UTC)
    elif value.tzinfo is None:
        dt = value.replace(tzinfo=UTC)
    else:
        dt = value.astimezone(UTC)
    spec = "microseconds" if dt.microsecond else "seconds"
    return dt.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def _time(value: Any) -> Any:
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] in "T ":
        try:
            return rfc3339(datetime.fromisoformat(value))
        except ValueError:
            return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= _MIN_EPOCH:
        return rfc3339(value)
    return value


def api_times(obj: Any, key: str | None = None) -> Any:
    """``obj`` with every datetime, and every value under a :data:`TIME_KEYS` key (ISO text
    with or without an offset, or Unix seconds), written by :func:`rfc3339`."""
    if isinstance(obj, Mapping):
        return {k: api_times(v, k) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [api_times(v, key) for v in obj]
    if isinstance(obj, datetime) or key in TIME_KEYS:
        return _time(obj)
    return obj

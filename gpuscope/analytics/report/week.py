"""The week a report covers: an ISO 8601 week in UTC, Monday 00:00 to the next Monday.

ISO weeks are what people write (``2025-W10``) and they never straddle two reports; UTC
keeps a week 168 hours long whatever the operators' daylight saving does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from gpuscope.collector.storage.store import utc
from gpuscope.core.errors import UserError

_WEEK = re.compile(r"^(\d{4})-?W(\d{2})$")


@dataclass(frozen=True, slots=True, order=True)
class Week:
    """ISO year and week number; times are naive UTC like the store's."""

    year: int
    number: int

    def __post_init__(self) -> None:
        try:
            date.fromisocalendar(self.year, self.number, 1)
        except ValueError:
            raise UserError(f"{self.year}-W{self.number:02d} is not an ISO week") from None

    @classmethod
    def parse(cls, text: str) -> Week:
        """``2025-W10`` (or ``2025W10``)."""
        m = _WEEK.match(text.strip())
        if m is None:
            raise UserError(f"week {text!r}: expected YYYY-Www, e.g. 2025-W10")
        return cls(int(m.group(1)), int(m.group(2)))

    @classmethod
    def containing(cls, when: datetime) -> Week:
        iso = utc(when).isocalendar()
        return cls(iso.year, iso.week)

    @classmethod
    def last_complete(cls, now: datetime) -> Week:
        """The latest week that has ended by ``now``: last week, whatever today is."""
        return cls.containing(utc(now) - timedelta(days=7))

    @property
    def label(self) -> str:
        return f"{self.year}-W{self.number:02d}"

    @property
    def start(self) -> datetime:
        d = date.fromisocalendar(self.year, self.number, 1)
        return datetime(d.year, d.month, d.day)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(days=7)

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600

    def previous(self) -> Week:
        return Week.containing(self.start - timedelta(days=1))

    def check_over(self, now: datetime) -> None:
        """Refuse a week that has not ended: its numbers would change under the reader."""
        if self.end > utc(now):
            raise UserError(
                f"week {self.label} is not over until {self.end.isoformat()}Z; report a past week"
            )

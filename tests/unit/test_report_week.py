"""The report's week (ISO 8601, UTC) and how its cells are formatted."""

from datetime import UTC, datetime

import pytest

from gpuscope.analytics.report.html import format_cell
from gpuscope.analytics.report.week import Week
from gpuscope.core.errors import UserError


def test_iso_week_bounds_are_monday_to_monday_utc() -> None:
    """2025-W10 runs from Mon 3 March 00:00 to Mon 10 March 00:00, 168 hours."""
    w = Week.parse("2025-W10")
    assert (w.start, w.end, w.hours) == (datetime(2025, 3, 3), datetime(2025, 3, 10), 168.0)
    assert w.label == "2025-W10"
    assert w.previous() == Week(2025, 9)


def test_week_53_and_the_year_boundary() -> None:
    """ISO years have 52 or 53 weeks; week 1 of 2026 starts in December 2025."""
    assert Week.parse("2020W53").start == datetime(2020, 12, 28)
    assert Week(2026, 1).start == datetime(2025, 12, 29)
    assert Week(2026, 1).previous() == Week(2025, 52)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (datetime(2025, 3, 10, 7, 0, tzinfo=UTC), "2025-W10"),  # Monday morning: last week
        (datetime(2025, 3, 16, 23, 59, tzinfo=UTC), "2025-W10"),  # Sunday night: still it
        (datetime(2025, 3, 17, 0, 0, tzinfo=UTC), "2025-W11"),
    ],
)
def test_default_week_is_the_last_complete_one(now: datetime, expected: str) -> None:
    assert Week.last_complete(now).label == expected
    Week.last_complete(now).check_over(now)  # never refused


@pytest.mark.parametrize("text", ["2025-W54", "2021-W53", "2025-10", "W10", "2025-W1x", ""])
def test_bad_weeks_are_one_clear_error(text: str) -> None:
    with pytest.raises(UserError, match=r"week|ISO"):
        Week.parse(text)


def test_a_week_not_over_is_refused() -> None:
    """Its numbers would still change."""
    with pytest.raises(UserError, match="not over"):
        Week.parse("2025-W10").check_over(datetime(2025, 3, 9, 23, 0))


@pytest.mark.parametrize(
    ("column", "value", "shown"),
    [
        ("allocated_gpu_hours", 1234.56, "1,234.6"),
        ("allocated_change_gpu_hours", 300.0, "+300.0"),
        ("efficiency", 0.4857, "48.6 %"),
        ("efficiency_change", -0.1143, "-11.4 pts"),
        ("idle_cost", 450.0, "450.00 EUR"),
        ("efficiency", None, "—"),
        ("interactive", True, "yes"),
        ("actions", 3, "3"),
        ("link_bytes_per_second", 50e9, "50.0 GB/s"),
    ],
)
def test_cells_are_formatted_by_their_column(column: str, value: object, shown: str) -> None:
    """A missing value is a dash, never 0; ratios are percentages, changes are signed."""
    assert format_cell(column, value, "EUR") == shown

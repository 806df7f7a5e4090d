"""How a gap in a GPU's data is judged: the one rule the idle detector and the report share.

A gap (the collector down, an agent restarting) is judged by the samples on both sides of
it. Idle on both sides: the session was idle through it, and its idle time runs on across
the gap. Busy on either side (or no sample on one side): what happened during the gap is
unknown, never idle, and an idle stretch starts again after it. Before this rule the
detector restarted the idle clock after every gap and the report counted the gap as no
data, so they disagreed with each other and with the truth (issue 21).

A gap longer than :data:`MAX_BRIDGED_GAP` is never bridged: an outage of hours (a day
without a collector) is too long to vouch for, and stays no data, unknown.

The rule is one SQL expression, :data:`BRIDGED`, over two boolean columns named
``before_busy`` and ``after_busy`` (NULL: no sample on that side) and ``gap_s``, the
seconds without data between them. The detector's fold
(``sql/idle.sql``) and the report's hourly use (``report/report.sql``) have it substituted
for ``{bridged}``, so neither can drift from the other.
"""

from __future__ import annotations

from datetime import timedelta

#: The longest gap in data a session can be judged idle through.
MAX_BRIDGED_GAP = timedelta(hours=2)

#: True when a gap of ``gap_s`` seconds between a sample (or bucket) whose busy flag is
#: ``before_busy`` and the next one, ``after_busy``, was idle through: both known, both
#: idle, and the gap no longer than MAX_BRIDGED_GAP.
BRIDGED = (
    "(coalesce(NOT before_busy, false) AND coalesce(NOT after_busy, false)"
    f" AND coalesce(gap_s <= {int(MAX_BRIDGED_GAP.total_seconds())}, false))"
)


def with_rule(sql: str) -> str:
    """``sql`` with ``{bridged}`` replaced by the shared rule."""
    return sql.replace("{bridged}", BRIDGED)


def bridged(before_busy: bool | None, after_busy: bool | None, gap_s: float) -> bool:
    """The rule in Python, for tests and for wording a finding (same truth table)."""
    short = gap_s <= MAX_BRIDGED_GAP.total_seconds()
    return before_busy is False and after_busy is False and short


def gap_note(longest_gap_s: float) -> str:
    """What an idle finding says about a gap it was judged idle through."""
    minutes = round(longest_gap_s / 60)
    return f"idle through a {minutes}-minute gap in data"

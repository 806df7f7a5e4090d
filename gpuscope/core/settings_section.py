"""What every section of the settings model shares: its base (no unknown key, frozen, no
NaN or infinity) and the upper bounds of durations and sizes.

Apart from gpuscope/core/settings.py so that the sections declared in modules of their own
(gpuscope/core/collector_settings.py) and the model that gathers them share one base
without importing each other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["DAY_SECONDS", "DB_MEMORY_LIMIT", "MAX_DAYS", "WEEK_MINUTES", "Section"]


#: Upper bounds of durations: past them a schedule or a time window overflows the clock (and
#: no site means them): intervals up to a day, windows up to a week, retention a century.
DAY_SECONDS = 86_400
WEEK_MINUTES = 7 * 24 * 60
MAX_DAYS = 36_500
#: A DuckDB memory size (``512MB``, ``2GiB``) or a share of RAM (``25%``).
DB_MEMORY_LIMIT = r"^\s*[0-9]+(\.[0-9]+)?\s*(B|[KMGT]i?B|%)\s*$"


class Section(BaseModel):
    # No NaN or infinity anywhere: ``inf`` seconds or days overflow every clock sum.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

"""The weekly report's named SQL (gpuscope/analytics/report/report.sql) and how it is run.

DuckDB refuses a named parameter that its statement does not use, so :func:`run` binds
only those the statement names; callers pass one set of parameters to every query.
"""

from __future__ import annotations

import re
from importlib.resources import files

from gpuscope.analytics.detectors.idle_gaps import with_rule
from gpuscope.analytics.named_sql import frame, run
from gpuscope.collector.storage.held_gpus import with_held_gpus

__all__ = ["Q", "frame", "run"]


def _load_queries() -> dict[str, str]:
    text = files("gpuscope.analytics.report").joinpath("report.sql").read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\n", text, flags=re.MULTILINE)
    named = zip(parts[1::2], parts[2::2], strict=True)
    return {name: with_rule(with_held_gpus(body.strip())) for name, body in named}


#: Named queries from gpuscope/analytics/report/report.sql.
Q = _load_queries()

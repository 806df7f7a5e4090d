"""How long a sample's step is: the one rule the bandwidth queries take a rate by.

A counter's stored sample is its increase since the sample before it in its series, so
its step is the time since that sample; the first sample read has none and starts the
series (no rate). Under fleet summaries (``collector.query.summaries``, docs/scale.md,
"Fleet summaries") a hot port's or link's increases are stored as gauges under the
counter's name, one bucket's increase a sample at the bucket's last second, only in the
buckets it was over the floor: a series of kind ``gauge`` with no sample before it covers
its own bucket (``$bucket_s``), so its first stored bucket counts. A later one covers the
time since the sample before (unstored buckets between read as one step: a lower rate,
never a false hot one).

Named SQL in sql/bandwidth.sql has ``{step_s}`` substituted (:func:`with_steps`), over the
unqualified columns ``series_id`` and ``ts`` (the sample's) and a CTE ``gauge_series`` the
query defines (``series_id``: its series of kind ``gauge``). The kind is asked of that CTE,
not joined to every sample: a join cost the direct-scraped history's port re-analysis ~15 %
(bench/quota_bandwidth.py's store, 16 ports' 36 windows), the ``IN`` 2-4 % (loaded 2 cores).
"""

from __future__ import annotations

#: SQL: the seconds a sample's step covers (NULL: the first sample of a counter series).
STEP_S = (
    "coalesce(epoch(ts) - epoch(lag(ts) OVER (PARTITION BY series_id ORDER BY ts)),"
    " CASE WHEN series_id IN (SELECT series_id FROM gauge_series) THEN $bucket_s END)"
)


def with_steps(sql: str) -> str:
    """``sql`` with ``{step_s}`` replaced by the rule."""
    return sql.replace("{step_s}", STEP_S)

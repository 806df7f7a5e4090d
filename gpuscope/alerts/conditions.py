"""Read what metric and target rules compare: per-series window aggregates from the store.

The only I/O of rule evaluation. The store keeps a counter's samples as increases, so a
window's ``sum`` is the counter's increase; ``series.last_seen`` says when a series was last
scraped (``stale``). One query for every metric rule of a run (:func:`metric_windows`): a
statement costs ~9 ms of CPU on a small store whatever it reads, four shipped rules were
four (issue 39); one query per rule when that one fails, so that a failing rule fails
alone. That query reads only the series a rule's first ``label="value"`` matcher selects
(:func:`equality_filter`): the shipped GpuUncorrectedEccErrors rule's hour of samples is
then its uncorrected counters', half of every ECC counter's.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpuscope.alerts.config import MetricRule, TargetDownRule
from gpuscope.alerts.matchers import parse_matchers
from gpuscope.alerts.model import Candidate
from gpuscope.alerts.rules import SeriesWindow, grouped_candidates, selected, target_candidates
from gpuscope.collector.storage.schema import GET_META, QUERY_CURSOR_KEY
from gpuscope.collector.storage.store_sql import LABEL_COLUMNS, utc
from gpuscope.collector.storage.writer_log import seen_bound

#: Every series of the metric seen since the rule's lookback, with its samples in ($lo, $now];
#: its staleness from its newest sample in the window too. ``series.last_seen`` lags a
#: series' newest sample by up to LAST_SEEN_LAG_S between the writer's folds
#: (collector/storage/writer_log.py), so $seen_lo is the lookback less that much.
SERIES_WINDOW = """
SELECT s.node, s.gpu, s.uuid, s.mig_instance, s.device, s.port,
       s.namespace, s.pod, s.container, s.labels,
       count(x.value), coalesce(sum(x.value), 0), min(x.value), max(x.value),
       arg_max(x.value, x.ts),
       epoch(CAST($now AS TIMESTAMP) - greatest(max(s.last_seen), max(x.ts)))
FROM series AS s
LEFT JOIN samples AS x ON x.series_id = s.series_id AND x.ts > $lo AND x.ts <= $now
WHERE s.metric = $metric AND s.last_seen > $seen_lo AND s.first_seen <= $now
GROUP BY ALL
"""

_LABEL_COLS = (
    LABEL_COLUMNS  # node, gpu, uuid, mig_instance, device, port, namespace, pod, container
)
#: A series' value of the label named ``r.eq_label``, as :func:`_window` builds its labels:
#: the ``labels`` map's entry over the column's, "" where it has neither (a matcher reads a
#: missing label as ""). The column names are the store's own, not input.
_LABEL_VALUE = (
    "coalesce(map_extract_value(s.labels, r.eq_label), CASE r.eq_label "
    + " ".join(f"WHEN '{c}' THEN s.{c}" for c in _LABEL_COLS)
    + " END, '')"
)

#: :data:`SERIES_WINDOW` for several rules at once, each row tagged with its rule's place
#: in the lists ($rule, $metric, $lo, $seen_lo, and $eq_label and $eq_value, a rule's
#: :func:`equality_filter` or nulls: one element a rule). The samples are read
#: once, over the longest window ($min_lo, a constant, so that DuckDB skips the row groups
#: before it by their min/max statistics), and each rule takes those in its own window.
#: The samples are aggregated by series first and labelled after: grouped by the ten label
#: columns, the hour of every GPU's ECC counters that GpuUncorrectedEccErrors reads (92,672
#: rows at 8 agents) cost 53 ms of a 73 ms query; by series id, the query takes 47 ms.
SERIES_WINDOWS = """
WITH rules AS (
    SELECT unnest($rule) AS rule, unnest($metric) AS metric, unnest($lo) AS lo,
           unnest($seen_lo) AS seen_lo, unnest(CAST($eq_label AS VARCHAR[])) AS eq_label,
           unnest(CAST($eq_value AS VARCHAR[])) AS eq_value
),
chosen AS (
    SELECT r.rule, r.lo, s.series_id
    FROM rules AS r
    JOIN series AS s ON s.metric = r.metric AND s.last_seen > r.seen_lo AND s.first_seen <= $now
    WHERE r.eq_label IS NULL OR {label_value} = r.eq_value
),
per_series AS (
    SELECT c.rule, c.series_id, count(x.value) AS n, sum(x.value) AS total,
           min(x.value) AS least_v, max(x.value) AS most_v,
           arg_max(x.value, x.ts) AS last_v, max(x.ts) AS last_ts
    FROM chosen AS c
    LEFT JOIN samples AS x ON x.series_id = c.series_id AND x.ts > c.lo AND x.ts <= $now
                              AND x.ts > $min_lo
    GROUP BY c.rule, c.series_id
)
SELECT p.rule, s.node, s.gpu, s.uuid, s.mig_instance, s.device, s.port,
       s.namespace, s.pod, s.container, s.labels,
       sum(p.n), coalesce(sum(p.total), 0), min(p.least_v), max(p.most_v),
       arg_max(p.last_v, p.last_ts),
       epoch(CAST($now AS TIMESTAMP) - greatest(max(s.last_seen), max(p.last_ts)))
FROM per_series AS p JOIN series AS s USING (series_id)
GROUP BY ALL
""".replace("{label_value}", _LABEL_VALUE)

#: Targets scraped since $recent whose last scrape failed; how long since they were last up
#: (or since their first failure in the last day).
TARGETS_DOWN = """
WITH t AS (
    SELECT target, arg_max(up, ts) AS up, arg_max(error, ts) AS error, max(ts) AS last_ts,
           max(ts) FILTER (WHERE up) AS last_up, min(ts) FILTER (WHERE NOT up) AS first_down
    FROM scrapes WHERE ts > $day AND ts <= $now
    GROUP BY target
)
SELECT target, error,
       epoch(CAST($now AS TIMESTAMP) - coalesce(last_up, first_down))
FROM t WHERE NOT up AND last_ts > $recent
ORDER BY target
"""


def equality_filter(rule: MetricRule) -> tuple[str, str] | None:
    """The (label, value) of the rule's first ``label="value"`` matcher with a value, which
    the one query for all rules applies to the series it reads (the rule's matchers are
    all applied to what it returns, once, by :func:`evaluate_metric`); None for a rule
    without one."""
    for m in parse_matchers(rule.matchers):
        if m.op == "=" and m.value:
            return m.name, m.value
    return None


@dataclass(frozen=True, slots=True)
class DataView:
    """What the stored samples can say at a time: the newest time they are complete up to
    (``horizon``) and their spacing (``step_s``).

    Scraped directly, samples are complete up to now and a window of any length holds
    some. Read from a query API they are complete only up to the query source's cursors
    (``meta.query_cursor``), and in fleet mode there is one sample a series per 5-minute
    bucket, at its last second: a rule judged at ``now`` over 3 minutes would find every
    node's ``gpuscope_agent_info`` stale (the newest bucket stored ends 1.5 to 6.5 minutes
    before now), whatever the nodes did. So a rule is judged at the horizon, over its
    window rounded up to whole steps (a 3-minute staleness is "absent from the newest
    bucket stored"; an hour's increase is the last twelve buckets'). A shard behind holds
    the horizon back: no rule calls a node down for a bucket not yet asked (the lag shows
    in ``/api/v1/status`` and ``gpuscope_collector_query_lag_seconds``).
    """

    horizon: datetime | None = None
    step_s: float = 0.0

    def at(self, now: datetime) -> datetime:
        at = utc(now)
        return at if self.horizon is None else min(at, self.horizon)

    def window(self, seconds: float) -> float:
        if self.step_s <= 0:
            return seconds
        return max(1, math.ceil(seconds / self.step_s - 1e-9)) * self.step_s


DIRECT = DataView()


def data_view(con: Any) -> DataView:
    """The store's :class:`DataView`, from the query source's saved windows (scraped
    directly: samples complete up to now, at any spacing)."""
    rows = con.execute(GET_META, [QUERY_CURSOR_KEY]).fetchall()
    if not rows:
        return DIRECT
    try:
        saved = json.loads(str(rows[0][0]))
        step = float(saved["step"])
        cursors = [float(c) for c in saved["cursors"].values() if c is not None]
    except (ValueError, KeyError, TypeError, AttributeError):
        return DIRECT
    if not cursors:
        return DIRECT
    # fleet: a bucket's sample is at its last second; pull: a step's at the step
    newest = min(cursors) - (1.0 if saved.get("mode") == "fleet" else step)
    fleet = saved.get("mode") == "fleet"
    return DataView(utc(newest), step if fleet else 0.0)


def _bounds(rule: MetricRule, now: datetime, view: DataView) -> dict[str, Any]:
    """The rule's bound parameters: its metric, the time judged, its window's start and
    the series prefilter."""
    at = view.at(now)
    window = view.window(rule.window)
    return {
        "metric": rule.metric,
        "now": at,
        "lo": at - timedelta(seconds=window),
        "seen_lo": seen_bound(at - timedelta(seconds=max(rule.lookback, window))),
    }


def _window(row: tuple[Any, ...]) -> SeriesWindow:
    cols, extra, stats = row[:9], row[9], row[10:]
    labels = {k: v for k, v in zip(_LABEL_COLS, cols, strict=True) if v is not None}
    labels.update(extra or {})
    count, total, lo, hi, last, age = stats
    return SeriesWindow(labels, int(count), float(total), float(lo or 0.0),
                        float(hi or 0.0), float(last or 0.0), float(age))  # fmt: skip


def series_windows(
    con: Any, rule: MetricRule, now: datetime, view: DataView = DIRECT
) -> list[SeriesWindow]:
    return [_window(row) for row in con.execute(SERIES_WINDOW, _bounds(rule, now, view)).fetchall()]


def metric_windows(
    con: Any, rules: Sequence[MetricRule], now: datetime, view: DataView = DIRECT
) -> list[list[SeriesWindow]]:
    """:func:`series_windows` of each of ``rules`` (in their order), in one query, less
    the series a rule's :func:`equality_filter` leaves out (its matchers would drop them)."""
    if not rules:
        return []
    bounds = [_bounds(rule, now, view) for rule in rules]
    filters = [equality_filter(rule) for rule in rules]
    params = {
        "rule": list(range(len(rules))),
        "metric": [b["metric"] for b in bounds],
        "lo": [b["lo"] for b in bounds],
        "seen_lo": [b["seen_lo"] for b in bounds],
        "eq_label": [eq[0] if eq else None for eq in filters],
        "eq_value": [eq[1] if eq else None for eq in filters],
        "now": view.at(now),
        "min_lo": min(b["lo"] for b in bounds),
    }
    out: list[list[SeriesWindow]] = [[] for _ in rules]
    for row in con.execute(SERIES_WINDOWS, params).fetchall():
        out[row[0]].append(_window(row[1:]))
    return out


def evaluate_metric(
    con: Any,
    rule: MetricRule,
    now: datetime,
    view: DataView = DIRECT,
    windows: list[SeriesWindow] | None = None,
) -> list[Candidate]:
    """The rule's candidates, judged on what the store can say (:class:`DataView`): its
    window whole steps long (a rate divides by that). ``windows``: its
    :func:`series_windows`, when :func:`metric_windows` has read them already."""
    if view.window(rule.window) != rule.window:
        rule = rule.model_copy(update={"window": view.window(rule.window)})
    # the matchers first, for every aggregate: a fresh series they leave out keeps no
    # stale rule's group fresh
    rows = selected(rule, series_windows(con, rule, now, view) if windows is None else windows)
    if rule.aggregate == "stale":
        # a group is stale only if none of its series is fresh: keep every series seen
        fresh = [r for r in rows if r.age_seconds < rule.window]
        stale = [r for r in rows if r.age_seconds >= rule.window]
        groups_fresh = {tuple(r.labels.get(k, "") for k in rule.by) for r in fresh}
        rows = [r for r in stale if tuple(r.labels.get(k, "") for k in rule.by)
                not in groups_fresh]  # fmt: skip
    else:
        rows = [r for r in rows if r.count > 0]
    return grouped_candidates(rule, rows)


def evaluate_targets(con: Any, rule: TargetDownRule, now: datetime) -> list[Candidate]:
    at = utc(now)
    params = {
        "now": at,
        "day": at - timedelta(seconds=max(rule.lookback, 86400.0)),
        "recent": at - timedelta(seconds=rule.lookback),
    }
    rows: Iterable[tuple[str, str | None, float]] = con.execute(TARGETS_DOWN, params).fetchall()
    return target_candidates(rule, [(t, e, float(d or 0.0)) for t, e, d in rows])

"""The idle-policy replay's inputs, read from the store (the I/O edge of the replay).

Three frames for a range: the sessions a policy could stop (interactive pods, or every GPU
pod with ``every``), what each held, and each session's life as runs of one state (busy,
idle, unknown) by the idle detector's own definition at the roll-ups' 5-minute resolution.
The SQL is ``idle_whatif.sql``; its busy signal is the detector's ``busy_series`` block
(analytics/sql/idle.sql) and its gap rule the detector's (analytics/detectors/idle_gaps.py),
substituted at load, so the replay cannot drift from the detector.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib.resources import files
from typing import Any

import duckdb
import polars as pl

from gpuscope.analytics.detectors.idle_gaps import MAX_BRIDGED_GAP, with_rule
from gpuscope.analytics.rollups import rollup_5m_frontier
from gpuscope.collector.storage.held_gpus import with_held_gpus
from gpuscope.collector.storage.store import utc
from gpuscope.core.gpu_prices import estimated_price
from gpuscope.core.owners import pod_owner
from gpuscope.core.settings import Settings

_PARAM = re.compile(r"\$(\w+)")
_COMMENT = re.compile(r"--[^\n]*")
_NAME = re.compile(r"^-- name: (\w+)\n", flags=re.MULTILINE)
#: A gap's far side is looked for this far before the range (a gap longer than
#: MAX_BRIDGED_GAP is never bridged), as the report does.
GAP_MARGIN = MAX_BRIDGED_GAP + timedelta(minutes=10)


def _named(package: str, name: str) -> dict[str, str]:
    text = files(package).joinpath(name).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    return {n: body.strip() for n, body in zip(parts[1::2], parts[2::2], strict=True)}


def _load_queries() -> dict[str, str]:
    busy = _named("gpuscope.analytics", "sql/idle.sql")["busy_series"]
    own = _named("gpuscope.analytics.idle_whatif", "idle_whatif.sql")
    return {
        name: with_rule(with_held_gpus(body.replace("{busy_series}", busy)))
        for name, body in own.items()
    }


#: Named queries of idle_whatif.sql, the detector's busy_series and gap rule filled in.
Q = _load_queries()


def _params(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    used = set(_PARAM.findall(_COMMENT.sub("", sql)))
    return {k: v for k, v in params.items() if k in used}


def _frame(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any]) -> pl.DataFrame:
    sql = Q[name]
    out: pl.DataFrame = con.sql(sql, params=_params(sql, params)).pl()
    return out


@dataclass(frozen=True, slots=True)
class ReplayInputs:
    """What the replay reads for [start, end): ``sessions`` (pid, namespace, pod, kind,
    project, owner, pod_labels as JSON text, started, ended, in_range), ``held`` (pid,
    share, s, e: clipped to [lo, end)) and ``runs`` (pid, state B/I/U, t0, t1, gpu_hours
    in [start, end))."""

    start: datetime
    end: datetime
    lo: datetime
    sessions: pl.DataFrame
    held: pl.DataFrame
    runs: pl.DataFrame


def labels_of(text: str | None) -> dict[str, str]:
    """A pod's labels from the JSON text the store keeps (empty when none or unreadable)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def read_inputs(
    con: duckdb.DuckDBPyConnection,
    start: datetime,
    end: datetime,
    settings: Settings,
    *,
    look_back: timedelta,
    every: bool = False,
) -> ReplayInputs:
    """The sessions held in [start - look_back - GAP_MARGIN, end), what they held and their
    runs. ``look_back``: the longest stop a threshold could put before ``start`` (its
    minutes, the warning, the start-up grace); a session idle through all of it is stopped
    before the range by every threshold, whatever happened earlier."""
    start, end = utc(start), utc(end)
    lo = start - look_back - GAP_MARGIN
    an = settings.analytics
    params: dict[str, Any] = {
        "lo": lo,
        "lo5": lo - timedelta(seconds=(lo - datetime(1970, 1, 1)).total_seconds() % 300),
        "start": start,
        "end": end,
        "at": end,
        "frontier": rollup_5m_frontier(con),
        "threshold": an.idle_utilization_below,
        "memory": an.idle_include_memory_activity,
        "protected": list(settings.workloads.protected_namespaces),
        "every": every,
    }
    con.execute(Q["create_held"], _params(Q["create_held"], params))
    try:
        sessions = _frame(con, "sessions", params)
        held = _frame(con, "held", params)
        runs = _frame(con, "runs", params)
    finally:
        con.execute("DROP TABLE IF EXISTS whatif_idle_held")
    keys = settings.workloads.owner_label_keys
    owners = [
        pod_owner(text, keys, kind, name) or ""
        for text, kind, name in sessions.select(
            "pod_labels", "owner_kind", "owner_name"
        ).iter_rows()
    ]
    sessions = sessions.drop("owner_kind", "owner_name").with_columns(
        pl.Series("owner", owners, dtype=pl.String)
    )
    return ReplayInputs(start, end, lo, sessions, held, runs)


def price_per_gpu_hour(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, settings: Settings
) -> tuple[float | None, bool, str]:
    """The report's price: (per GPU-hour or None, whether it is gpuscope's estimate from the
    cluster's GPU models, the currency)."""
    rs = settings.report
    if rs.price_per_gpu_hour is not None:
        return rs.price_per_gpu_hour, False, rs.currency
    if not rs.estimate_cost:
        return None, False, rs.currency
    models = _frame(con, "gpu_models", {"start": utc(start), "end": utc(end)})
    price = estimated_price(dict(models.iter_rows()), rs.gpu_hour_prices)
    return price, price is not None, "USD"

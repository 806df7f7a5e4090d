"""``gpuscope whatif idle``'s figures: every point replayed, and the recommendation.

One function, :func:`idle_whatif`, used alike by the CLI, ``GET /api/v1/whatif/idle`` and
the weekly report, so the three say the same for the same range. The recommendation's
rule: of the idle thresholds that cover every session replayed, the one that frees the
most GPU-hours while at most ``analytics.idle_policy_max_comeback_share`` of the sessions
it stops come back (busy again later in their real life); ties go to the longer threshold
(fewer stops for the same hours). It is compared with each configured idle policy in
GPU-hours and, at the report's price, money.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import duckdb

from gpuscope.analytics.idle_whatif.points import Point, configured, describe, ladder
from gpuscope.analytics.idle_whatif.read import price_per_gpu_hour, read_inputs
from gpuscope.analytics.idle_whatif.replay import cut_off, per_session, split, totals
from gpuscope.collector.storage.store import utc
from gpuscope.core.settings import Settings

log = logging.getLogger(__name__)

#: Stopped sessions that came back listed per point at most.
CUT_OFF_ROWS = 10
_ORDER = {"ladder": 0, "policy": 1, "detector": 2}


def _iso(t: datetime) -> str:
    return utc(t).isoformat() + "Z"


def _entry(point: Point) -> dict[str, Any]:
    key = "idle_minutes" if point.kind == "idle" else "hours"
    value = point.minutes if point.kind == "idle" else point.minutes / 60
    out: dict[str, Any] = {
        key: round(value, 4),
        "warning_minutes": point.warning_minutes,
        "source": point.source,
        "configured": point.source != "ladder",
    }
    if point.source == "policy":
        out["policy"] = point.name
    if point.selective:
        out["selects"] = {
            "namespaces": list(point.namespaces),
            "match_labels": dict(point.match_labels),
        }
    return out


def _money(hours: float, price: float | None) -> float | None:
    return round(hours * price, 2) if price is not None else None


def recommend(
    entries: list[dict[str, Any]], max_share: float, price: float | None, currency: str
) -> dict[str, Any]:
    """The recommended idle threshold among ``entries`` (``thresholds[]`` of the output)
    and how it compares with the configured ones."""
    share = f"{max_share * 100:g} %"
    rule = (
        "the idle threshold that frees the most GPU-hours while at most "
        f"{share} of the sessions it stops come back (busy again later); ties go to the "
        "longer threshold"
    )
    whole = [e for e in entries if not e.get("selects")]
    fit = [e for e in whole if e["comeback_share"] <= max_share + 1e-12]
    out: dict[str, Any] = {"rule": rule, "max_comeback_share": max_share}
    if not fit or max(e["gpu_hours_freed"] for e in fit) <= 0:
        out["idle_minutes"] = None
        out["text"] = (
            f"No threshold to recommend: none frees GPU-hours with at most {share} of the "
            "stopped sessions coming back."
        )
        return out
    best = max(fit, key=lambda e: (e["gpu_hours_freed"], e["idle_minutes"] + e["warning_minutes"]))
    out.update(
        idle_minutes=best["idle_minutes"],
        warning_minutes=best["warning_minutes"],
        gpu_hours_freed=best["gpu_hours_freed"],
        cost_freed=_money(best["gpu_hours_freed"], price),
        sessions_stopped=best["sessions_stopped"],
        stopped_then_busy=best["stopped_then_busy"],
    )
    text = (
        f"Recommended: stop interactive sessions after {best['idle_minutes']:g} minutes idle"
        + (f" (+ {best['warning_minutes']:g} minutes' warning)" if best["warning_minutes"] else "")
        + f": {best['gpu_hours_freed']:,.1f} GPU-hours freed"
        + (f" ({out['cost_freed']:,.2f} {currency})" if out["cost_freed"] is not None else "")
        + f", {best['sessions_stopped']} sessions stopped, {best['stopped_then_busy']} of them "
        "came back."
    )
    versus = []
    for e in entries:
        if not e["configured"]:
            continue
        diff = round(best["gpu_hours_freed"] - e["gpu_hours_freed"], 4)
        versus.append(
            {
                "idle_minutes": e["idle_minutes"],
                "warning_minutes": e["warning_minutes"],
                "source": e["source"],
                "policy": e.get("policy"),
                "gpu_hours_freed": e["gpu_hours_freed"],
                "stopped_then_busy": e["stopped_then_busy"],
                "more_gpu_hours_freed": diff,
                "more_cost_freed": _money(diff, price),
            }
        )
        what = f"{e['idle_minutes']:g} min" + (
            f" + {e['warning_minutes']:g} min warning" if e["warning_minutes"] else ""
        )
        name = (
            f"policy {e['policy']} ({what})"
            if e.get("policy")
            else f"the idle detector's window ({what}; no idle policy configured)"
        )
        money = _money(diff, price)
        text += (
            f" Against {name}: {diff:+,.1f} GPU-hours"
            + (f" ({money:+,.2f} {currency})" if money is not None else "")
            + f", {best['stopped_then_busy'] - e['stopped_then_busy']:+d} sessions cut off "
            "that came back."
        )
    out["versus_configured"] = versus
    out["text"] = text
    return out


def _points(
    idle_minutes: list[float] | None,
    time_limit_hours: list[float] | None,
    warning_minutes: float,
    settings: Settings,
) -> tuple[list[Point], list[Point], list[str]]:
    conf, notes = configured(settings)
    idle = ladder("idle", idle_minutes, warning_minutes)
    limits = ladder("time_limit", time_limit_hours, warning_minutes)
    idle += [p for p in conf if p.kind == "idle"]
    limits += [p for p in conf if p.kind == "time_limit"]
    key = lambda p: (p.stop_after, _ORDER[p.source], p.name)  # noqa: E731
    return sorted(idle, key=key), sorted(limits, key=key), notes


def idle_whatif(
    con: duckdb.DuckDBPyConnection,
    start: datetime,
    end: datetime,
    settings: Settings,
    *,
    idle_minutes: list[float] | None = None,
    time_limit_hours: list[float] | None = None,
    warning_minutes: float = 0.0,
    namespaces: list[str] | None = None,
    max_comeback_share: float | None = None,
    every: bool = False,
) -> dict[str, Any]:
    """Replay [start, end) of the store on ``con`` under each idle threshold and time
    limit (None: the default ladders) and the configured policies; ``namespaces`` limits
    the sessions (None: all); ``every`` replays every GPU workload, not only interactive
    sessions. Reads only (a temp table aside)."""
    start, end = utc(start), utc(end)
    an = settings.analytics
    share = an.idle_policy_max_comeback_share if max_comeback_share is None else max_comeback_share
    grace = timedelta(minutes=an.startup_grace_minutes)
    idle, limits, notes = _points(idle_minutes, time_limit_hours, warning_minutes, settings)
    look_back = max(p.stop_after for p in idle) + grace
    inputs = read_inputs(con, start, end, settings, look_back=look_back, every=every)
    price, estimated, currency = price_per_gpu_hour(con, start, end, settings)
    chosen = tuple(namespaces or ())
    sessions = inputs.sessions.filter(inputs.sessions["in_range"])
    if chosen:
        sessions = sessions.filter(sessions["namespace"].is_in(list(chosen)))
    held_hours = _held_hours(inputs, set(sessions["pid"].to_list()))

    def figures(point: Point) -> dict[str, Any]:
        rows = per_session(inputs, point, grace, chosen)
        head = totals(rows)
        return {
            **_entry(point),
            **head,
            "cost_freed": _money(head["gpu_hours_freed"], price),
            "namespaces": split(rows, "namespace"),
            "owners": split(rows, "owner"),
            "cut_off": cut_off(rows, CUT_OFF_ROWS),
        }

    thresholds = [figures(p) for p in idle]
    out: dict[str, Any] = {
        "range": {"from": _iso(start), "to": _iso(end)},
        "settings": {
            "idle_utilization_below": an.idle_utilization_below,
            "idle_include_memory_activity": an.idle_include_memory_activity,
            "startup_grace_minutes": an.startup_grace_minutes,
            "warning_minutes": warning_minutes,
            "max_comeback_share": share,
            "resolution_minutes": 5,
            "namespaces": list(chosen),
            "workloads": "every GPU workload" if every else "interactive sessions",
        },
        "sessions": sessions.height,
        "gpu_hours_held": round(held_hours, 4),
        "price_per_gpu_hour": price,
        "price_is_estimate": estimated,
        "currency": currency,
        "thresholds": thresholds,
        "time_limits": [figures(p) for p in limits],
        "recommendation": recommend(thresholds, share, price, currency),
        "configured": [describe(p) for p in (*idle, *limits) if p.source != "ladder"],
        "notes": notes,
    }
    log.info(
        "idle what-if replayed range=%s..%s sessions=%d thresholds=%d time_limits=%d",
        out["range"]["from"], out["range"]["to"], sessions.height, len(idle), len(limits),
    )  # fmt: skip
    return out


def _held_hours(inputs: Any, pids: set[int]) -> float:
    """GPU-hours the replayed sessions held in the range."""
    import polars as pl

    start = pl.lit(inputs.start).cast(pl.Datetime("us"))
    h = inputs.held.filter(pl.col("pid").is_in(list(pids))).with_columns(
        (
            pl.col("share")
            * (pl.col("e") - pl.max_horizontal("s", start)).dt.total_microseconds().clip(0)
            / 3.6e9
        ).alias("h")
    )
    return float(h["h"].sum()) if h.height else 0.0


def replay_range(
    week: str | None, start: str | None, end: str | None, now: datetime
) -> tuple[datetime, datetime, str | None]:
    """The range to replay (naive UTC) and its week's label: ``week`` (YYYY-Www), or
    ``start``/``end`` (RFC 3339, together), else the last complete week before ``now``.
    A bad or future range is one :class:`UserError` line."""
    from gpuscope.analytics.report.week import Week
    from gpuscope.core.errors import UserError

    if week is not None and (start is not None or end is not None):
        raise UserError("give --week or --from/--to, not both")
    if (start is None) != (end is None):
        raise UserError("--from and --to go together")
    if start is not None and end is not None:
        lo, hi = _time(start, "--from"), _time(end, "--to")
        if hi <= lo:
            raise UserError(f"--to {end} is not after --from {start}")
        if hi - lo > timedelta(days=31):
            raise UserError("the range is longer than 31 days; replay a week or a month at most")
        return lo, hi, None
    w = Week.parse(week) if week is not None else Week.last_complete(now)
    if not 1970 <= w.year <= 2999:
        raise UserError(f"week {w.label}: expected a year between 1970 and 2999")
    w.check_over(now)
    return w.start, w.end, w.label


def _time(text: str, flag: str) -> datetime:
    from datetime import UTC

    from gpuscope.core.errors import UserError

    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected a time like 2025-03-03T08:00:00Z") from None
    t = t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t
    if not 1970 <= t.year <= 2999:
        raise UserError(f"{flag} {text}: expected a time between 1970 and 2999")
    return t

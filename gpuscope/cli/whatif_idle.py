"""``gpuscope whatif idle``: idle-termination thresholds and time limits replayed over the
stored history, with what each would have freed and whom it would have cut off.

A subcommand of ``whatif`` (gpuscope/cli/whatif.py registers it; ``gpuscope whatif --db``
without it is the placement replay). The replay is
:func:`gpuscope.analytics.idle_whatif.figures.idle_whatif`; beside a running collector
that holds the database it runs there (``GET /api/v1/whatif/idle``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuscope.cli.beside import add_collector_argument, beside

#: The most ladder points one command may ask for (each is a replay of the range).
MAX_POINTS = 32
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def add_idle_parser(whatif: Any, number: Callable[..., Callable[[str], float]]) -> Any:
    """``idle`` under ``whatif``'s own subcommands (``whatif`` itself still takes --db)."""
    sub = whatif.add_subparsers(dest="whatif_what", metavar="{idle}")
    p = sub.add_parser(
        "idle",
        help="replay idle-termination thresholds and time limits over the stored history",
    )
    p.add_argument("--db", type=Path, metavar="PATH", help="the database (opened read-only)")
    p.add_argument("--week", metavar="YYYY-Www", help="the ISO week in UTC (default: the last)")
    p.add_argument("--from", dest="start", metavar="TIME", help="range start, RFC 3339 (UTC)")
    p.add_argument("--to", dest="end", metavar="TIME", help="range end, RFC 3339 (UTC)")
    p.add_argument(
        "--idle-minutes",
        type=number(float, 1, 7 * 24 * 60),
        action="append",
        metavar="N",
        help="an idle threshold to replay (repeatable; default 15 30 60 120 240 480 1440), "
        "besides the configured policies' own",
    )
    p.add_argument(
        "--time-limit-hours",
        type=number(float, 0.5, 7 * 24),
        action="append",
        metavar="H",
        help="a session time limit to replay (repeatable; default 8 12 24 48 72 168)",
    )
    p.add_argument(
        "--warning-minutes",
        type=number(float, 0, 24 * 60),
        default=0.0,
        metavar="M",
        help="the warning period a policy waits before it acts, added to each threshold "
        "(default 0)",
    )
    p.add_argument(
        "--namespace", action="append", metavar="NS", help="only these namespaces (repeatable)"
    )
    p.add_argument(
        "--max-comeback-share",
        type=number(float, 0, 1),
        metavar="SHARE",
        help="the recommendation's bound on stopped sessions that come back (default: "
        "analytics.idle_policy_max_comeback_share, 0.05)",
    )
    p.add_argument(
        "--all-workloads",
        action="store_true",
        help="replay every GPU workload (batch and training too), not only interactive sessions",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--config", type=Path, help="YAML settings file (analytics:, actions:, report:)")
    add_collector_argument(p)
    # as every command has them (cli/main.py); SUPPRESS keeps whatif's own when not given
    p.add_argument("--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS)
    p.add_argument("--log-format", choices=["text", "json"], default=argparse.SUPPRESS)
    return p


def _money(value: float | None, currency: str) -> str:
    return "" if value is None else f" {value:>10,.2f} {currency}"


def render(out: dict[str, Any]) -> str:
    """The text the command prints without --json."""
    r, cur = out["range"], out["currency"]
    lines = [
        f"idle policies replayed over {r['from']} .. {r['to']}: {out['sessions']} "
        f"{out['settings']['workloads']}, {out['gpu_hours_held']:,.1f} GPU-hours held",
        f"{'idle minutes':>12s} {'stopped':>7s} {'came back':>9s} {'GPU-h freed':>11s} "
        f"{'busy GPU-h after':>16s}  source",
    ]
    for e in out["thresholds"]:
        wait = f"+{e['warning_minutes']:g}" if e["warning_minutes"] else ""
        source = e["source"] + (f" {e['policy']}" if e.get("policy") else "")
        lines.append(
            f"{e['idle_minutes']:>10g}{wait:<2s} {e['sessions_stopped']:7d} "
            f"{e['stopped_then_busy']:9d} {e['gpu_hours_freed']:11,.1f} "
            f"{e['busy_gpu_hours_after_stop']:16,.1f}{_money(e['cost_freed'], cur)}  {source}"
        )
    lines.append(
        f"{'time limit h':>12s} {'stopped':>7s} {'cut busy':>9s} {'GPU-h freed':>11s} "
        f"{'busy GPU-h after':>16s}  source"
    )
    for e in out["time_limits"]:
        source = e["source"] + (f" {e['policy']}" if e.get("policy") else "")
        lines.append(
            f"{e['hours']:>12g} {e['sessions_stopped']:7d} {e['stopped_then_busy']:9d} "
            f"{e['gpu_hours_freed']:11,.1f} {e['busy_gpu_hours_after_stop']:16,.1f}"
            f"{_money(e['cost_freed'], cur)}  {source}"
        )
    rec = out["recommendation"]
    lines += [rec["text"], f"rule: {rec['rule']}"]
    lines += [f"note: {n}" for n in out.get("notes", [])]
    return "\n".join(lines) + "\n"


def _through(collector: Any, args: argparse.Namespace) -> dict[str, Any]:
    params: list[tuple[str, str]] = []
    for key, value in (("week", args.week), ("from", args.start), ("to", args.end)):
        if value is not None:
            params.append((key, value))
    params += [("idle_minutes", f"{v:g}") for v in args.idle_minutes or ()]
    params += [("time_limit_hours", f"{v:g}") for v in args.time_limit_hours or ()]
    params += [("namespace", ns) for ns in args.namespace or ()]
    if args.warning_minutes:
        params.append(("warning_minutes", f"{args.warning_minutes:g}"))
    if args.max_comeback_share is not None:
        params.append(("max_comeback_share", f"{args.max_comeback_share:g}"))
    if args.all_workloads:
        params.append(("all_workloads", "true"))
    out: dict[str, Any] = collector.get("/api/v1/whatif/idle", params)
    return out


def cmd_whatif_idle(args: argparse.Namespace) -> int:
    """Replay the range and print the thresholds' figures and the recommendation."""
    from datetime import UTC, datetime

    from gpuscope.analytics.idle_whatif.figures import idle_whatif, replay_range
    from gpuscope.cli.common import open_store
    from gpuscope.core.errors import UserError
    from gpuscope.core.settings import load_settings

    if args.db is None and not args.collector:
        raise UserError("give --db PATH (the database to replay), or --collector URL")
    if len(args.idle_minutes or ()) + len(args.time_limit_hours or ()) > MAX_POINTS:
        raise UserError(f"at most {MAX_POINTS} thresholds and time limits in all")
    settings = load_settings(args.config)
    now = datetime.now(UTC)
    start, end, week = replay_range(args.week, args.start, args.end, now)
    collector = beside(args, settings, args.db)
    if collector is not None:  # a running collector holds it: replay there (cli/beside.py)
        out = _through(collector, args)
    else:
        if args.db.is_dir():
            raise UserError(f"--db {args.db} is a folder; expected a database file")
        if not args.db.exists():
            raise UserError(f"database {args.db} does not exist")
        memory = settings.collector.db_memory_limit
        with open_store(args.db, memory_limit=memory) as store:
            cur = store.cursor()
            try:
                out = idle_whatif(
                    cur,
                    start,
                    end,
                    settings,
                    idle_minutes=args.idle_minutes,
                    time_limit_hours=args.time_limit_hours,
                    warning_minutes=args.warning_minutes,
                    namespaces=args.namespace,
                    max_comeback_share=args.max_comeback_share,
                    every=args.all_workloads,
                )
            finally:
                cur.close()
        if week is not None:
            out["range"]["week"] = week
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(render(out), end="")
    return 0

"""``gpuscope analyze``: the detectors on a database file, a snapshot of nodes and pods,
or through the collector that holds the database.

Kept apart from gpuscope/cli/main.py so the command's rules (which analyses a snapshot can
run, the data-age rule, ``--at``) live beside the code that applies them.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from gpuscope.cli.beside import analyze_through, beside
from gpuscope.cli.common import FIRST_YEAR, LAST_YEAR, objects_of, open_store
from gpuscope.core.errors import UserError
from gpuscope.core.settings import load_settings
from gpuscope.core.timefmt import rfc3339

__all__ = ["SNAPSHOT_ANALYSES", "cmd_analyze", "parse_at"]


def parse_at(text: str | None) -> datetime:
    if not text:
        return datetime.now(UTC)
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"--at {text!r}: expected a time like 2026-11-16T09:00:00Z") from None
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    if not FIRST_YEAR <= at.astimezone(UTC).year <= LAST_YEAR:
        raise UserError(f"--at {text!r}: expected a time between {FIRST_YEAR} and {LAST_YEAR}")
    return at


#: What ``analyze --nodes --pods [--objects]`` can do from files (``all``: the first two).
SNAPSHOT_ANALYSES = ("fragmentation", "consolidation", "quota", "all")


def cmd_analyze(args: argparse.Namespace) -> int:
    import json

    from gpuscope.analytics.runner import (
        DETECTORS,
        as_json,
        render_text,
        run_on_snapshot,
        run_on_store,
    )

    settings = load_settings(args.config)
    at = parse_at(args.at)
    if (args.nodes is None) != (args.pods is None):
        raise UserError("--nodes and --pods go together")
    if args.collector and args.nodes is not None:
        raise UserError("--collector analyses its database; --nodes/--pods are files here")
    collector = beside(args, settings, args.db) if args.nodes is None else None
    if collector is not None:  # the database is the collector's: run there (cli/beside.py)
        if args.objects:
            raise UserError("--objects goes with --nodes/--pods or a --db opened here")
        return analyze_through(collector, args.what, rfc3339(at) if args.at else None, args.json)
    if args.what == "topology":
        from gpuscope.cli.topology import run_topology

        analyses = {"topology": run_topology(args, at, settings)}
        print(json.dumps(as_json(analyses), indent=2, default=str) if args.json
              else render_text(analyses), end="\n" if args.json else "")  # fmt: skip
        return 0
    objects = objects_of(args)
    if args.nodes is not None:
        if args.what not in SNAPSHOT_ANALYSES:
            raise UserError(f"{args.what} needs --db: a snapshot holds no utilization history")
        for flag, path in (("--nodes", args.nodes), ("--pods", args.pods)):
            if path.is_dir():
                raise UserError(f"{flag} {path} is a folder; expected a file")
        which = ["fragmentation", "quota"] if args.what == "all" else [args.what]
        analyses = {
            w: run_on_snapshot(args.nodes, args.pods, at, settings, w, objects=objects)
            for w in which
        }
    else:
        if args.db is None:
            raise UserError("give --db PATH (or --nodes FILE --pods FILE for fragmentation)")
        which = list(DETECTORS) if args.what == "all" else [args.what]
        with open_store(args.db, memory_limit=settings.collector.db_memory_limit) as store:
            if args.at is None:
                at = _data_age_at(store, at, settings.collector.scrape_interval_seconds)
            analyses = run_on_store(store, at, settings, which, persist=False)
    if args.json:
        print(json.dumps(as_json(analyses), indent=2, default=str))
    else:
        print(render_text(analyses), end="")
    return 0


def _data_age_at(store: Any, now: datetime, scrape_interval_s: float) -> datetime:
    """The data-age rule: a database whose data ended a while ago is analysed as of its
    newest data, with one line on stderr saying so (``--at`` overrides)."""
    from gpuscope.analytics.runner import analysis_time, newest_data

    cur = store.cursor()
    try:
        newest = newest_data(cur)
    finally:
        cur.close()
    at, note = analysis_time(newest, now, scrape_interval_s)
    if note:
        print(f"gpuscope analyze: {note}", file=sys.stderr)
    return at

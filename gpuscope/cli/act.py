"""``gpuscope act``: run the action policies once over a database (dry run unless
``--execute``), and print what was done or would be done.

Exit codes: 0 when every step was done (or would be, or was held back by a safety rule),
or there was nothing to do; 3 when the API server refused a step or a step failed
(forbidden, unauthorized, conflict, invalid, blocked by a PodDisruptionBudget, a 5xx or no
answer, given up), so that automation notices; 2 for bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuscope.core.errors import UserError
from gpuscope.core.settings import Settings, load_settings

if TYPE_CHECKING:
    from gpuscope.collector.storage.store import Store

#: ``gpuscope act``'s exit code when a step was refused or failed.
EXIT_REFUSED = 3
#: How far ahead of this machine's clock ``--at`` may be with ``--execute`` (clock skew).
FUTURE_SLACK = timedelta(minutes=1)


@dataclass
class _Context:
    """What the alerts notices need, outside the collector's service."""

    settings: Settings
    store: Store
    clock: Callable[[], float] = field(default=time.time)


def add_act_parser(
    sub: argparse._SubParsersAction[Any],
) -> argparse.ArgumentParser:
    act: argparse.ArgumentParser = sub.add_parser(
        "act", help="run idle-termination and consolidation policies (dry run by default)"
    )
    act.add_argument(
        "--db", type=Path, metavar="PATH", required=True, help="a gpuscope DuckDB file"
    )
    act.add_argument("--policy", type=Path, metavar="FILE", required=True, help="YAML policy file")
    act.add_argument(
        "--execute",
        action="store_true",
        help="change the cluster (only policies with dry_run: false; default: a dry run)",
    )
    act.add_argument("--at", metavar="TIME", help="run as of this time (RFC 3339; default now)")
    act.add_argument("--json", action="store_true", help="print one JSON object")
    act.add_argument(
        "--config", type=Path, help="YAML settings file (actions, collector.kubernetes)"
    )
    act.add_argument(
        "--collector",
        metavar="URL",
        help="run inside the collector at URL that holds the database (POST /api/v1/act, "
        "with its token: collector.api_token_file or _env), so it never stops and the data "
        "has no gap; --db is then not opened",
    )
    return act


def _as_of_the_data(store: Store, now: datetime, settings: Settings, *, execute: bool) -> datetime:
    """``analyze``'s data-age rule for ``act`` without ``--at``: on a database whose data
    ended a while ago, a dry run plans as of the newest data (as of now, no idle notebook
    would be left to see and the last inventory would pass for today's), saying so in one
    line; ``--execute`` refuses, since it would change today's cluster on that old picture
    of it."""
    from gpuscope.analytics.runner import analysis_time, newest_data

    cur = store.cursor()
    try:
        newest = newest_data(cur)
    finally:
        cur.close()
    at, note = analysis_time(newest, now, settings.collector.scrape_interval_seconds)
    if note is None or newest is None:
        return now
    age = f"the newest data is from {newest.isoformat(timespec='seconds')}Z, " + (
        f"{(now - at.replace(tzinfo=UTC)).total_seconds() / 3600:.1f} h ago"
    )
    if execute:
        raise UserError(
            f"{age}: will not change the cluster on data that old (is the collector "
            "running?); give --at to run as of a time anyway"
        )
    print(f"gpuscope act: {age}: planning as of then (give --at to choose another time)",
          file=sys.stderr)  # fmt: skip
    return at.replace(tzinfo=UTC)


def run_act(args: argparse.Namespace, at: object) -> int:
    from gpuscope.actions.kube import ClusterClient, KubeError
    from gpuscope.actions.policy import load_policies
    from gpuscope.actions.runner import run_policies
    from gpuscope.cli.common import open_store

    if args.execute and args.at is not None and at > datetime.now(UTC) + FUTURE_SLACK:  # type: ignore[operator]
        raise UserError(
            f"--at {args.at}: in the future; --execute acts on the cluster now, and would "
            "write that time into the audit, the deadlines and the cool-down (plan as of a "
            "future time without --execute)"
        )
    settings = load_settings(args.config)
    policies = load_policies(args.policy)
    if not policies:
        raise UserError(f"policy file {args.policy} has no policies")
    if not args.collector:  # a running collector holds --db: run inside it (cli/beside.py)
        from gpuscope.cli.beside import beside

        found = beside(args, settings, args.db)
        args.collector = found.url if found is not None else None
    if args.collector:
        return _print(through_collector(args, settings), args.json)
    if not args.db.exists():
        raise UserError(f"database {args.db} does not exist")
    try:
        client = ClusterClient.from_setting(settings.collector)
    except KubeError as exc:
        raise UserError(str(exc)) from None
    if args.execute and client is None:
        raise UserError(
            "--execute needs a Kubernetes API (collector.kubernetes: in-cluster, kubeconfig "
            "or a URL); without one, run without --execute to plan"
        )
    store = open_store(
        args.db,
        read_only=False,
        busy="run act through it (--collector URL), so it keeps collecting",
    )
    try:
        if args.at is None:
            at = _as_of_the_data(store, at, settings, execute=args.execute)  # type: ignore[arg-type]
        notifier = None
        if settings.alerts.enabled:  # warn owners as the collector's schedule does
            from gpuscope.service import AlertsNotices

            notifier = AlertsNotices(_Context(settings, store))
        run = run_policies(
            store,
            policies,
            settings,
            client=client,
            execute=args.execute,
            at=at,  # type: ignore[arg-type]
            notifier=notifier,
        )
    except KubeError as exc:
        raise UserError(str(exc)) from None
    finally:
        store.close()
        if client is not None:
            client.close()
    return _print(json.loads(json.dumps(run.as_json(), default=str)), args.json)


def _print(out: dict[str, Any], as_json: bool) -> int:
    """Print a run (``ActRun.as_json``, local or from the collector); its exit code."""
    refused = int(out.get("refused_or_failed") or 0)
    code = EXIT_REFUSED if refused else 0
    if as_json:
        print(json.dumps(out, indent=2, default=str))
        return code
    actions = list(out.get("actions") or [])
    mode = "dry run" if out.get("dry_run") else "executed"
    print(f"gpuscope act ({mode}): {len(actions)} step(s)")
    for r in actions:
        target = f"{r.get('namespace')}/{r.get('pod')}" if r.get("pod") else f"node {r.get('node')}"
        dry = " (dry run)" if r.get("dry_run") else ""
        answer = f" ({r['status']})" if r.get("status") else ""
        print(
            f"  {r.get('kind', ''):<14} {target:<40} {r.get('result')}{answer}{dry}  "
            f"[{r.get('policy')}] {r.get('reason')}"
        )
        if r.get("message"):
            print(f"  {'':<14} {r['message']}")
    for note in out.get("notes") or []:
        print(f"  note: {note}")
    if refused:
        print(f"  {refused} step(s) refused or failed: exit code {EXIT_REFUSED}")
    return code


def through_collector(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """Hand the run to the collector that holds the database (gpuscope/actions/api.py)."""
    from gpuscope.cli.beside import Collector

    token = settings.collector.resolve_api_token()
    if not token:
        raise UserError(
            "--collector needs the collector's API token (collector.api_token_file or "
            "collector.api_token_env in --config)"
        )
    body: dict[str, Any] = {
        "policies": args.policy.read_text(encoding="utf-8"),
        "execute": args.execute,
    }
    if args.at is not None:
        body["at"] = args.at
    return Collector(args.collector, token).post("/api/v1/act", body)

"""The ``gpuscope`` command line: a thin layer over the components' libraries.

Every user mistake ends as one line on stderr and a non-zero exit code, never a traceback
(set ``GPUSCOPE_DEBUG=1`` to see one for an internal error).

The ``collector`` and ``analyze`` commands are in gpuscope/cli/collector.py and
gpuscope/cli/analyze.py.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, cast

from gpuscope import __version__
from gpuscope.agent.command import HELP as AGENT_HELP
from gpuscope.agent.command import add_agent_arguments
from gpuscope.agent.command import run_command as run_agent_command
from gpuscope.cli.alerts import add_alerts_parser, cmd_alerts
from gpuscope.cli.analyze import cmd_analyze, parse_at
from gpuscope.cli.beside import add_collector_argument
from gpuscope.cli.collector import cmd_collector
from gpuscope.cli.common import add_objects_argument
from gpuscope.cli.dashboards import add_dashboards_parser, cmd_dashboards
from gpuscope.cli.db import add_db_parser, cmd_db
from gpuscope.cli.report import add_report_parser, cmd_report
from gpuscope.cli.whatif import add_whatif_parser, cmd_whatif
from gpuscope.core.errors import UserError
from gpuscope.core.logs import LogFormat, configure_logging
from gpuscope.core.settings import load_settings

log = logging.getLogger("gpuscope")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake as one line, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _add_logging(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level",
        default=os.environ.get("GPUSCOPE_LOG_LEVEL", "INFO"),
        choices=LOG_LEVELS,
        help="log verbosity (default INFO)",
    )
    _add_log_format(p, argparse.SUPPRESS)


def _add_log_format(p: argparse.ArgumentParser, default: str | None) -> None:
    """``--log-format`` before the command or after it; the command's copy sets nothing
    when not given (SUPPRESS), so it never hides the global one."""
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=default,
        help="log lines as text or JSON objects (default: the logging.format setting, text)",
    )


def number(
    kind: type[int] | type[float], low: float, high: float = math.inf
) -> Callable[[str], float]:
    """An argparse type: a finite ``kind`` between ``low`` and ``high`` (inclusive); NaN,
    infinities and values out of range are usage errors (one line, exit 2)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and low <= value <= high):
            bound = f"at least {low:g}" if high == math.inf else f"between {low:g} and {high:g}"
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number {bound}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpuscope", description="Find where GPUs are wasted, and why.")
    parser.add_argument("--version", action="version", version=f"gpuscope {__version__}")
    _add_log_format(parser, None)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    agent = sub.add_parser("agent", help=AGENT_HELP)
    add_agent_arguments(agent)  # the same options the lean entry parses (gpuscope/cli/entry.py)
    _add_logging(agent)

    col = sub.add_parser(
        "collector", help="scrape agents into DuckDB, sync inventory, serve the API"
    )
    col.add_argument("--config", type=Path, help="YAML settings file (also $GPUSCOPE_CONFIG)")
    col.add_argument(
        "--db", type=Path, metavar="PATH", help="DuckDB file (default gpuscope.duckdb)"
    )
    col.add_argument("--listen", metavar="HOST:PORT", help="API address (default 127.0.0.1:8080)")
    col.add_argument(
        "--target", action="append", metavar="URL", help="agent /metrics URL to scrape (repeatable)"
    )
    col.add_argument(
        "--dcgm-exporter",
        action="append",
        metavar="URL",
        help="dcgm-exporter /metrics URL to scrape and translate (repeatable)",
    )
    col.add_argument(
        "--prometheus-url",
        metavar="URL",
        help="ingest from this Prometheus-compatible query API instead of scraping",
    )
    col.add_argument(
        "--check",
        action="store_true",
        help="check the inputs, ask the query API once (with --prometheus-url), print JSON, exit",
    )
    col.add_argument(
        "--scrape-interval",
        type=float,
        metavar="SECONDS",
        help="seconds between scrapes (default 15)",
    )
    col.add_argument(
        "--kubernetes",
        metavar="auto|none|URL",
        help="Kubernetes API for inventory and discovery (default auto)",
    )
    _add_logging(col)

    an = sub.add_parser("analyze", help="run detectors over a database or a cluster snapshot")
    an.add_argument(
        "what",
        choices=["idle", "fragmentation", "quota", "bandwidth", "consolidation", "topology", "all"],
        help="which analysis (all: every detector; consolidation plans, it is not in all)",
    )
    an.add_argument("--db", type=Path, metavar="PATH", help="a gpuscope DuckDB file (read-only)")
    an.add_argument(
        "--nodes",
        type=Path,
        metavar="FILE",
        help="kubectl get nodes -o json, or the Alibaba trace's node CSV",
    )
    an.add_argument(
        "--pods",
        type=Path,
        metavar="FILE",
        help="kubectl get pods -A -o json, or the Alibaba trace's pod CSV",
    )
    add_objects_argument(an)
    an.add_argument("--at", metavar="TIME", help="analyse as of this time (RFC 3339; default now)")
    an.add_argument("--json", action="store_true", help="print one JSON object")
    an.add_argument("--config", type=Path, help="YAML settings file (thresholds: analytics)")
    add_collector_argument(an)
    _add_logging(an)

    from gpuscope.cli.act import add_act_parser

    _add_logging(add_act_parser(sub))

    demo = sub.add_parser("demo", help="run the whole pipeline on a simulated cluster")
    demo.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: a new one)")
    demo.add_argument(
        "--nodes", type=number(int, 6, 4096), default=32, help="simulated nodes (default 32)"
    )
    demo.add_argument(
        "--seconds",
        type=number(float, 0, 86_400),
        default=25.0,
        help="seconds of live scraping after the history (default 25)",
    )
    demo.add_argument(
        "--days",
        type=number(float, 0, 14),
        default=7.0,
        help="days of simulated history before the live scraping (default 7; 0 for none)",
    )
    demo.add_argument(
        "--serve",
        action="store_true",
        help="keep running, with the API and /metrics on --listen",
    )
    demo.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default="127.0.0.1:8080",
        help="where --serve serves the API and /metrics (default 127.0.0.1:8080)",
    )
    _add_logging(demo)

    add_alerts_parser(sub, _add_logging)
    add_report_parser(sub)
    add_db_parser(sub, _add_logging)
    _add_logging(add_dashboards_parser(sub))
    _add_logging(add_whatif_parser(sub, number))
    return parser


def _cmd_agent(args: argparse.Namespace) -> int:
    return run_agent_command(args)


def _cmd_act(args: argparse.Namespace) -> int:
    from gpuscope.cli.act import run_act

    return run_act(args, parse_at(args.at))


def _cmd_demo(args: argparse.Namespace) -> int:
    from gpuscope.core.malloc import return_freed_memory
    from gpuscope.demo.run import run_demo

    # The demo is sized for a small machine: its peak is what counts. A process-wide
    # setting, so it is the command's (a process of its own), not run_demo's: a caller in
    # a process that goes on (a test worker) keeps glibc's own threshold.
    return_freed_memory()
    return run_demo(
        out=args.out,
        nodes=args.nodes,
        serve=args.serve,
        seconds=args.seconds,
        days=args.days,
        listen=args.listen,
    )


_COMMANDS = {
    "agent": _cmd_agent,
    "collector": cmd_collector,
    "analyze": cmd_analyze,
    "act": _cmd_act,
    "demo": _cmd_demo,
    "alerts": cmd_alerts,
    "report": cmd_report,
    "db": cmd_db,
    "dashboards": cmd_dashboards,
    "whatif": cmd_whatif,
}


def _log_format(args: argparse.Namespace) -> LogFormat:
    """The flag, else the ``logging.format`` setting (file or environment), else text. A
    settings file that does not load is left for the command to report in its one line."""
    if args.log_format is not None:
        return cast(LogFormat, args.log_format)
    try:
        return load_settings(getattr(args, "config", None)).logging.format
    except UserError:
        return "text"


def _damaged_database(exc: BaseException, db: object) -> str:
    """One line for a database that opened but failed when read (a truncated file: DuckDB
    reads its blocks lazily, so the open succeeds); "" for any other error."""
    if not type(exc).__module__.startswith(("duckdb", "_duckdb")):
        return ""
    import duckdb

    kinds = tuple(
        getattr(duckdb, name)
        for name in ("IOException", "SerializationException", "InternalException")
        if hasattr(duckdb, name)
    )
    if not isinstance(exc, kinds):
        return ""
    first = (str(exc).splitlines() or [type(exc).__name__])[0]
    where = f" {db}" if db else ""
    return f"cannot read database{where} (damaged or truncated?): {first}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = str(getattr(args, "log_level", "INFO")).upper()
    if level not in LOG_LEVELS:  # a flag is checked by argparse; this came from the environment
        print(
            f"gpuscope {args.command}: GPUSCOPE_LOG_LEVEL={args.log_level!r}: expected one of "
            f"{', '.join(LOG_LEVELS)}",
            file=sys.stderr,
        )
        return 2
    configure_logging(level, _log_format(args))
    try:
        return _COMMANDS[args.command](args)
    except UserError as exc:
        print(f"gpuscope {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("GPUSCOPE_DEBUG"):
            raise
        damaged = _damaged_database(exc, getattr(args, "db", None))
        if damaged:
            print(f"gpuscope {args.command}: {damaged}", file=sys.stderr)
            return 2
        print(
            f"gpuscope {args.command}: internal error: {exc!r} "
            "(set GPUSCOPE_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""``gpuscope agent``: its options, its settings and its run, importing only the agent.

The ``gpuscope`` command dispatches ``agent`` here before it builds the full command line
(gpuscope/cli/entry.py), so the DaemonSet's process loads neither the other commands nor
the settings model of the collector side (pydantic); ``gpuscope.cli.main`` adds the same
options from :func:`add_agent_arguments` and runs the same :func:`run_command`, so both
ways in behave alike. Every mistake is one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from gpuscope.core.errors import UserError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
HELP = "node agent: GPU, workload and IB metrics on /metrics"


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake as one line, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def add_agent_arguments(agent: argparse.ArgumentParser) -> None:
    """The agent's options (without the logging ones, which every command shares)."""
    agent.add_argument("--config", type=Path, help="YAML settings file (also $GPUSCOPE_CONFIG)")
    agent.add_argument(
        "--listen", metavar="HOST:PORT", help="where to serve (default 0.0.0.0:9835)"
    )
    agent.add_argument(
        "--node", metavar="NAME", help="node name on every series (default host name)"
    )
    agent.add_argument(
        "--gpu-source",
        choices=["auto", "nvml", "dcgm", "sim"],
        help="GPU source (default auto: DCGM, then NVML)",
    )
    agent.add_argument(
        "--sysfs-root", type=Path, metavar="DIR", help="root of sysfs (default /sys)"
    )
    agent.add_argument(
        "--procfs-root", type=Path, metavar="DIR", help="root of procfs (default /proc)"
    )
    agent.add_argument(
        "--pod-resources-socket", type=Path, metavar="PATH", help="kubelet pod-resources socket"
    )
    agent.add_argument(
        "--dcgm-exporter-url",
        metavar="URL",
        help="read a local dcgm-exporter instead of DCGM's bindings",
    )
    agent.add_argument(
        "--scenario",
        type=Path,
        metavar="FILE",
        help="scenario file for --gpu-source sim (default: the built-in one)",
    )
    agent.add_argument("--once", action="store_true", help="print one exposition and exit")


def _parser(log_format: str | None) -> argparse.ArgumentParser:
    """``gpuscope agent``'s parser alone (``log_format``: the one given before ``agent``)."""
    parser = _Parser(prog="gpuscope agent", description=HELP)
    add_agent_arguments(parser)
    parser.add_argument(
        "--log-level",
        default=os.environ.get("GPUSCOPE_LOG_LEVEL", "INFO"),
        choices=LOG_LEVELS,
        help="log verbosity (default INFO)",
    )
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=log_format,
        help="log lines as text or JSON objects (default: the logging.format setting, text)",
    )
    return parser


def run_command(args: argparse.Namespace) -> int:
    """Run the agent from parsed options (the logging is already set up)."""
    from gpuscope.agent.config import load_agent_config
    from gpuscope.agent.main import run_agent

    flags = {
        "listen": args.listen,
        "node": args.node,
        "gpu_source": args.gpu_source,
        "sysfs_root": args.sysfs_root,
        "procfs_root": args.procfs_root,
        "pod_resources_socket": args.pod_resources_socket,
        "dcgm_exporter_url": args.dcgm_exporter_url,
        "sim_scenario": args.scenario,
    }
    config = load_agent_config(args.config, overrides={"agent": flags})
    return run_agent(config, once=args.once)


def log_format_of(args: argparse.Namespace) -> str:
    """The flag, else the ``logging.format`` setting (file or environment), else text. A
    settings file that does not load is left for the run to report in its one line."""
    if args.log_format is not None:
        return str(args.log_format)
    from gpuscope.agent.config import load_agent_config

    try:
        return load_agent_config(args.config).log_format
    except UserError:
        return "text"


def main(argv: Sequence[str], log_format: str | None = None) -> int:
    """``gpuscope agent ARGV``: ``argv`` after the word ``agent``."""
    args = _parser(log_format).parse_args(list(argv))
    level = str(args.log_level).upper()
    if level not in LOG_LEVELS:  # a flag is checked by argparse; this came from the environment
        print(
            f"gpuscope agent: GPUSCOPE_LOG_LEVEL={args.log_level!r}: expected one of "
            f"{', '.join(LOG_LEVELS)}",
            file=sys.stderr,
        )
        return 2
    from gpuscope.core.logs import configure_logging

    configure_logging(level, "json" if log_format_of(args) == "json" else "text")
    try:
        return run_command(args)
    except UserError as exc:
        print(f"gpuscope agent: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("GPUSCOPE_DEBUG"):
            raise
        print(
            f"gpuscope agent: internal error: {exc!r} (set GPUSCOPE_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1

"""``gpuscope whatif``: how many GPUs other placement policies would have allocated.

Kept apart from gpuscope/cli/main.py so the command's flags live beside the code that reads
them; cli.py only registers it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuscope.cli.beside import add_collector_argument, beside, whatif_through
from gpuscope.cli.common import add_objects_argument, objects_of
from gpuscope.cli.whatif_capacity import (
    add_capacity_arguments,
    capacity_of_history,
    capacity_of_workload,
    capacity_params,
    check_capacity,
    render_capacity,
    wants_capacity,
)
from gpuscope.cli.whatif_idle import add_idle_parser, cmd_whatif_idle

#: The policies' names, as ``gpuscope.analytics.whatif.policies.POLICIES`` has them (a test holds
#: them equal). Named here so that building the CLI's parser, which every command does,
#: imports no analytics: ``gpuscope agent`` would otherwise load DuckDB (~20 MiB resident).
POLICIES = ("leastallocated", "mostallocated", "bestfit", "dotprod", "random", "fgd")


def add_whatif_parser(sub: Any, number: Callable[..., Callable[[str], float]]) -> Any:
    """The ``whatif`` subcommand on the CLI's subparsers (``number``: cli.py's checked
    numeric argparse type)."""
    wi = sub.add_parser(
        "whatif",
        help="replay a workload under other placement policies: GPUs each would allocate",
    )
    wi.add_argument(
        "--db", type=Path, metavar="PATH", help="replay a stored week (read-only database)"
    )
    wi.add_argument(
        "--week",
        metavar="YYYY-Www",
        help="with --db: the ISO week in UTC (default: the last complete week)",
    )
    wi.add_argument(
        "--nodes",
        type=Path,
        metavar="FILE",
        help="kubectl get nodes -o json, or the Alibaba trace's node CSV",
    )
    wi.add_argument(
        "--pods",
        type=Path,
        metavar="FILE",
        help="kubectl get pods -A -o json, or the Alibaba trace's pod CSV",
    )
    add_objects_argument(wi)
    wi.add_argument(
        "--arrivals",
        type=number(float, 0.01, 10),
        metavar="SHARE",
        help="draw tasks with replacement until they ask for this share of GPU capacity "
        "(default 1.3 for the trace; a kubectl snapshot's pods arrive once each)",
    )
    wi.add_argument(
        "--seeds",
        type=number(int, 1, 100),
        default=None,
        metavar="N",
        help="replays per policy, seeds 42.. (default 1; from a database 3, each after the "
        "first with arrivals jittered, and a policy is named only beyond their spread)",
    )
    wi.add_argument(
        "--policy",
        nargs="+",
        choices=POLICIES,
        metavar="NAME",
        help=f"policies to replay (default all: {', '.join(POLICIES)})",
    )
    wi.add_argument(
        "--calibrate",
        choices=POLICIES,
        metavar="NAME",
        help="with --db: the policy the cluster really ran, replayed and held against what "
        "happened (summary.calibration), and the one the capacity what-if replays under "
        "(default analytics.whatif_policy, leastallocated: kube-scheduler's default; "
        "mostallocated for KAI-Scheduler's binpack)",
    )
    wi.add_argument(
        "--drop",
        action="store_true",
        help="drop pods that fit nowhere, as the FGD simulator does (default: they wait)",
    )
    wi.add_argument(
        "--topology-level",
        metavar="KEY",
        help="the topology-aware what-if keeps each pod group inside one domain of this "
        "level (a node label, or topology.volcano.sh/tier-N; default: the level the pod "
        "groups ask for, else the finest)",
    )
    add_capacity_arguments(wi, POLICIES)
    wi.add_argument("--json", action="store_true", help="print one JSON object")
    wi.add_argument("--config", type=Path, help="YAML settings file (analytics:, workloads:)")
    add_collector_argument(wi)
    add_idle_parser(wi, number)  # `whatif idle`: idle-termination thresholds (issue 36)
    return wi


def _render(out: dict[str, Any]) -> str:
    s = out["summary"]
    lines = [
        f"what-if on {s['nodes']} nodes, {s['capacity_gpus']} GPUs "
        f"({s['source']}{', ' + s['week'] if 'week' in s else ''}); "
        f"{s['arrived_gpus']:.0f} GPUs asked for, {s['seeds']} seed(s)",
        f"{'policy':16s} {'allocated':>9s} {'unallocated':>11s} {'not started':>11s} "
        f"{'queued GPU-h':>12s} {'FGD frag':>8s}",
    ]
    for name, p in out["policies"].items():
        lines.append(
            f"{name:16s} {p['allocation_ratio'] * 100:8.2f}% {p['unallocated_gpus']:11.1f} "
            f"{p['jobs_never_started']:11.1f} {p['queued_gpu_hours']:12.2f} "
            f"{p['fgd_fragmentation_ratio'] * 100:7.1f}%"
        )
    actual = s.get("what_happened")
    if actual is not None:
        lines.append(
            f"{'what happened':16s} {actual['allocation_ratio'] * 100:8.2f}% "
            f"{s['capacity_gpus'] - actual['allocated_gpus']:11.1f} "
            f"{actual['jobs_never_started']:11.1f} {actual['queued_gpu_hours']:12.2f}"
        )
    lines.append(f"most GPUs allocated: {s['best_policy']}")
    if "most_jobs_policy" in s:
        lines.append(f"most jobs started: {s['most_jobs_policy']}")
    if s.get("calibration"):
        from gpuscope.analytics.whatif.calibration import describe

        lines.append(describe(s["calibration"]))
    if "verdict" in s:
        lines.append(s["verdict"]["text"])
    if out.get("topology"):
        lines += ["", *_render_topology(out["topology"])]
    if out.get("capacity"):
        lines += ["", *render_capacity(out["capacity"])]
    return "\n".join(lines) + "\n"


def _topology_row(name: str, p: dict[str, Any]) -> str:
    return (
        f"{name:16s} {p['multi_node_started']:7d} {p['multi_node_in_one_domain']:11d} "
        f"{p['multi_node_spread']:6d} {p['multi_node_waited']:6d} "
        f"{p['multi_node_never_started']:5d} {p['mean_multi_node_wait_hours']:11.2f}"
    )


def _render_topology(topo: dict[str, Any]) -> list[str]:
    """The topology-aware what-if's table: multi-node jobs per policy."""
    s = topo["summary"]
    head = (
        f"topology-aware what-if: {s['multi_node_jobs']} multi-node job(s) of {s['jobs']}, "
        f"each kept inside one domain of {s['level'] or '(no level: each node)'} "
        f"({s['domains']} domains, from {s['level_source']})"
    )
    if not s["multi_node_jobs"]:
        return [head, "no multi-node pod groups to place"]
    lines = [
        head,
        f"{'policy':16s} {'started':>7s} {'in 1 domain':>11s} {'spread':>6s} "
        f"{'waited':>6s} {'never':>5s} {'mean wait h':>11s}",
    ]
    lines += [_topology_row(name, p) for name, p in topo["policies"].items()]
    if "what_happened" in s:
        lines.append(_topology_row("what happened", s["what_happened"]))
    best = s["most_multi_node_in_one_domain"]
    lines.append(
        f"most multi-node jobs inside one domain: {best}"
        if best is not None
        else "no policy started a multi-node job inside one domain in this replay"
    )
    return lines


def _check_inputs(args: argparse.Namespace) -> None:
    from gpuscope.core.errors import UserError

    stored = args.db is not None or bool(args.collector)  # a database, here or in a collector
    if args.week is not None and not stored:
        raise UserError("--week goes with --db")
    if (args.nodes is None) != (args.pods is None):
        raise UserError("--nodes and --pods go together")
    if stored and args.nodes is not None:
        raise UserError("give --db PATH or --nodes FILE --pods FILE, not both")
    if not stored and args.nodes is None:
        raise UserError("give --db PATH (a stored week) or --nodes FILE --pods FILE")
    if stored and args.objects:
        raise UserError("--objects goes with --nodes FILE --pods FILE, not --db")
    if stored and args.arrivals is not None:
        raise UserError("--arrivals applies to files; a stored week replays its own arrivals")


def _from_db(
    args: argparse.Namespace, policies: list[str], settings: Any, change: Any
) -> dict[str, Any]:
    from datetime import UTC, datetime

    from gpuscope.analytics.report.week import Week
    from gpuscope.analytics.whatif.week import WEEK_SEEDS, replay_window
    from gpuscope.cli.common import FIRST_YEAR, LAST_YEAR, open_store
    from gpuscope.core.errors import UserError

    now = datetime.now(UTC)
    week = Week.parse(args.week) if args.week else Week.last_complete(now)
    if not FIRST_YEAR <= week.year <= LAST_YEAR:
        raise UserError(f"--week {args.week}: expected a week between {FIRST_YEAR} and {LAST_YEAR}")
    week.check_over(now)
    collector = beside(args, settings, args.db)
    if collector is not None:  # a running collector holds it: replay there (cli/beside.py)
        return whatif_through(
            collector, week.label, policies, args.seeds, args.drop, args.topology_level,
            capacity_params(args) + [("calibrate", args.calibrate)] * bool(args.calibrate),
        )  # fmt: skip
    if args.db.is_dir():
        raise UserError(f"--db {args.db} is a folder; expected a database file")
    if not args.db.exists():
        raise UserError(f"database {args.db} does not exist")
    with open_store(args.db) as store:
        cur = store.cursor()
        try:
            replayed = replay_window(
                cur,
                week.start,
                week.end,
                policies,
                seeds=WEEK_SEEDS if args.seeds is None else int(args.seeds),
                drop=args.drop,
                coverage=settings.analytics.fgd_task_coverage,
                calibrate=args.calibrate or settings.analytics.whatif_policy,
            )
        finally:
            cur.close()
    if replayed is None:
        raise UserError(f"no pods and GPU nodes stored in {week.label}; nothing to replay")
    out = replayed.figures
    out["summary"].update({"source": "database", "week": week.label})
    out["topology"] = _topology_of_history(replayed.history, args, settings)
    if wants_capacity(args):
        coverage = settings.analytics.fgd_task_coverage
        policy = args.capacity_policy or args.calibrate or settings.analytics.whatif_policy
        out["capacity"] = capacity_of_history(replayed.history, change, policy, args, coverage)
    return out


def _topology_of_history(history: Any, args: argparse.Namespace, settings: Any) -> Any:
    from gpuscope.analytics.whatif.gangs_actual import week_figures

    labels = settings.analytics.topology_labels
    return week_figures(history, labels=labels, level=args.topology_level)


def _topology_of_files(workload: Any, args: argparse.Namespace, settings: Any) -> Any:
    """The topology-aware what-if of a kubectl snapshot; None for the trace's CSVs (they
    carry no node labels nor pod groups)."""
    from gpuscope.analytics.whatif.gangs import gang_figures, snapshot_trace

    if not workload.node_infos:
        return None
    trace = snapshot_trace(
        workload.node_infos,
        workload.pod_infos,
        workload.objects,
        labels=settings.analytics.topology_labels,
        level=args.topology_level,
    )
    return gang_figures(trace)


def cmd_whatif(args: argparse.Namespace) -> int:
    """Replay the workload under each policy and print what each allocated."""
    if getattr(args, "whatif_what", None) == "idle":
        return cmd_whatif_idle(args)
    from gpuscope.analytics.whatif.inputs import read_workload, run_policies
    from gpuscope.analytics.whatif.results import summarize
    from gpuscope.core.settings import load_settings

    _check_inputs(args)
    change = check_capacity(args)
    settings = load_settings(args.config)
    policies = list(dict.fromkeys(args.policy or POLICIES))
    if args.db is not None or args.collector:
        out = _from_db(args, policies, settings, change)
    else:
        workload = read_workload(args.nodes, args.pods, settings, objects=objects_of(args))
        seeds = 1 if args.seeds is None else int(args.seeds)
        results = run_policies(
            workload, policies, seeds=seeds, arrival_share=args.arrivals, drop=args.drop
        )
        out = summarize(results)
        out["summary"].update(
            {
                "source": workload.source,
                "nodes": len(workload.inventory.nodes),
                "tasks": len(workload.tasks),
                "arrival_share": args.arrivals,
                "seeds": seeds,
                "dropped_when_unplaceable": bool(args.drop),
            }
        )
        out["topology"] = _topology_of_files(workload, args, settings)
        if wants_capacity(args):
            coverage = settings.analytics.fgd_task_coverage
            policy = args.capacity_policy or settings.analytics.whatif_policy
            out["capacity"] = capacity_of_workload(workload, change, policy, args, coverage)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(_render(out), end="")
    return 0

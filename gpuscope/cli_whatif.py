"""``gpuscope whatif``: how many GPUs other placement policies would have allocated.

Kept apart from gpuscope/cli.py so the command's flags live beside the code that reads
them; cli.py only registers it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analytics.whatif.policies import POLICIES


def add_whatif_parser(sub: Any, number: Callable[..., Callable[[str], float]]) -> Any:
    """The ``whatif`` subcommand on the CLI's subparsers (``number``: cli.py's checked
    numeric argparse type)."""
    wi = sub.add_parser(
        "whatif",
        help="replay a workload under other placement policies: GPUs each would allocate",
    )
    wi.add_argument(
        "--nodes",
        type=Path,
        metavar="FILE",
        required=True,
        help="kubectl get nodes -o json, or the Alibaba trace's node CSV",
    )
    wi.add_argument(
        "--pods",
        type=Path,
        metavar="FILE",
        required=True,
        help="kubectl get pods -A -o json, or the Alibaba trace's pod CSV",
    )
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
        default=1,
        metavar="N",
        help="replays per policy, seeds 42.. (default 1)",
    )
    wi.add_argument(
        "--policy",
        nargs="+",
        choices=POLICIES,
        metavar="NAME",
        help=f"policies to replay (default all: {', '.join(POLICIES)})",
    )
    wi.add_argument(
        "--drop",
        action="store_true",
        help="drop pods that fit nowhere, as the FGD simulator does (default: they wait)",
    )
    wi.add_argument("--json", action="store_true", help="print one JSON object")
    wi.add_argument("--config", type=Path, help="YAML settings file (analytics:, workloads:)")
    return wi


def _render(out: dict[str, Any]) -> str:
    s = out["summary"]
    lines = [
        f"what-if on {s['nodes']} nodes, {s['capacity_gpus']} GPUs ({s['source']}); "
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
    lines.append(f"most GPUs allocated: {s['best_policy']}")
    return "\n".join(lines) + "\n"


def cmd_whatif(args: argparse.Namespace) -> int:
    """Replay the files' workload under each policy and print what each allocated."""
    from analytics.whatif.inputs import read_workload, run_policies
    from analytics.whatif.results import summarize
    from gpuscope.settings import load_settings

    settings = load_settings(args.config)
    workload = read_workload(args.nodes, args.pods, settings)
    policies = list(dict.fromkeys(args.policy or POLICIES))
    results = run_policies(
        workload, policies, seeds=int(args.seeds), arrival_share=args.arrivals, drop=args.drop
    )
    out = summarize(results)
    out["summary"].update(
        {
            "source": workload.source,
            "nodes": len(workload.inventory.nodes),
            "tasks": len(workload.tasks),
            "arrival_share": args.arrivals,
            "seeds": int(args.seeds),
            "dropped_when_unplaceable": bool(args.drop),
        }
    )
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(_render(out), end="")
    return 0

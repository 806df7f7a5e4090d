"""``gpuscope whatif``'s capacity flags: the same workload replayed on a changed cluster.

``--add-nodes MODEL:COUNT[:GPUS]``, ``--remove-nodes SELECTOR`` and ``--mig-layout
POOL:LAYOUT`` (each repeatable) change the cluster; ``--capacity-search`` asks for the fewest
GPUs that would have cut queued GPU-hours by half and by 90 %; ``--capacity-policy`` the
policy the capacity replays use (default: the calibrated one, ``--calibrate`` or
``analytics.whatif_policy``, kube-scheduler's ``leastallocated`` unless configured). Any
of them adds a ``capacity`` object to the output
(:func:`gpuscope.analytics.whatif.capacity.capacity_whatif`). Kept apart from
gpuscope/cli/whatif.py so the policy what-if's command stays readable; like it, building the
parser imports no analytics.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_capacity_arguments(wi: Any, policies: tuple[str, ...]) -> None:
    """The capacity flags on the ``whatif`` parser (``policies``: the policies' names)."""
    wi.add_argument(
        "--add-nodes",
        action="append",
        metavar="MODEL:COUNT[:GPUS]",
        help="capacity what-if: COUNT more nodes of a GPU model the cluster has, each a copy "
        "of its most common node shape (GPUS: of that many GPUs); repeatable",
    )
    wi.add_argument(
        "--remove-nodes",
        action="append",
        metavar="SELECTOR",
        help="capacity what-if: remove the nodes a label selector selects (kubectl -l "
        "syntax), or a node by name; repeatable",
    )
    wi.add_argument(
        "--mig-layout",
        action="append",
        metavar="POOL:LAYOUT",
        help="capacity what-if: split every GPU of the pool's nodes into LAYOUT per GPU "
        "(PROFILE[=N],..., e.g. 3g.40gb=2; 'none' for whole GPUs); repeatable",
    )
    wi.add_argument(
        "--capacity-search",
        action="store_true",
        help="the fewest GPUs (of the cluster's models, whole nodes) that would have cut "
        "queued GPU-hours by half and by 90 %%",
    )
    wi.add_argument(
        "--capacity-policy",
        choices=policies,
        metavar="NAME",
        help="the policy the capacity replays use (default: the calibrated one, --calibrate "
        "or analytics.whatif_policy)",
    )


def wants_capacity(args: argparse.Namespace) -> bool:
    return bool(
        args.add_nodes
        or args.remove_nodes
        or args.mig_layout
        or args.capacity_search
        or args.capacity_policy
    )


def check_capacity(args: argparse.Namespace) -> Any:
    """The change, parsed before anything is read (so a bad flag costs no replay)."""
    from gpuscope.analytics.whatif.capacity_change import change_of

    return change_of(args.add_nodes, args.remove_nodes, args.mig_layout)


def capacity_params(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The flags as ``GET /api/v1/whatif`` parameters (the CLI beside a collector)."""
    params = [("add_nodes", a) for a in args.add_nodes or ()]
    params += [("remove_nodes", s) for s in args.remove_nodes or ()]
    params += [("mig_layout", m) for m in args.mig_layout or ()]
    if args.capacity_search:
        params.append(("capacity_search", "true"))
    if args.capacity_policy:
        params.append(("capacity_policy", args.capacity_policy))
    return params


def capacity_of_workload(
    workload: Any, change: Any, policy: str, args: argparse.Namespace, coverage: float
) -> dict[str, Any]:
    """The capacity what-if of files: the trace's tasks drawn as the first seed's arrivals
    (the baseline cluster's capacity sets how many), or the snapshot's pods, as a window
    from the first arrival to the last."""
    from gpuscope.analytics.whatif.events import arrivals, inflate
    from gpuscope.analytics.whatif.history import History
    from gpuscope.analytics.whatif.inputs import DEFAULT_ARRIVALS, FIRST_SEED

    events = workload.events
    share = args.arrivals
    if events is None or share is not None:
        share = DEFAULT_ARRIVALS if share is None else share
        drawn = inflate(workload.tasks, workload.inventory.gpu_capacity, share, FIRST_SEED)
        events = tuple(arrivals(drawn))
    end = max((e.arrive for e in events), default=0.0)
    history = History(workload.inventory, (), tuple(events), 0.0, end, workload.node_infos)
    return capacity_of_history(history, change, policy, args, coverage)


def capacity_of_history(
    history: Any, change: Any, policy: str, args: argparse.Namespace, coverage: float
) -> dict[str, Any]:
    """The capacity what-if of a stored window."""
    from gpuscope.analytics.whatif.capacity import capacity_whatif, first_seed

    return capacity_whatif(
        history,
        change,
        policy,
        search=args.capacity_search,
        coverage=coverage,
        replayer=first_seed(coverage, drop=args.drop),
    )


def _wait(figures: dict[str, Any]) -> str:
    parts = []
    for cls, c in figures["mean_wait_hours"].items():
        if c["jobs"]:
            parts.append(f"{cls}: {c['mean_wait_hours']:.2f}")
    return ", ".join(parts) or "-"


def render_capacity(cap: dict[str, Any]) -> list[str]:
    """The capacity what-if as text: baseline and changed cluster, then the search."""
    from gpuscope.analytics.whatif.capacity import gpus_line

    change = cap["change"]
    described = "; ".join(
        f"{flag} {v}"
        for flag, key in (("add", "add_nodes"), ("remove", "remove_nodes"), ("MIG", "mig_layout"))
        for v in change[key]
    )
    lines = [
        f"capacity what-if under {cap['policy']}"
        + (f": {described}" if described else " (cluster as it was)"),
        f"{'cluster':14s} {'GPUs':>6s} {'queued GPU-h':>12s} {'not started':>11s} "
        f"{'allocated':>9s} {'mean alloc':>10s}  mean wait h by size",
    ]
    rows = [("as it was", cap["baseline"])]
    if "changed" in cap:
        rows.append(("changed", cap["changed"]))
    for name, f in rows:
        lines.append(
            f"{name:14s} {f['gpus']:6d} {f['queued_gpu_hours']:12.2f} "
            f"{f['jobs_never_started']:11d} {f['allocated_gpus']:9.1f} "
            f"{f['mean_allocated_gpus']:10.1f}  {_wait(f)}"
        )
    if "search" in cap:
        base = cap["baseline"]["queued_gpu_hours"]
        lines.append(gpus_line(cap["fewest_gpus_half"], "half", base))
        lines.append(gpus_line(cap["fewest_gpus_90"], "90 %", base))
        s = cap["search"]
        lines.append(
            f"({s['replays']} replay{'s' if s['replays'] != 1 else ''} searched, "
            f"up to {s['max_nodes']} nodes a model"
            + ("" if s["complete"] else "; stopped at the replay budget: answers may be high")
            + ")"
        )
    return lines

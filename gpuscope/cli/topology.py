"""``gpuscope analyze topology``: topology domains, slots and blocked pod groups from kubectl
files (``--nodes --pods``, with ``--objects`` for Kueue/KAI Topology, Volcano HyperNodes,
PodGroups and Workloads) or from a database's current inventory (``--db``)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from gpuscope.analytics.base import Analysis
from gpuscope.core.errors import UserError
from gpuscope.core.kube_objects import ObjectSet, load_objects
from gpuscope.core.settings import Settings


def run_topology(args: argparse.Namespace, at: datetime, settings: Settings) -> Analysis:
    from gpuscope.analytics.domains.topology_inputs import topology_from_files

    objects = load_objects(args.objects) if getattr(args, "objects", None) else ObjectSet()
    if args.nodes is not None:
        return topology_from_files(args.nodes, args.pods, objects, at=at, settings=settings)
    if args.db is None:
        raise UserError("give --nodes FILE --pods FILE (or --db PATH) for topology")
    from gpuscope.analytics.runner import analysis_time, newest_data, topology_from_store
    from gpuscope.cli.common import open_store

    with open_store(args.db) as store:
        cur = store.cursor()
        try:
            newest = newest_data(cur)
            if args.at is None:  # the data-age rule, as every analysis over a database
                at, note = analysis_time(newest, at, settings.collector.scrape_interval_seconds)
                if note:
                    print(f"gpuscope analyze: {note}", file=sys.stderr)
            out = topology_from_store(cur, at, settings, objects)
            until = newest_data(cur, at)
            out.summary["data_until"] = until.isoformat() if until else None
            return out
        finally:
            cur.close()

"""The fragmentation and quota dashboards, over the collector's analysis gauges.

The fragmentation analysis publishes cluster totals (``gpuscope_fragmentation_*``), the
same per pool (``gpuscope_fragmentation_pool_*{pool}``), free GPUs per node and the
number of k-GPU jobs that fit now and would fit packed (``{job_gpus}``). The quota
analysis publishes guaranteed, used, over-quota, pending and reclaimable GPUs per project.
These change when the analysis runs (every ``analytics.interval_minutes``), so the graphs
step rather than glide.
"""

from __future__ import annotations

from dashboards.grafana import (
    CLUSTER,
    GOOD_LOW,
    POOL,
    PROJECT,
    Dashboard,
    Panel,
    Query,
    Row,
    stat,
)

FRAG = "gpuscope_fragmentation_"
FGD_STEPS = ((None, "green"), (0.25, "orange"), (0.5, "red"))


def fragmentation() -> Dashboard:
    pool = "{{pool}}"
    return Dashboard(
        "gpuscope-fragmentation",
        "gpuscope / Fragmentation",
        "Free GPUs per node, the largest job that can still be placed, and the FGD "
        "fragmentation measure over time.",
        [
            Row(
                "Now",
                [
                    stat(
                        "Free GPUs",
                        f"{FRAG}free_gpus{{{CLUSTER}}}",
                        "short",
                        description="Unallocated GPU capacity, fractions included.",
                    ),
                    stat("Whole free GPUs", f"{FRAG}whole_free_gpus{{{CLUSTER}}}", "short"),
                    stat(
                        "Largest placeable job",
                        f"{FRAG}largest_placeable_job_gpus{{{CLUSTER}}}",
                        "short",
                        steps=((None, "red"), (2, "orange"), (8, "green")),
                        description="Most whole GPUs free on one node.",
                    ),
                    stat(
                        "FGD fragmentation",
                        f"{FRAG}fgd_fragmentation_ratio{{{CLUSTER}}}",
                        "percentunit",
                        steps=FGD_STEPS,
                        min=0,
                        max=1,
                    ),
                    stat(
                        "Stranded capacity",
                        f"{FRAG}stranded_gpu_capacity{{{CLUSTER}}}",
                        "short",
                        description="Free share left on partly used GPUs: only "
                        "fractional tasks can use it.",
                    ),
                    stat(
                        "Pending tasks",
                        f"{FRAG}pending_tasks{{{CLUSTER}}}",
                        "short",
                        steps=((None, "green"), (1, "orange")),
                    ),
                ],
            ),
            Row(
                "Where the free GPUs are",
                [
                    Panel(
                        "Free GPUs per node",
                        "bargauge",
                        [
                            Query(
                                f'{FRAG}node_whole_free_gpus{{{CLUSTER}, node=~"$node"}}',
                                "{{node}}",
                                instant=True,
                            )
                        ],
                        "short",
                        min=0,
                        width=8,
                        height=10,
                        steps=((None, "blue"), (4, "green")),
                        description="Whole free GPUs on each node (inventory allocation).",
                    ),
                    Panel(
                        "Largest placeable job per pool",
                        "timeseries",
                        [Query(f"{FRAG}pool_largest_placeable_job_gpus{{{POOL}}}", pool)],
                        "short",
                        min=0,
                        width=8,
                        height=10,
                    ),
                    Panel(
                        "k-GPU jobs that fit: now against packed",
                        "bargauge",
                        [
                            Query(
                                f"{FRAG}jobs_fit_now{{{CLUSTER}}}",
                                "{{job_gpus}} GPUs: now",
                                instant=True,
                            ),
                            Query(
                                f"{FRAG}jobs_fit_packed{{{CLUSTER}}}",
                                "{{job_gpus}} GPUs: if packed",
                                instant=True,
                            ),
                        ],
                        "short",
                        min=0,
                        width=8,
                        height=10,
                        description="How many jobs of each size the free GPUs hold as "
                        "they lie, and if the same free GPUs were packed onto fewest nodes.",
                    ),
                ],
            ),
            topology_row(),
            Row(
                "Over time",
                [
                    Panel(
                        "FGD fragmentation",
                        "timeseries",
                        [Query(f"{FRAG}fgd_fragmentation_ratio{{{CLUSTER}}}", "cluster")],
                        "percentunit",
                        min=0,
                        max=1,
                        steps=FGD_STEPS,
                        width=12,
                        description="Share of free GPU capacity the learnt task mix cannot "
                        "use (Weng et al., ATC '23).",
                    ),
                    Panel(
                        "FGD-fragmented GPUs per pool",
                        "timeseries",
                        [
                            Query(f"{FRAG}pool_fgd_fragmented_gpus{{{POOL}}}", pool),
                            Query(f"{FRAG}pool_free_gpus{{{POOL}}}", pool + " free"),
                        ],
                        "short",
                        min=0,
                        width=12,
                    ),
                ],
            ),
        ],
    )


TOPO = "gpuscope_topology_"


def topology_row() -> Row:
    """Topology domains (racks, leaf switches, NVLink domains): one table row per domain,
    sorted by level and name, so 100 racks stay readable; the slots per job size; the
    multi-node jobs that wait for a domain (docs/metrics.md, Topology gauges)."""
    where = f"{CLUSTER}"
    return Row(
        "Topology: racks, leaves, NVLink domains",
        [
            stat(
                "Multi-node jobs waiting for a domain",
                f"{TOPO}blocked_pod_groups{{{where}}}",
                "short",
                steps=((None, "green"), (1, "orange")),
                description="Pending pod groups the free GPUs cover but no single domain of "
                "their level holds (topology_fragmentation findings).",
            ),
            Panel(
                "Jobs of N GPUs that fit, each inside one domain",
                "bargauge",
                [
                    Query(
                        f"{TOPO}slots{{{where}}}",
                        "{{level}}: {{job_gpus}} GPUs",
                        instant=True,
                    )
                ],
                "short",
                min=0,
                width=6,
                height=12,
                description="Slots: how many jobs of 8, 16, 32 ... GPUs the free GPUs hold at "
                "once when each must stay inside one domain of the level.",
            ),
            Panel(
                "Domains: free GPUs, whole free nodes, largest job",
                "table",
                [
                    Query(f"{TOPO}domain_free_gpus{{{where}}}", "free GPUs"),
                    Query(f"{TOPO}domain_whole_free_nodes{{{where}}}", "whole free nodes"),
                    Query(f"{TOPO}domain_largest_job_gpus{{{where}}}", "largest job (GPUs)"),
                ],
                "short",
                width=12,
                height=12,
                description="One row per domain and level (a rack, a leaf-switch group, an "
                "NVLink domain): whole free GPUs on its open nodes, nodes with every GPU "
                "free, and the largest job of node-sized pods it holds now.",
            ),
            Panel(
                "Free GPUs per node, rack by rack",
                "table",
                [
                    Query(
                        f"sum by (rack, node) ({FRAG}node_whole_free_gpus{{{where}}}"
                        f" * on (node) group_left (rack) gpuscope_node_info{{{where}}})",
                        "whole free GPUs",
                    ),
                    Query(
                        f"sum by (rack, node) (gpuscope_node_allocatable_gpus{{{where}}}"
                        f" * on (node) group_left (rack) gpuscope_node_info{{{where}}})",
                        "GPUs",
                    ),
                ],
                "short",
                width=24,
                height=12,
                description="The rack x node grid: every node with its rack, whole free GPUs "
                "and GPUs (sort by rack to read a rack's nodes together; filter to one rack "
                "with the column filter).",
            ),
            Panel(
                "64-GPU slots over time",
                "timeseries",
                [Query(f'{TOPO}slots{{{where}, job_gpus="64"}}', "{{level}}")],
                "short",
                min=0,
                width=12,
                description="How many 64-GPU jobs fit at once, each inside one domain.",
            ),
            Panel(
                "Topology-fragmented GPUs per level",
                "timeseries",
                [
                    Query(f"{TOPO}level_fragmented_gpus{{{where}}}", "{{level}}"),
                    Query(f"{TOPO}level_free_gpus{{{where}}}", "{{level}} free"),
                ],
                "short",
                min=0,
                width=12,
                description="Free GPUs in domains too broken to hold one multi-node job of the "
                "mix the cluster runs.",
            ),
        ],
    )


def quotas() -> Dashboard:
    project = "{{project}}"
    q = "gpuscope_quota_"
    return Dashboard(
        "gpuscope-quotas",
        "gpuscope / Quotas",
        "Guaranteed against used against over-quota GPUs per project, what waits, what could "
        "be reclaimed, and fairness.",
        [
            Row(
                "Cluster",
                [
                    stat("Guaranteed", f"{q}total_guaranteed_gpus{{{CLUSTER}}}", "short"),
                    stat("Used", f"{q}total_used_gpus{{{CLUSTER}}}", "short"),
                    stat(
                        "Over quota",
                        f"{q}total_over_quota_gpus{{{CLUSTER}}}",
                        "short",
                        steps=((None, "green"), (1, "orange")),
                    ),
                    stat(
                        "Pending",
                        f"{q}total_pending_gpus{{{CLUSTER}}}",
                        "short",
                        steps=((None, "green"), (1, "orange")),
                    ),
                    stat(
                        "Reclaimable",
                        f"{q}total_reclaimable_gpus{{{CLUSTER}}}",
                        "short",
                        steps=((None, "green"), (1, "red")),
                        description="Over-quota GPUs that projects waiting under their "
                        "guarantee are owed.",
                    ),
                    stat(
                        "Projects waiting",
                        f"{q}projects_waiting{{{CLUSTER}}}",
                        "short",
                        steps=((None, "green"), (1, "orange")),
                    ),
                ],
            ),
            Row(
                "Per project",
                [
                    Panel(
                        "Guaranteed, used and over quota",
                        "table",
                        [
                            Query(f"{q}guaranteed_gpus{{{PROJECT}}}", "guaranteed"),
                            Query(f"{q}used_gpus{{{PROJECT}}}", "used"),
                            Query(f"{q}over_quota_gpus{{{PROJECT}}}", "over quota"),
                            Query(f"{q}pending_gpus{{{PROJECT}}}", "pending"),
                            Query(f"{q}reclaimable_gpus{{{PROJECT}}}", "reclaimable"),
                        ],
                        "short",
                        width=12,
                        height=9,
                        description="GPUs per project (reclaimable: over-quota GPUs that "
                        "projects waiting under their guarantee are owed).",
                    ),
                    Panel(
                        "Use of the guarantee",
                        "bargauge",
                        [
                            Query(
                                f"{q}used_gpus{{{PROJECT}}} / ({q}guaranteed_gpus{{{PROJECT}}}"
                                " > 0)",
                                project,
                                instant=True,
                            )
                        ],
                        "percentunit",
                        min=0,
                        max=2,
                        width=6,
                        height=9,
                        steps=((None, "green"), (1, "orange"), (1.5, "red")),
                        description="Used over guaranteed; past 100 % the project "
                        "borrows. Projects without a guarantee are left out.",
                    ),
                    Panel(
                        "Fairness",
                        "bargauge",
                        [Query(f"{q}fairness_ratio{{{PROJECT}}}", project, instant=True)],
                        "short",
                        min=0,
                        width=6,
                        height=9,
                        steps=((None, "blue"), (1.5, "orange"), (3, "red")),
                        description="Share of GPU-hours over share of guarantees (1 = "
                        "what it was promised).",
                    ),
                ],
            ),
            Row(
                "Over time",
                [
                    Panel(
                        "Used GPUs per project",
                        "timeseries",
                        [Query(f"{q}used_gpus{{{PROJECT}}}", project)],
                        "short",
                        width=8,
                    ),
                    Panel(
                        "Over-quota GPUs per project",
                        "timeseries",
                        [Query(f"{q}over_quota_gpus{{{PROJECT}}}", project)],
                        "short",
                        width=8,
                        steps=GOOD_LOW,
                    ),
                    Panel(
                        "Pending GPUs per project",
                        "timeseries",
                        [Query(f"{q}pending_gpus{{{PROJECT}}}", project)],
                        "short",
                        width=8,
                    ),
                ],
            ),
        ],
    )

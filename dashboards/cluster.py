"""The cluster overview and the nodes-and-GPUs dashboards.

GPU-level numbers come from the agents' series (``node``/``gpu`` labels); analysis
numbers (fragmentation, findings, idle sessions) from the collector's gauges. A GPU is
*allocated* when a workload's series names it, *busy* when its utilization is at least
5 % (the idle detector's default threshold), *idle* when allocated and not busy.
"""

from __future__ import annotations

from typing import Any

from dashboards.grafana import (
    CLUSTER,
    FRAGMENTATION,
    GOOD_HIGH,
    GOOD_LOW,
    INFINIBAND,
    NODE,
    NODES,
    QUOTAS,
    WORKLOADS,
    Dashboard,
    Panel,
    Query,
    Row,
    stat,
)

#: Per physical GPU (MIG instances share their GPU's ``gpu`` label).
UTIL = f"max by (cluster, node, gpu) (gpuscope_gpu_utilization_ratio{{{NODE}}})"
HELD = f"count by (cluster, node, gpu) (gpuscope_gpu_workload_info{{{NODE}}})"
TOTAL = f'count(gpuscope_gpu_info{{{NODE}, mig_instance=""}})'
ALLOCATED = f"count({HELD})"
BUSY = f"count({UTIL} >= 0.05)"
IDLE = f"count(({UTIL} < 0.05) and on (cluster, node, gpu) {HELD})"
EFFICIENCY = f"avg({UTIL} and on (cluster, node, gpu) {HELD})"


def overview() -> Dashboard:
    gpus = Row(
        "GPUs",
        [
            stat(
                "GPUs",
                TOTAL,
                "short",
                links=[NODES],
                description="Physical GPUs the agents report.",
            ),
            stat(
                "Allocated",
                ALLOCATED,
                "short",
                links=[WORKLOADS],
                description="GPUs a workload holds.",
            ),
            stat("Busy", BUSY, "short", links=[NODES], description="GPUs at least 5 % utilised."),
            stat(
                "Idle but allocated",
                IDLE,
                "short",
                links=[WORKLOADS],
                steps=((None, "green"), (1, "orange"), (8, "red")),
                description="Held by a workload yet under 5 % utilised.",
            ),
            stat(
                "Efficiency",
                EFFICIENCY,
                "percentunit",
                steps=GOOD_HIGH,
                min=0,
                max=1,
                links=[WORKLOADS],
                description="Mean utilization of allocated GPUs.",
            ),
            stat(
                "FGD fragmentation",
                f"gpuscope_fragmentation_fgd_fragmentation_ratio{{{CLUSTER}}}",
                "percentunit",
                steps=((None, "green"), (0.25, "orange"), (0.5, "red")),
                min=0,
                max=1,
                links=[FRAGMENTATION],
                description="Share of free GPU capacity the typical task mix cannot use "
                "(FGD, from the last fragmentation analysis).",
            ),
        ],
    )
    trends = Row(
        "Over time",
        [
            Panel(
                "GPUs allocated, busy and idle",
                "timeseries",
                unit="short",
                width=12,
                queries=[
                    Query(TOTAL, "total"),
                    Query(ALLOCATED, "allocated"),
                    Query(BUSY, "busy"),
                    Query(IDLE, "idle but allocated"),
                ],
            ),
            Panel(
                "Efficiency of allocated GPUs",
                "timeseries",
                unit="percentunit",
                width=12,
                queries=[Query(EFFICIENCY, "efficiency")],
                steps=GOOD_HIGH,
                min=0,
                max=1,
            ),
        ],
    )
    findings = Row(
        "Findings and capacity",
        [
            Panel(
                "Open findings by kind",
                "bargauge",
                unit="short",
                width=8,
                height=9,
                queries=[
                    Query(
                        f"sum by (kind) (gpuscope_findings{{{CLUSTER}, "
                        f'severity=~"warning|critical"}})',
                        "{{kind}}",
                        instant=True,
                    )
                ],
                steps=((None, "green"), (1, "orange"), (5, "red")),
                description="Warning and critical findings of the last analysis.",
            ),
            Panel(
                "Findings by severity",
                "timeseries",
                unit="short",
                width=8,
                height=9,
                queries=[
                    Query(f"sum by (severity) (gpuscope_findings{{{CLUSTER}}})", "{{severity}}")
                ],
            ),
            stat(
                "Largest placeable job",
                f"gpuscope_fragmentation_largest_placeable_job_gpus{{{CLUSTER}}}",
                "short",
                links=[FRAGMENTATION],
                height=9,
                description="Most GPUs one job could get on one node now.",
            ),
            stat(
                "Projects over quota",
                f"gpuscope_quota_projects_over_quota{{{CLUSTER}}}",
                "short",
                steps=((None, "green"), (1, "orange")),
                links=[QUOTAS],
                height=9,
            ),
            stat(
                "Hot InfiniBand ports",
                f"gpuscope_bandwidth_hot_ports{{{CLUSTER}}}",
                "short",
                steps=((None, "green"), (1, "orange")),
                links=[INFINIBAND],
                height=9,
            ),
            stat(
                "GPU-hours lost idle",
                f"gpuscope_idle_wasted_gpu_seconds{{{CLUSTER}}} / 3600",
                "short",
                steps=((None, "green"), (1, "orange"), (10, "red")),
                links=[WORKLOADS],
                height=9,
                description="GPU-hours held by the idle workloads since they went idle.",
            ),
        ],
    )
    return Dashboard(
        "gpuscope-overview",
        "gpuscope / Cluster overview",
        "GPUs allocated, used and idle, efficiency, fragmentation and open findings.",
        [gpus, trends, findings],
        links=[NODES, WORKLOADS, FRAGMENTATION, QUOTAS, INFINIBAND],
    )


def nodes() -> Dashboard:
    per_gpu = "{{node}} / {{gpu}}"
    whole = f'{NODE}, mig_instance=""'

    def series(title: str, expr: str, unit: str, **kw: Any) -> Panel:
        return Panel(title, "timeseries", [Query(expr, per_gpu)], unit, **kw)

    return Dashboard(
        "gpuscope-nodes",
        "gpuscope / Nodes and GPUs",
        "Per GPU: utilization, memory, power, temperature, ECC errors, SM and tensor activity.",
        [
            Row(
                "Activity",
                [
                    series(
                        "GPU utilization",
                        f"gpuscope_gpu_utilization_ratio{{{whole}}}",
                        "percentunit",
                        min=0,
                        max=1,
                    ),
                    series(
                        "SM active",
                        f"gpuscope_gpu_sm_active_ratio{{{whole}}}",
                        "percentunit",
                        min=0,
                        max=1,
                        description="DCGM profiling; absent where unsupported.",
                    ),
                    series(
                        "Tensor active",
                        f"gpuscope_gpu_tensor_active_ratio{{{whole}}}",
                        "percentunit",
                        min=0,
                        max=1,
                    ),
                ],
            ),
            Row(
                "Memory, power, temperature",
                [
                    series(
                        "Memory used",
                        f"gpuscope_gpu_memory_used_bytes{{{whole}}} / "
                        f"gpuscope_gpu_memory_total_bytes{{{whole}}}",
                        "percentunit",
                        min=0,
                        max=1,
                        steps=GOOD_LOW,
                    ),
                    series("Power", f"gpuscope_gpu_power_watts{{{whole}}}", "watt"),
                    series(
                        "Temperature",
                        f"gpuscope_gpu_temperature_celsius{{{whole}}}",
                        "celsius",
                        steps=((None, "green"), (80, "orange"), (90, "red")),
                    ),
                ],
            ),
            Row(
                "Clocks and PCIe",
                [
                    series("SM clock", f"gpuscope_gpu_sm_clock_hertz{{{whole}}}", "hertz"),
                    series("Memory clock", f"gpuscope_gpu_memory_clock_hertz{{{whole}}}", "hertz"),
                    Panel(
                        "PCIe throughput",
                        "timeseries",
                        [
                            Query(
                                f"sum by (node, gpu, direction) (rate("
                                f"gpuscope_gpu_pcie_bytes_total{{{whole}}}[$__rate_interval]))",
                                "{{node}} / {{gpu}} {{direction}}",
                            )
                        ],
                        "Bps",
                        description="Throttle reasons, XID errors, PCIe replays, remapped rows "
                        "and per-MIG-instance panels are not here yet: the agent's sources do "
                        "not read the first four (docs/dashboards.md).",
                    ),
                ],
            ),
            Row(
                "Errors and links",
                [
                    Panel(
                        "ECC errors in the time range",
                        "bargauge",
                        [
                            Query(
                                f"sum by (node, gpu, type) (increase("
                                f"gpuscope_gpu_ecc_errors_total{{{whole}}}[$__range]))",
                                "{{node}} / {{gpu}} {{type}}",
                                instant=True,
                            )
                        ],
                        "short",
                        steps=((None, "green"), (1, "orange"), (10, "red")),
                    ),
                    series(
                        "NVLink traffic",
                        f"sum by (node, gpu) (rate("
                        f"gpuscope_gpu_nvlink_bytes_total{{{whole}}}[$__rate_interval]))",
                        "Bps",
                    ),
                    stat(
                        "Agent sources down",
                        f"sum(1 - gpuscope_agent_source_up{{{NODE}}})",
                        "short",
                        steps=((None, "green"), (1, "red")),
                        width=8,
                        height=8,
                        description="Sources (GPU, workload, InfiniBand) that failed their "
                        "last collection.",
                    ),
                ],
            ),
        ],
    )

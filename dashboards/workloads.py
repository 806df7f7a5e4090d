"""The workloads dashboard: who holds the GPUs and how they use them, per namespace,
project and pod; interactive sessions against batch; idle sessions and how long.

The agents' workload series carry namespace, pod and container; the project, workload kind
and interactivity come from joining ``gpuscope_gpu_workload_info``. Idle sessions come from
the collector's idle-analysis gauges.
"""

from __future__ import annotations

from dashboards.grafana import (
    CLUSTER,
    GOOD_HIGH,
    WORKLOAD,
    Dashboard,
    Panel,
    Query,
    Row,
    stat,
)

#: The workload series joined with their info series for project, kind and interactivity.
WORKLOAD_KEY = "node, uuid, mig_instance, namespace, pod, container"
INFO = f'gpuscope_gpu_workload_info{{{WORKLOAD}, project=~"$project"}}'


def _joined(metric: str, labels: str = "project, workload_kind, interactive") -> str:
    return f"{metric}{{{WORKLOAD}}} * on ({WORKLOAD_KEY}) group_left ({labels}) {INFO}"


def per(label: str) -> str:
    """GPUs held per ``label``; a GPU shared by two pods of one namespace counts once."""
    return f"count by ({label}) (count by (cluster, {label}, node, gpu) ({INFO}))"


def workloads() -> Dashboard:
    pod = "{{namespace}} / {{pod}}"
    util = _joined("gpuscope_gpu_workload_utilization_ratio")
    mem = _joined("gpuscope_gpu_workload_memory_used_bytes")
    idle_sel = f'{CLUSTER}, node=~"$node", namespace=~"$namespace"'
    idle_project = (
        "* on (namespace, pod, container) group_left (project) max by (namespace, pod, "
        f'container, project) (gpuscope_gpu_workload_info{{{CLUSTER}, project=~"$project"}})'
    )
    return Dashboard(
        "gpuscope-workloads",
        "gpuscope / Workloads",
        "GPUs and their use per namespace, project and pod; interactive against batch; idle "
        "sessions and how long they have been idle.",
        [
            Row(
                "Who holds the GPUs",
                [
                    Panel(
                        "GPUs held per namespace",
                        "bargauge",
                        [
                            Query(
                                per("namespace"),
                                "{{namespace}}",
                                instant=True,
                            )
                        ],
                        "short",
                    ),
                    Panel(
                        "GPUs held per project",
                        "bargauge",
                        [
                            Query(
                                per("project"),
                                "{{project}}",
                                instant=True,
                            )
                        ],
                        "short",
                    ),
                    Panel(
                        "GPUs held by workload kind",
                        "timeseries",
                        [Query(f"count by (workload_kind) ({INFO})", "{{workload_kind}}")],
                        "short",
                        description="Interactive sessions against training, batch and inference.",
                    ),
                ],
            ),
            Row(
                "How they are used",
                [
                    Panel(
                        "Utilization per pod",
                        "timeseries",
                        [
                            Query(
                                f"avg by (namespace, pod) ({util})",
                                pod,
                            )
                        ],
                        "percentunit",
                        min=0,
                        max=1,
                        width=12,
                    ),
                    Panel(
                        "GPU memory per pod",
                        "timeseries",
                        [
                            Query(
                                f"sum by (namespace, pod) ({mem})",
                                pod,
                            )
                        ],
                        "bytes",
                        width=12,
                    ),
                    Panel(
                        "Utilization: interactive against batch",
                        "timeseries",
                        [
                            Query(
                                f"avg by (interactive) ({util})",
                                "interactive={{interactive}}",
                            )
                        ],
                        "percentunit",
                        min=0,
                        max=1,
                        width=12,
                        steps=GOOD_HIGH,
                    ),
                    Panel(
                        "Utilization per project",
                        "timeseries",
                        [
                            Query(
                                f"avg by (project) ({util})",
                                "{{project}}",
                            )
                        ],
                        "percentunit",
                        min=0,
                        max=1,
                        width=12,
                    ),
                ],
            ),
            Row(
                "Idle sessions",
                [
                    Panel(
                        "Idle sessions and workloads",
                        "table",
                        [
                            Query(
                                f"time() - gpuscope_idle_since_timestamp_seconds{{{idle_sel}}} "
                                f"{idle_project}",
                                "idle for",
                            ),
                            Query(
                                f"gpuscope_idle_gpus_held{{{idle_sel}}} {idle_project}", "GPUs held"
                            ),
                        ],
                        "s",
                        width=16,
                        height=9,
                        steps=((None, "green"), (1800, "orange"), (7200, "red")),
                        column_units={"GPUs held": "short"},
                        description="From the last idle analysis: how long each has been idle "
                        "and the GPUs it holds. kind idle_session is "
                        "interactive (a candidate for stopping); workload_idle is batch.",
                    ),
                    stat(
                        "Idle sessions",
                        f"gpuscope_idle_sessions{{{CLUSTER}}}",
                        "short",
                        height=9,
                        steps=((None, "green"), (1, "orange")),
                    ),
                    stat(
                        "GPUs held idle",
                        f"gpuscope_idle_gpus{{{CLUSTER}}}",
                        "short",
                        height=9,
                        steps=((None, "green"), (1, "orange"), (8, "red")),
                    ),
                ],
            ),
        ],
    )

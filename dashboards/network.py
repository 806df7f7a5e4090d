"""The InfiniBand dashboard: throughput per port as a share of its link rate, hot spots,
transmit wait (congestion), errors and rail balance.

Shares are the agents' byte counters' rate over the port's link rate (both series of one
target, so they divide label for label). Rail balance of a node is its least loaded port's
transmit share over its busiest port's: 1 when a rail-optimised job spreads evenly over
the rails, near 0 when it funnels through one; nodes whose busiest port is under 5 % of its
link rate are left out (their balance is noise).
"""

from __future__ import annotations

from dashboards.grafana import (
    CLUSTER,
    GOOD_HIGH,
    GOOD_LOW,
    NODE,
    Dashboard,
    Panel,
    Query,
    Row,
    stat,
)

PORT = "{{node}} {{device}}/{{port}}"
RATE = f"gpuscope_ib_port_rate_bytes_per_second{{{NODE}}}"


def share(counter: str) -> str:
    """A byte counter's rate as a share of the port's link rate."""
    return f"rate({counter}{{{NODE}}}[$__rate_interval]) / {RATE}"


TX = share("gpuscope_ib_transmit_bytes_total")
RX = share("gpuscope_ib_receive_bytes_total")
BALANCE = f"min by (cluster, node) ({TX}) / (max by (cluster, node) ({TX}) > 0.05)"


def infiniband() -> Dashboard:
    return Dashboard(
        "gpuscope-infiniband",
        "gpuscope / InfiniBand",
        "Per port throughput against link rate, hot spots, transmit wait, errors and rail balance.",
        [
            Row(
                "Summary",
                [
                    stat(
                        "Hot ports",
                        f"gpuscope_bandwidth_hot_ports{{{CLUSTER}}}",
                        "short",
                        steps=((None, "green"), (1, "orange")),
                        description="Ports over the hot threshold for the analysis window.",
                    ),
                    stat(
                        "Busiest port",
                        f"gpuscope_bandwidth_max_port_ratio{{{CLUSTER}}}",
                        "percentunit",
                        steps=GOOD_LOW,
                        min=0,
                        max=1,
                    ),
                    stat(
                        "Congested ports",
                        f"gpuscope_bandwidth_ports_congested{{{CLUSTER}}}",
                        "short",
                        steps=((None, "green"), (1, "orange")),
                    ),
                    stat(
                        "Ports with errors",
                        f"gpuscope_bandwidth_ports_with_errors{{{CLUSTER}}}",
                        "short",
                        steps=((None, "green"), (1, "red")),
                    ),
                    stat(
                        "Imbalanced nodes",
                        f"gpuscope_bandwidth_imbalanced_nodes{{{CLUSTER}}}",
                        "short",
                        steps=((None, "green"), (1, "orange")),
                    ),
                    stat(
                        "Ports down",
                        f"sum(1 - gpuscope_ib_port_up{{{NODE}}})",
                        "short",
                        steps=((None, "green"), (1, "red")),
                    ),
                ],
            ),
            Row(
                "Throughput",
                [
                    Panel(
                        "Transmit, share of link rate",
                        "timeseries",
                        [Query(TX, PORT)],
                        "percentunit",
                        min=0,
                        max=1,
                        steps=GOOD_LOW,
                        width=12,
                    ),
                    Panel(
                        "Receive, share of link rate",
                        "timeseries",
                        [Query(RX, PORT)],
                        "percentunit",
                        min=0,
                        max=1,
                        steps=GOOD_LOW,
                        width=12,
                    ),
                    Panel(
                        "Hot spots: busiest ports now",
                        "bargauge",
                        [Query(f"topk(10, {TX})", PORT, instant=True)],
                        "percentunit",
                        min=0,
                        max=1,
                        steps=GOOD_LOW,
                        width=8,
                        height=9,
                    ),
                    Panel(
                        "Hot ports per node (analysis)",
                        "bargauge",
                        [
                            Query(
                                f'gpuscope_bandwidth_node_hot_ports{{{CLUSTER}, node=~"$node"}}'
                                " > 0",
                                "{{node}}",
                                instant=True,
                            )
                        ],
                        "short",
                        min=0,
                        width=8,
                        height=9,
                        steps=((None, "orange"), (4, "red")),
                        description="Ports over the hot threshold for the whole analysis "
                        "window, per node (nodes without any are not listed).",
                    ),
                    Panel(
                        "Rail balance",
                        "timeseries",
                        [Query(BALANCE, "{{node}}")],
                        "percentunit",
                        min=0,
                        max=1,
                        steps=GOOD_HIGH,
                        width=8,
                        height=9,
                        description="Least over most loaded port's transmit share per "
                        "node (1 = even over the rails).",
                    ),
                ],
            ),
            Row(
                "Congestion and errors",
                [
                    Panel(
                        "Transmit wait",
                        "timeseries",
                        [
                            Query(
                                f"rate(gpuscope_ib_transmit_wait_total{{{NODE}}}"
                                "[$__rate_interval]) > 0",
                                PORT,
                            )
                        ],
                        "short",
                        width=12,
                        description="Ticks per second a port had data but no credits "
                        "(ports that never wait are left out).",
                    ),
                    Panel(
                        "Errors in the time range by type",
                        "bargauge",
                        [
                            Query(
                                f"sum by (type) (increase(gpuscope_ib_errors_total{{{NODE}}}"
                                "[$__range]))",
                                "{{type}}",
                                instant=True,
                            )
                        ],
                        "short",
                        min=0,
                        width=12,
                        steps=((None, "green"), (1, "orange"), (100, "red")),
                    ),
                ],
            ),
        ],
    )

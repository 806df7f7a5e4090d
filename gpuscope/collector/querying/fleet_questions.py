"""What fleet mode asks the engine: the metrics and how each bucket summarizes them, the
recording rules' names for those summaries, and how nodes are split into shards.

Kept apart from the asking (gpuscope/collector/querying/fleet.py), so that what a bucket
holds can be read, and is imported by the detectors (``BUCKET_S``), without the engine
client.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

BUCKET_S = 300
#: What is asked is what the detectors, the report, the API and the alerts read (a series
#: nothing reads would cost the collector ~1 KB of memory each and the engine a query);
#: the engine keeps the rest for dashboards.
#: The busy signals: stored as each bucket's peak.
PEAK = (
    "gpuscope_gpu_utilization_ratio", "gpuscope_gpu_memory_utilization_ratio",
    "gpuscope_gpu_sm_active_ratio", "gpuscope_gpu_workload_utilization_ratio",
)  # fmt: skip
#: Levels: stored as each bucket's mean.
MEAN = ("gpuscope_gpu_memory_used_bytes", "gpuscope_gpu_workload_memory_used_bytes")
#: Inventory gauges and counters: stored as their value at the bucket's end.
LAST = (
    "gpuscope_gpu_info", "gpuscope_gpu_up", "gpuscope_gpu_workload_info",
    "gpuscope_gpu_ecc_errors_total", "gpuscope_gpu_nvlink_bytes_total",
    "gpuscope_gpu_pcie_bytes_total", "gpuscope_ib_transmit_bytes_total",
    "gpuscope_ib_receive_bytes_total", "gpuscope_ib_transmit_wait_total",
    "gpuscope_ib_errors_total", "gpuscope_ib_port_rate_bytes_per_second",
    "gpuscope_agent_info", "gpuscope_agent_source_up",
)  # fmt: skip
#: The node list each cycle's shards are built from.
NODES_QUERY = "count by (node) (last_over_time(gpuscope_agent_info[{w}s]))"


def rule_name(metric: str, how: str) -> str:
    """The recording rule's series for a metric's bucket summary (``gpuscope:*``)."""
    return f"gpuscope:{metric.removeprefix('gpuscope_')}:{how}5m"


RULE_NAMES = {rule_name(m, "max"): m for m in PEAK} | {rule_name(m, "avg"): m for m in MEAN}
#: The metrics the recording rules summarize, under the names they are stored as.
SUMMARIZED = frozenset((*PEAK, *MEAN))


def over_time_questions(sel: str) -> list[tuple[str, str]]:
    """The busy signals' peaks and the levels' means of a bucket, asked of the raw series
    (``sel``: a shard's node matcher), each stored under its metric's name."""
    out = [(f"max_over_time({m}{{{sel}}}[{BUCKET_S}s])", m) for m in PEAK]
    return out + [(f"avg_over_time({m}{{{sel}}}[{BUCKET_S}s])", m) for m in MEAN]


def shard_of(node: str, shards: int) -> int:
    """A node's shard: a stable hash of its name (the same in every process and run)."""
    return zlib.crc32(node.encode()) % shards


def node_regex(nodes: Sequence[str]) -> str:
    """A PromQL string literal's content matching exactly these nodes (regex escaped, then
    backslashes doubled for the string literal). Their common prefix is written once
    (``gpu-node-(0012|0047)``): a shard of 300 nodes named alike is then a third as long,
    and engines bound a query's length (VictoriaMetrics ``-search.maxQueryLen``, 16 KB)."""
    names = sorted(set(nodes))
    # the common prefix of sorted names is that of the first and the last
    first, last = (names[0], names[-1]) if len(names) > 1 else ("", "")
    size = next(
        (i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b),
        min(len(first), len(last)),
    )
    prefix = first[:size]
    if len(prefix) < 4:
        text = "|".join(re.escape(n) for n in names)
    else:
        rest = "|".join(re.escape(n[len(prefix) :]) for n in names)
        text = f"{re.escape(prefix)}({rest})"
    return text.replace("\\", "\\\\")

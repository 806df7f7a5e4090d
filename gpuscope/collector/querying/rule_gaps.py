"""Fleet mode with recording rules: the buckets the engine's rules did not reach.

A rule evaluator (vmalert, Prometheus' rule manager) evaluates at its own pace and never
makes up an evaluation it missed (a restart, an evaluation slower than its interval, a
remote write behind the engine's latency offset), while fleet mode asks each bucket once.
So a bucket whose rule results were not there when asked would be stored without its
nodes' busy peaks and memory means: to the idle detector, no data. These pure functions
find such (bucket, node) pairs in a shard's answer and put in their place the same
summaries asked of the raw series (gpuscope/collector/querying/fleet.py asks them).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.collector.scraping.batch import Batch, Labels

#: A node's GPUs in a bucket: an inventory gauge the agent sends for each GPU.
_GPU_PRESENT = "gpuscope_gpu_info"


def _node(labels: Labels) -> str | None:
    return next((v for k, v in labels if k == "node"), None)


def rule_gaps(buckets: Sequence[Batch], summarized: frozenset[str]) -> dict[int, set[str]]:
    """Per bucket (``ts_ms``), the nodes with GPUs there (``gpuscope_gpu_info``) and no
    result at all of the recording rules (``summarized``: the metrics they summarize, as
    stored): the buckets the rules' evaluations did not reach for them. A rule group is
    evaluated as one, so a node with any of its results was reached; which metrics a node
    has depends on its GPUs (a MIG-enabled GPU has no NVML utilization), so none is
    required in particular."""
    gaps: dict[int, set[str]] = {}
    for b in buckets:
        gpus: set[str] = set()
        reached: set[str] = set()
        for name, labels in zip(b.names, b.labels, strict=True):
            if name == _GPU_PRESENT or name in summarized:
                node = _node(labels)
                if node is not None:
                    (gpus if name == _GPU_PRESENT else reached).add(node)
        if missing := gpus - reached:
            gaps[b.ts_ms] = missing
    return gaps


def fill_rule_gaps(
    buckets: Sequence[Batch], gaps: dict[int, set[str]], asked: Sequence[Batch]
) -> int:
    """Into each bucket of ``gaps``, its missing nodes' summaries from ``asked`` (the same
    buckets asked as ``*_over_time``); returns the (bucket, node) pairs filled. A pair the
    raw series do not answer either (a node whose agent sends none of those metrics) stays
    as it was and is not counted."""
    answers = {b.ts_ms: b for b in asked}
    filled = 0
    for b in buckets:
        missing = gaps.get(b.ts_ms)
        a = answers.get(b.ts_ms)
        if not missing or a is None:
            continue
        got: set[str] = set()
        for name, labels, value in zip(a.names, a.labels, a.values, strict=True):
            node = _node(labels)
            if node in missing:
                b.names.append(name)
                b.labels.append(labels)
                b.values.append(value)
                got.add(node)
        filled += len(got)
    return filled

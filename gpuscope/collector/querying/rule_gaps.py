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

#: A node's GPUs in a bucket (an inventory gauge every agent sends each GPU), and the
#: summary every GPU gets from the rules (NVML utilization: every GPU source has it).
_GPU_PRESENT = "gpuscope_gpu_info"
_RULE_PRESENT = "gpuscope_gpu_utilization_ratio"


def _node(labels: Labels) -> str | None:
    return next((v for k, v in labels if k == "node"), None)


def rule_gaps(buckets: Sequence[Batch]) -> dict[int, set[str]]:
    """Per bucket (``ts_ms``), the nodes with GPUs there (``gpuscope_gpu_info``) and no
    utilization summary from the recording rules: the buckets the rules' evaluations did
    not reach for them."""
    gaps: dict[int, set[str]] = {}
    for b in buckets:
        gpus: set[str] = set()
        summarized: set[str] = set()
        for name, labels in zip(b.names, b.labels, strict=True):
            if name in (_GPU_PRESENT, _RULE_PRESENT):
                node = _node(labels)
                if node is not None:
                    (gpus if name == _GPU_PRESENT else summarized).add(node)
        if missing := gpus - summarized:
            gaps[b.ts_ms] = missing
    return gaps


def fill_rule_gaps(
    buckets: Sequence[Batch], gaps: dict[int, set[str]], asked: Sequence[Batch]
) -> None:
    """Into each bucket of ``gaps``, its missing nodes' summaries from ``asked`` (the same
    buckets asked as ``*_over_time``); a series the rules did give there (a rule group
    evaluated in part) takes the asked value instead: one value a series and bucket."""
    answers = {b.ts_ms: b for b in asked}
    for b in buckets:
        missing = gaps.get(b.ts_ms)
        a = answers.get(b.ts_ms)
        if not missing or a is None:
            continue
        new = [
            row for row in zip(a.names, a.labels, a.values, strict=True)
            if _node(row[1]) in missing
        ]  # fmt: skip
        replaced = {(name, labels) for name, labels, _ in new}
        keep = [
            i for i, key in enumerate(zip(b.names, b.labels, strict=True)) if key not in replaced
        ]  # fmt: skip
        if len(keep) < len(b.names):
            b.names[:] = [b.names[i] for i in keep]
            b.labels[:] = [b.labels[i] for i in keep]
            b.values[:] = [b.values[i] for i in keep]
        for name, labels, value in new:
            b.names.append(name)
            b.labels.append(labels)
            b.values.append(value)

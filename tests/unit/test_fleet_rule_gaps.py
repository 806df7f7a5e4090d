"""Fleet mode with recording rules: which (bucket, node) pairs the rules missed, and how
the summaries asked of the raw series take their place (gpuscope/collector/querying/rule_gaps.py)."""

from __future__ import annotations

from gpuscope.collector.querying.rule_gaps import fill_rule_gaps, rule_gaps
from gpuscope.collector.scraping.batch import Batch, Labels

UTIL = "gpuscope_gpu_utilization_ratio"
MEM = "gpuscope_gpu_memory_used_bytes"
INFO = "gpuscope_gpu_info"


def gpu(node: str, uuid: str) -> Labels:
    return (("node", node), ("uuid", uuid))


def bucket(ts: int, rows: list[tuple[str, Labels, float]]) -> Batch:
    b = Batch("t", ts)
    for name, labels, value in rows:
        b.names.append(name)
        b.labels.append(labels)
        b.values.append(value)
    return b


def test_a_node_with_gpus_and_no_utilization_summary_is_a_gap() -> None:
    a, b = gpu("n1", "g1"), gpu("n2", "g2")
    buckets = [
        bucket(1000, [(INFO, a, 1), (INFO, b, 1), (UTIL, a, 0.5), (UTIL, b, 0.1)]),
        bucket(2000, [(INFO, a, 1), (INFO, b, 1), (UTIL, a, 0.5), (MEM, b, 7)]),
        bucket(3000, [(INFO, a, 1), (INFO, b, 1)]),
    ]
    assert rule_gaps(buckets) == {2000: {"n2"}, 3000: {"n1", "n2"}}


def test_a_node_without_gpus_or_without_a_node_label_is_no_gap() -> None:
    # an agent whose GPU source is down sends no gpu_info: nothing to summarize there
    buckets = [
        bucket(1000, [("gpuscope_agent_info", (("node", "n3"),), 1)]),
        bucket(2000, [(INFO, (("uuid", "g9"),), 1)]),
    ]
    assert rule_gaps(buckets) == {}


def test_filled_gaps_take_the_raw_summaries_of_the_missing_nodes_only() -> None:
    a, b, c = gpu("n1", "g1"), gpu("n2", "g2"), gpu("n3", "g3")
    buckets = [
        # n2's rule group evaluated in part: its memory mean came, its utilization did not
        bucket(1000, [(INFO, a, 1), (INFO, b, 1), (UTIL, a, 0.5), (MEM, b, 7)]),
        bucket(2000, [(INFO, a, 1), (INFO, c, 1), (UTIL, a, 0.4), (UTIL, c, 0.3)]),
    ]
    gaps = rule_gaps(buckets)
    assert gaps == {1000: {"n2"}}
    asked = [
        bucket(1000, [(UTIL, a, 0.9), (UTIL, b, 0.2), (MEM, b, 8)]),
        bucket(2000, [(UTIL, c, 0.8)]),  # asked for the span; bucket 2000 had no gap
    ]
    fill_rule_gaps(buckets, gaps, asked)
    first = sorted(zip(buckets[0].names, buckets[0].labels, buckets[0].values, strict=True))
    # n1 keeps its rule result; n2's partial one is replaced, once per series
    assert first == sorted(
        [(INFO, a, 1), (INFO, b, 1), (UTIL, a, 0.5), (MEM, b, 8), (UTIL, b, 0.2)]
    )
    assert buckets[1].values == [1, 1, 0.4, 0.3]  # untouched
    assert rule_gaps(buckets) == {}


def test_what_the_raw_series_do_not_answer_keeps_the_rules_value() -> None:
    a = gpu("n1", "g1")
    buckets = [bucket(1000, [(INFO, a, 1), (MEM, a, 3)])]
    gaps = rule_gaps(buckets)
    assert gaps == {1000: {"n1"}}
    fill_rule_gaps(buckets, gaps, [])  # the engine had nothing either
    assert buckets[0].values == [1, 3]

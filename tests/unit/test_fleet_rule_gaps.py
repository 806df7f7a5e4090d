"""Fleet mode with recording rules: which (bucket, node) pairs the rules missed, and how
the summaries asked of the raw series fill them (gpuscope/collector/querying/rule_gaps.py)."""

from __future__ import annotations

from gpuscope.collector.querying.fleet_questions import SUMMARIZED
from gpuscope.collector.querying.rule_gaps import fill_rule_gaps, rule_gaps
from gpuscope.collector.scraping.batch import Batch, Labels

UTIL = "gpuscope_gpu_utilization_ratio"
MEM = "gpuscope_gpu_memory_used_bytes"
INFO = "gpuscope_gpu_info"
ECC = "gpuscope_gpu_ecc_errors_total"  # asked as its value, never from the rules


def gpu(node: str, uuid: str) -> Labels:
    return (("node", node), ("uuid", uuid))


def bucket(ts: int, rows: list[tuple[str, Labels, float]]) -> Batch:
    b = Batch("t", ts)
    for name, labels, value in rows:
        b.names.append(name)
        b.labels.append(labels)
        b.values.append(value)
    return b


def rows(b: Batch) -> list[tuple[str, Labels, float]]:
    return sorted(zip(b.names, b.labels, b.values, strict=True))


def test_a_node_with_gpus_and_no_result_of_the_rules_is_a_gap() -> None:
    a, b = gpu("n1", "g1"), gpu("n2", "g2")
    buckets = [
        bucket(1000, [(INFO, a, 1), (INFO, b, 1), (UTIL, a, 0.5), (UTIL, b, 0.1)]),
        # n2 has only a value the rules do not make: not reached
        bucket(2000, [(INFO, a, 1), (INFO, b, 1), (UTIL, a, 0.5), (ECC, b, 0)]),
        bucket(3000, [(INFO, a, 1), (INFO, b, 1)]),
    ]
    assert rule_gaps(buckets, SUMMARIZED) == {2000: {"n2"}, 3000: {"n1", "n2"}}


def test_any_result_of_the_rules_means_the_node_was_reached() -> None:
    # a MIG-enabled GPU has no NVML utilization: its memory mean is what the rules give
    mig = (("mig_instance", "1g.10gb"), ("node", "n1"), ("uuid", "MIG-1"))
    buckets = [bucket(1000, [(INFO, mig, 1), (MEM, mig, 5e9)])]
    assert rule_gaps(buckets, SUMMARIZED) == {}


def test_a_node_without_gpus_or_without_a_node_label_is_no_gap() -> None:
    # an agent whose GPU source is down sends no gpu_info: nothing to summarize there
    buckets = [
        bucket(1000, [("gpuscope_agent_info", (("node", "n3"),), 1)]),
        bucket(2000, [(INFO, (("uuid", "g9"),), 1)]),
    ]
    assert rule_gaps(buckets, SUMMARIZED) == {}


def test_filled_gaps_take_the_raw_summaries_of_the_missing_nodes_only() -> None:
    a, b, c = gpu("n1", "g1"), gpu("n2", "g2"), gpu("n3", "g3")
    buckets = [
        bucket(1000, [(INFO, a, 1), (INFO, b, 1), (UTIL, a, 0.5)]),
        bucket(2000, [(INFO, a, 1), (INFO, c, 1), (UTIL, a, 0.4), (UTIL, c, 0.3)]),
    ]
    gaps = rule_gaps(buckets, SUMMARIZED)
    assert gaps == {1000: {"n2"}}
    asked = [
        bucket(1000, [(UTIL, a, 0.9), (UTIL, b, 0.2), (MEM, b, 8)]),
        bucket(2000, [(UTIL, c, 0.8)]),  # asked for the span; bucket 2000 had no gap
    ]
    assert fill_rule_gaps(buckets, gaps, asked) == 1
    # n1 keeps the rules' value; n2 gets the raw summaries, once a series
    assert rows(buckets[0]) == sorted(
        [(INFO, a, 1), (INFO, b, 1), (UTIL, a, 0.5), (UTIL, b, 0.2), (MEM, b, 8)]
    )
    assert rows(buckets[1]) == sorted([(INFO, a, 1), (INFO, c, 1), (UTIL, a, 0.4), (UTIL, c, 0.3)])
    assert rule_gaps(buckets, SUMMARIZED) == {}


def test_a_gap_the_raw_series_do_not_fill_either_is_not_counted() -> None:
    # a node whose agent sends none of the summarized metrics: asked, nothing comes, so no
    # count (and no warning) for a rule evaluator that is not behind
    a = gpu("n1", "g1")
    buckets = [bucket(1000, [(INFO, a, 1)])]
    gaps = rule_gaps(buckets, SUMMARIZED)
    assert gaps == {1000: {"n1"}}
    assert fill_rule_gaps(buckets, gaps, []) == 0
    assert fill_rule_gaps(buckets, gaps, [bucket(1000, [(UTIL, gpu("n9", "g9"), 1)])]) == 0
    assert rows(buckets[0]) == [(INFO, a, 1)]

"""Fleet summaries' questions and how their answers are stored (issue 40): the PromQL each
shard asks, and the reshaping that makes a workload's summary look like one GPU to the idle
detector (its key as ``uuid``, the GPUs it holds in ``gpu``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuscope.collector.querying.fleet import FleetSource
from gpuscope.collector.querying.fleet_summaries import (
    GAUGE_TYPES,
    HOT_LINK_FLOOR,
    HOT_PORT_FLOOR,
    SummaryQuestion,
    gpu_link_floors,
    reshape,
    summary_questions,
    workload_key,
)
from gpuscope.collector.storage.store_sql import series_kind
from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import AnalyticsSettings

SEL = 'node=~"a|b"'


def _by_name() -> dict[str | None, list[SummaryQuestion]]:
    out: dict[str | None, list[SummaryQuestion]] = {}
    for q in summary_questions(SEL):
        out.setdefault(q.name, []).append(q)
    return out


def test_every_question_is_limited_to_the_shard() -> None:
    for q in summary_questions(SEL):
        selectors = q.query.count("{")
        assert selectors > 0 and q.query.count(SEL) == selectors, q.query


def test_nothing_is_asked_per_gpu_but_problems_and_shared_gpus() -> None:
    """Every question either aggregates (by workload, node or port) or filters to a
    problem (hot port, errors, GPU down, shared GPU): no bare per-GPU selector of a busy
    signal or level."""
    for q in summary_questions(SEL):
        text = q.query
        aggregated = " by (" in text
        filtered = any(op in text for op in (" and ", " > 0", " == 0"))
        per_node = "gpuscope_agent_info" in text
        assert aggregated or filtered or per_node, text


def test_the_workload_busy_peak_joins_each_gpus_signal_to_its_holders() -> None:
    (busy,) = _by_name()["gpuscope_gpu_utilization_ratio"]
    assert busy.workload_key
    q = busy.query
    assert q.startswith("max by (node, namespace, pod, container) (")
    # SM activity where a GPU has it, else utilization: the idle detector's own signal
    assert "max_over_time(gpuscope_gpu_sm_active_ratio" in q and " or " in q
    assert "on (node, uuid) group_right ()" in q and "gpuscope_gpu_workload_info" in q


def test_hot_ports_are_filtered_at_the_floor_below_the_detectors_line() -> None:
    assert AnalyticsSettings().ib_hot_ratio > HOT_PORT_FLOOR
    (tx,) = _by_name()["gpuscope_ib_transmit_bytes_total"]
    assert tx.query.startswith(f"increase(gpuscope_ib_transmit_bytes_total{{{SEL}}}[300s]) and")
    # the floor times the bucket: an increase over 5 minutes against the line rate
    # (one line rate a port: min by, so a port with two rate series does not fail the join)
    line = f"{HOT_PORT_FLOOR * 300:g} * min by (node, device, port) (gpuscope_ib_port_rate"
    assert line in tx.query
    # either direction, each its own selector (Prometheus refuses increase() over both)
    assert "max by (node, device, port) (increase(gpuscope_ib_receive_bytes_total" in tx.query
    assert "__name__=~" not in tx.query


def test_increases_are_stored_as_given_not_as_counters() -> None:
    for name in GAUGE_TYPES:
        assert series_kind(name, {}) == "counter"  # as the agent's counter would be
        assert series_kind(name, GAUGE_TYPES) == "gauge"  # a summary is its increase


def test_reshape_keys_a_workload_and_moves_its_gpu_count_into_gpu() -> None:
    (info,) = _by_name()["gpuscope_gpu_workload_info"]
    answer: list[dict[str, object]] = [{
        "metric": {"node": "n1", "namespace": "ml", "pod": "p", "container": "c"},
        "values": [[100, "8"], [400, "8"], [700, "4"]],
    }]  # fmt: skip
    got = reshape(info, answer)
    assert [(s["metric"]["gpu"], s["values"]) for s in got] == [  # type: ignore[index]
        ("8", [[100, "1"], [400, "1"]]),
        ("4", [[700, "1"]]),
    ]
    for s in got:
        m = s["metric"]
        assert isinstance(m, dict)
        assert m["uuid"] == workload_key("ml", "p", "c") == "workload:ml/p/c"
        assert m["__name__"] == "gpuscope_gpu_workload_info"


def test_reshape_keeps_values_and_own_names_where_asked() -> None:
    q = SummaryQuestion("x", None)
    answer: list[dict[str, object]] = [
        {"metric": {"__name__": "gpuscope_agent_info", "node": "n"}, "values": [[1, "1"]]}
    ]
    assert reshape(q, answer) == answer
    assert reshape(q, [{"metric": "bad"}]) == []


class RecordingClient:
    """An engine that answers every question with an empty matrix and keeps the PromQL
    it was asked."""

    shown_url = "http://engine"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def query(self, path: str, params: dict[str, str], **_: object) -> dict[str, object]:
        self.asked.append(params["query"])
        return {"resultType": "matrix", "result": []}


def test_fleet_source_asks_the_summaries_when_set() -> None:
    client = RecordingClient()
    asked = client.asked

    src = FleetSource(client, shards=1, summaries=True)  # type: ignore[arg-type]
    assert src._ask(["a", "b"], 0.0, 300.0, "t") == []
    assert asked == [q.query for q in summary_questions(SEL)]


def test_a_shards_node_regex_matches_exactly_its_nodes() -> None:
    import re

    from gpuscope.collector.querying.fleet_questions import node_regex

    cases = [
        ["gpu-node-10", "gpu-node-02", "gpu-node-100"],
        ["gpu-1", "gpu-10"],  # one name is the common prefix itself
        ["a.b", "c"],
        ["ip-10-0-1-2.ec2.internal"],
    ]
    others = [
        "gpu-node-1",
        "gpu-node-1000",
        "gpu-node-",
        "gpu-11",
        "axb",
        "ip-10-0-1-3.ec2.internal",
    ]
    for nodes in cases:
        pattern = re.compile(node_regex(nodes).replace("\\\\", "\\"))
        assert all(pattern.fullmatch(n) for n in nodes), nodes
        assert not any(pattern.fullmatch(n) for n in others if n not in nodes), nodes


def test_every_question_fits_victoriametrics_query_length_at_100k_gpus() -> None:
    """12,500 nodes in 40 shards (the default): each question under 16 KB
    (``-search.maxQueryLen``), with room to spare: the selector written six times at most
    (the GPUs a node holds, change-only: itself and the bucket before, 0 where none)."""
    from gpuscope.collector.querying.fleet_questions import node_regex

    nodes = [f"gpu-node-{i:05d}" for i in range(0, 12_500, 40)]  # one shard's 313 nodes
    sel = f'node=~"{node_regex(nodes)}"'
    questions = summary_questions(sel)
    assert {NVLINK, PCIE} <= {q.name for q in questions}  # GPU links too
    for q in questions:
        assert len(q.query) < 13_000 and q.query.count(sel) <= 6, q.query[:200]


def test_node_summaries_are_asked_only_where_they_differ_from_the_bucket_before() -> None:
    """Each ``gpuscope:node_*`` question, change-only, is its every-bucket question less
    the nodes where it equals the same question a bucket earlier (every selector of that
    one offset by 300 s): a node new or changed is stored, an unchanged one is not, but
    in the hour's last bucket, where every node is."""
    every = {q.name: q.query for q in summary_questions(SEL, changes_only=False)}
    changed = {q.name: q.query for q in summary_questions(SEL, changes_only=True)}
    nodes = [n for n in every if n and n.startswith("gpuscope:node_")]
    assert len(nodes) == 5
    for name in nodes:
        q = every[name]
        before = q.replace(f"{{{SEL}}}[300s]", f"{{{SEL}}}[300s] offset 300s")
        before = re.sub(rf"\{{{re.escape(SEL)}\}}(?!\[)", f"{{{SEL}}} offset 300s", before)
        assert before.count(" offset 300s") == q.count(SEL)
        assert changed[name] == (
            f"({q}) unless on (node) ((({q}) == on (node) ({before}))"
            # but every node in each hour's last bucket (evaluated at second 3599)
            " unless on () (vector(time() % 3600) >= 3300))"
        )


def test_only_node_summaries_change_with_changes_only() -> None:
    """The workloads', ports' and problems' questions, and node liveness, are the same
    either way: the detectors and alert rules read them in every bucket."""
    every = summary_questions(SEL, changes_only=False)
    changed = summary_questions(SEL, changes_only=True)
    assert [q.name for q in every] == [q.name for q in changed]
    for a, b in zip(every, changed, strict=True):
        if not (a.name or "").startswith("gpuscope:node_"):
            assert a == b


def test_fleet_source_passes_changes_only_on() -> None:
    client = RecordingClient()
    asked = client.asked

    for changes_only in (False, True):
        asked.clear()
        src = FleetSource(client, shards=1, summaries=True, changes_only=changes_only)  # type: ignore[arg-type]
        src._ask(["a", "b"], 0.0, 300.0, "t")
        assert asked == [q.query for q in summary_questions(SEL, changes_only=changes_only)]


NVLINK, PCIE = "gpuscope_gpu_nvlink_bytes_total", "gpuscope_gpu_pcie_bytes_total"


def test_gpu_links_are_asked_over_a_floor_from_the_settings() -> None:
    """Both directions' increase of the GPUs whose link, either direction, carried more
    than HOT_LINK_FLOOR of the smallest configured capacity in the bucket (bytes in 300 s),
    each carrying its GPU's model (the detector takes the real capacity from it) from
    gpuscope_gpu_info, joined onto the hot ones; no gpuscope_gpu_info question."""
    a = AnalyticsSettings(
        nvlink_bytes_per_second={"H100": 450e9, "A100": 300e9},
        pcie_bytes_per_second={"H100": 64e9, "L4": 16e9},
    )
    floors = gpu_link_floors(a)
    assert floors == {NVLINK: HOT_LINK_FLOOR * 300e9, PCIE: HOT_LINK_FLOOR * 16e9}
    by_name = {q.name: q for q in summary_questions(SEL, link_floors=floors)}
    nv_hot = f"(increase({NVLINK}{{{SEL}}}[300s]) > {HOT_LINK_FLOOR * 300e9 * 300:.0f})"
    pcie_hot = f"(increase({PCIE}{{{SEL}}}[300s]) > {HOT_LINK_FLOOR * 16e9 * 300:.0f})"
    model = (
        f"* on (node, uuid) group_left (model) topk by (node, uuid) (1, group by "
        f'(node, uuid, model) (gpuscope_gpu_info{{{SEL},mig_instance=""}}))'
    )
    assert by_name[NVLINK].query == (
        f"(increase({NVLINK}{{{SEL}}}[300s]) and on (node, uuid) {nv_hot}) {model}"
    )
    assert by_name[PCIE].query == (
        f"(increase({PCIE}{{{SEL}}}[300s]) and on (node, uuid) {pcie_hot}) {model}"
    )
    assert "gpuscope_gpu_info" not in by_name  # the model rides on the link rows
    for name in (NVLINK, PCIE):
        q = by_name[name]
        assert not q.workload_key and not q.count_in_gpu
        assert q.query.count(SEL) == q.query.count("{") > 0
    assert GAUGE_TYPES[NVLINK] == GAUGE_TYPES[PCIE] == "gauge"  # stored as increases


def test_the_default_floors_are_half_the_smallest_default_capacity() -> None:
    a = AnalyticsSettings()
    assert a.gpu_link_hot_ratio > HOT_LINK_FLOOR
    assert gpu_link_floors(a) == {
        NVLINK: HOT_LINK_FLOOR * min(a.nvlink_bytes_per_second.values()),
        PCIE: HOT_LINK_FLOOR * min(a.pcie_bytes_per_second.values()),
    }
    assert summary_questions(SEL) == summary_questions(SEL, link_floors=gpu_link_floors(a))


def test_a_metric_without_capacities_is_not_asked() -> None:
    floors = gpu_link_floors(AnalyticsSettings(pcie_bytes_per_second={}))
    assert list(floors) == [NVLINK]
    names = [q.name for q in summary_questions(SEL, link_floors=floors)]
    assert NVLINK in names and PCIE not in names and "gpuscope_gpu_info" not in names
    assert not {NVLINK, PCIE} & {q.name for q in summary_questions(SEL, link_floors={})}


def test_a_hot_ratio_under_the_floor_is_refused() -> None:
    with pytest.raises(ConfigError, match="gpu_link_hot_ratio"):
        gpu_link_floors(AnalyticsSettings(gpu_link_hot_ratio=HOT_LINK_FLOOR - 0.1))
    # the ports' line likewise: under HOT_PORT_FLOOR, hot ports would go unstored silently
    with pytest.raises(ConfigError, match="ib_hot_ratio"):
        gpu_link_floors(AnalyticsSettings(ib_hot_ratio=HOT_PORT_FLOOR - 0.1))
    assert gpu_link_floors(AnalyticsSettings(ib_hot_ratio=HOT_PORT_FLOOR))  # at it: kept


def test_query_ingest_passes_the_settings_floors_to_the_fleet(tmp_path: Path) -> None:
    from gpuscope.collector.querying.query_ingest import QueryIngest
    from gpuscope.collector.storage.store import Store
    from gpuscope.core.query_settings import QuerySettings

    a = AnalyticsSettings(nvlink_bytes_per_second={"B200": 900e9})
    q = QuerySettings(mode="fleet", summaries=True, shards=1)
    with Store.open(tmp_path / "q.duckdb") as store:
        ingest = QueryIngest(
            "http://vm:8428", q, 15.0, store, store.append_scrape,
            client=RecordingClient(), analytics=a,  # type: ignore[arg-type]
        )  # fmt: skip
        assert ingest.fleet.link_floors == gpu_link_floors(a)
        client = RecordingClient()
        ingest.fleet.client = client  # type: ignore[assignment]
        ingest.fleet._ask(["a", "b"], 0.0, 300.0, "t")
    assert f"> {HOT_LINK_FLOOR * 900e9 * 300:.0f})" in "\n".join(client.asked)

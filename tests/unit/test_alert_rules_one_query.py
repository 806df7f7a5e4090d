"""The alerts engine reads every metric rule's windows in one query (``metric_windows``):
the same windows each rule's own query reads, and each rule alone again when the query
for all of them fails."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gpuscope.alerts import engine as engine_module
from gpuscope.alerts.conditions import (
    DataView,
    equality_filter,
    evaluate_metric,
    metric_windows,
    series_windows,
)
from gpuscope.alerts.config import AlertsConfig, MetricRule
from gpuscope.alerts.engine import AlertsEngine
from gpuscope.alerts.rules import SeriesWindow, grouped_candidates, selected
from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.storage.store import Store

T0 = datetime(2025, 3, 3, 10, 0, 0)
STEP = 5
END = 900  # 15 minutes
UP, ECC, INFO = "gpuscope_gpu_up", "gpuscope_gpu_ecc_errors_total", "gpuscope_agent_info"
TYPES = {UP: "gauge", ECC[:-6]: "counter", INFO: "gauge"}


def ms(t: float) -> int:
    return int((T0 + timedelta(seconds=t)).replace(tzinfo=UTC).timestamp() * 1000)


def gpu(node: str, i: int) -> tuple[tuple[str, str], ...]:
    return (("gpu", str(i)), ("node", node), ("uuid", f"GPU-{node}-{i}"))


def batch(node: str, t: int) -> Batch:
    """Two GPUs of ``node``: the first falls off the bus at 600 s, the second's uncorrected
    ECC counter rises every minute and its corrected one every 30 s; the agent's info
    series."""
    labels = [gpu(node, 0), gpu(node, 1), gpu(node, 1), gpu(node, 1), (("node", node),)]
    labels[2] = tuple(sorted([*labels[2], ("type", "uncorrected")]))
    labels[3] = tuple(sorted([*labels[3], ("type", "corrected")]))
    values = [0.0 if t >= 600 else 1.0, 1.0, float(t // 60), float(t // 30), 1.0]
    return Batch(node, ms(t), [UP, UP, ECC, ECC, INFO], labels, values, TYPES)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """Two nodes every STEP s to END; the second stops at 700 s (its series go stale).
    Written in one transaction (the store's bulk path, held equal to a cycle at a time by
    tests/unit/test_store_bulk.py): 181 transactions were most of this module's CPU."""
    with Store.open(tmp_path / "a.duckdb") as s:
        s.append_cycles([
            [(batch("n1", t), 0.01)] + ([(batch("n2", t), 0.01)] if t <= 700 else [])
            for t in range(0, END + 1, STEP)
        ])  # fmt: skip
        yield s


RULES = [
    MetricRule(
        name="lost", metric=UP, aggregate="max", window=300, op="<", threshold=1, by=["node", "gpu"]
    ),
    MetricRule(
        name="lost_long",
        metric=UP,
        aggregate="min",
        window=1200,
        op="<",
        threshold=1,
        by=["node", "gpu"],
    ),
    MetricRule(name="ecc", metric=ECC, aggregate="increase", window=3600, op=">", threshold=0),
    MetricRule(
        name="down", metric=INFO, aggregate="stale", window=120, op=">", threshold=0, by=["node"]
    ),
    MetricRule(name="none", metric="gpuscope_no_such_metric", aggregate="max", window=60),
]
#: Rules whose first ``label="value"`` matcher the one query applies to the series it reads:
#: a label of the series' map, one of its columns, one no series has; and rules it must not
#: filter by (a matcher of "", which a missing label matches; a regex); a stale rule.
MATCHING = [
    MetricRule(name="ecc_uncorrected", metric=ECC, matchers=['type="uncorrected"'],
               aggregate="increase", window=3600, op=">", threshold=0, by=["node", "gpu"]),
    MetricRule(name="lost_on_n1", metric=UP, matchers=['gpu!="1"', 'node="n1"'],
               aggregate="max", window=300, op="<", threshold=1, by=["node", "gpu"]),
    MetricRule(name="ecc_in_zone", metric=ECC, matchers=['zone="a"'], aggregate="increase",
               window=3600, op=">", threshold=0),
    MetricRule(name="ecc_untyped", metric=ECC, matchers=['type=""'], aggregate="increase",
               window=3600, op=">=", threshold=0),
    MetricRule(name="ecc_regex", metric=ECC, matchers=['type=~"unc.*"'], aggregate="increase",
               window=3600, op=">", threshold=0),
    MetricRule(name="down_n1", metric=INFO, matchers=['node="n1"'], aggregate="stale",
               window=120, op=">", threshold=0, by=["node"]),
]  # fmt: skip


def at(t: float) -> datetime:
    return (T0 + timedelta(seconds=t)).replace(tzinfo=UTC)


def ordered(windows: list[SeriesWindow]) -> list[SeriesWindow]:
    return sorted(windows, key=lambda w: sorted(w.labels.items()))


@pytest.mark.parametrize("t", [END, END - 250, END + 200])
@pytest.mark.parametrize("view", [DataView(), DataView(T0 + timedelta(seconds=END - 30), 60.0)])
def test_one_query_reads_what_each_rule_reads_alone(store: Store, t: int, view: DataView) -> None:
    cur = store.cursor()
    alone = [ordered(series_windows(cur, rule, at(t), view)) for rule in RULES]
    together = [ordered(w) for w in metric_windows(cur, RULES, at(t), view)]
    assert together == alone
    # not vacuous: the windows differ by rule, and a metric no series has reads nothing
    assert [len(w) for w in alone[:4]] == [4, 4, 4, 2]
    assert alone[0] != alone[1] and alone[-1] == []
    assert metric_windows(cur, [], at(t), view) == []


@pytest.mark.parametrize("t", [END, END - 250])
def test_one_query_reads_only_the_series_a_rules_equality_matcher_selects(
    store: Store, t: int
) -> None:
    """Each rule's windows are those its own query reads less the series whose label fails
    the rule's first ``label="value"`` matcher (a missing label is ""), and what each rule
    finds is the same from both."""
    cur = store.cursor()
    alone = [ordered(series_windows(cur, rule, at(t))) for rule in MATCHING]
    together = [ordered(w) for w in metric_windows(cur, MATCHING, at(t))]
    filters = [equality_filter(rule) for rule in MATCHING]
    assert filters == [("type", "uncorrected"), ("node", "n1"), ("zone", "a"), None, None,
                       ("node", "n1")]  # fmt: skip
    for rule, one, all_, eq in zip(MATCHING, alone, together, filters, strict=True):
        kept = [w for w in one if eq is None or w.labels.get(eq[0], "") == eq[1]]
        assert all_ == kept, rule.name
        assert grouped_candidates(rule, selected(rule, all_)) == grouped_candidates(
            rule, selected(rule, one)
        ), rule.name
    # not vacuous: the filtered rules read fewer series (none at all for a missing label),
    # and still find what they find alone
    assert [len(w) for w in alone[:3]] == [4, 4, 4] and [len(w) for w in together[:3]] == [2, 2, 0]
    assert [len(w) for w in together[3:]] == [4, 4, 1]
    assert grouped_candidates(
        MATCHING[0], selected(MATCHING[0], together[0])
    )  # n1's and n2's uncorrected errors


def test_a_stale_rule_judges_only_the_series_its_matchers_select(tmp_path: Path) -> None:
    """A node's DCGM source stops reporting while its NVML source goes on: a stale rule over
    the DCGM series (``source="dcgm"``, by node) fires for that node. A fresh series the
    rule's matchers leave out kept its group fresh before (no alert); read in one query for
    every rule or alone, the same."""
    src = "gpuscope_agent_source_up"
    with Store.open(tmp_path / "s.duckdb") as s:
        cycles = []
        for t in range(0, END + 1, STEP):
            sources = ["nvml", "dcgm"] if t <= 600 else ["nvml"]
            labels = [(("node", "n1"), ("source", x)) for x in sources]
            cycles.append([(Batch("n1", ms(t), [src] * len(labels), labels,
                                  [1.0] * len(labels), {src: "gauge"}), 0.01)])  # fmt: skip
        s.append_cycles(cycles)
        rule = MetricRule(name="dcgm_gone", metric=src, matchers=['source="dcgm"'],
                          aggregate="stale", window=120, op=">", threshold=0, by=["node"])  # fmt: skip
        cur = s.cursor()
        alone = evaluate_metric(cur, rule, at(END))
        (windows,) = metric_windows(cur, [rule], at(END))
        assert [(c.labels["node"], round(c.value or 0)) for c in alone] == [("n1", END - 600)]
        assert evaluate_metric(cur, rule, at(END), windows=windows) == alone
        # and while both report, nothing
        assert evaluate_metric(cur, rule, at(500)) == []


def _candidates(engine: AlertsEngine) -> list[tuple[str, list[tuple[str, str]], float | None]]:
    found, failed = engine.evaluate(at(END))
    assert failed == set()
    return sorted((c.rule, sorted(c.labels.items()), c.value) for c in found)


def test_the_engine_reads_them_once_and_each_alone_when_that_fails(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = AlertsConfig.model_validate({"default_rules": False})
    engine = AlertsEngine(store, config.model_copy(update={"rules": RULES}), notifiers={},
                          registry=CollectorRegistry())  # fmt: skip
    calls: list[int] = []

    def alone(*args: object) -> list[SeriesWindow]:
        calls.append(1)
        return series_windows(*args)  # type: ignore[arg-type]

    monkeypatch.setattr("gpuscope.alerts.conditions.series_windows", alone)
    together = _candidates(engine)
    assert calls == []  # one query for every rule, none of its own
    assert {rule for rule, _, _ in together} == {"lost", "lost_long", "ecc", "down"}

    def fails(*args: object) -> list[list[SeriesWindow]]:
        raise RuntimeError("boom")

    monkeypatch.setattr(engine_module, "metric_windows", fails)
    assert _candidates(engine) == together
    assert len(calls) == len(RULES)


def test_a_rules_matchers_select_its_series_for_every_aggregate(store: Store) -> None:
    """A regex matcher, which the query does not apply, still leaves the corrected ECC
    counters out of an increase rule's groups: it finds what the equality rule (filtered in
    the query) finds, and less than the same rule without matchers."""
    cur = store.cursor()
    by = {"by": ["node", "gpu"]}
    regex = MATCHING[4].model_copy(update=by)
    unmatched = regex.model_copy(update={"matchers": []})

    def found(rule: MetricRule) -> list[tuple[str, str, float | None]]:
        return [(c.labels["node"], c.labels["gpu"], c.value)
                for c in evaluate_metric(cur, rule, at(END))]  # fmt: skip

    assert found(regex) == found(MATCHING[0]) != []
    assert all(
        a[:2] == b[:2] and (b[2] or 0) > (a[2] or 0)
        for a, b in zip(found(regex), found(unmatched), strict=True)
    )

"""The agent's page writer: the bytes prometheus_client writes for the same families, in
both formats, on hostile label values and special floats; and the agent's whole page."""

import math
import random
from collections.abc import Iterator, Sequence

import pytest
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics import exposition as om
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from gpuscope.agent.devices.sim import SimAttributor, SimGpuSource, SimIbSource
from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.agent.serving.page import FamilySpec, PageWriter, Samples, go_float, negotiate
from gpuscope.agent.serving.process_metrics import PROCESS_FAMILIES, ProcessMetrics
from gpuscope.sim import SimulatedCluster, default_scenario

SPECIAL = [
    0.0, -0.0, 1.0, -1.0, 0.5, 1e-12, -1.5e-12, 999_999.0, 1e6, 1_234_567.0, -1_234_567.0,
    1e15, 123456789012345678.0, 1e16, 1.5e16, 1e22, 2.0**64, 5e-324, 1.7976931348623157e308,
    float("inf"), float("-inf"), float("nan"), 345703680.213,
]  # fmt: skip
HOSTILE = ['say "hi"', "back\\slash", "line\nbreak", "", "ünïcödé ✓ 日本", '\\"\n', "a,b=c}{"]
SPECS = (
    FamilySpec("t_ratio", "gauge", 'help with \\ and\nnewline "quoted" ✓', ("zeta", "alpha")),
    FamilySpec("t_bytes", "counter", "a counter", ("dev",)),
    FamilySpec("t_empty", "gauge", "never has samples", ("x",)),
    FamilySpec("t_nolabels", "gauge", "no labels", ()),
)


def test_floats_are_formatted_as_prometheus_client_formats_them() -> None:
    """Go-style floats: +Inf/-Inf/NaN, 1.0 for integers, exponents from 1e6 on."""
    rng = random.Random(7)
    values = SPECIAL + [rng.uniform(-1, 1) * 10 ** rng.randint(-20, 25) for _ in range(5000)]
    values += [float(rng.randint(0, 2**63)) for _ in range(2000)]
    for v in values:
        assert go_float(v) == floatToGoString(v), v  # type: ignore[no-untyped-call]


def _samples(labels_of: Sequence[Sequence[str]], values: list[float]) -> dict[str, Samples]:
    return {
        "t_ratio": [(lbl, v) for lbl, v in zip(labels_of, values, strict=False)],
        "t_bytes": [((lbl[0],), abs(v) if not math.isnan(v) else 0.0) for lbl, v in
                    zip(labels_of, values, strict=False)],
        "t_nolabels": [((), values[0])],
    }  # fmt: skip


class _Reference:
    """The same samples as prometheus_client families, for its encoders."""

    def __init__(self, samples: dict[str, Samples]) -> None:
        self.samples = samples

    def collect(self) -> Iterator[Metric]:
        for spec in SPECS:
            got = self.samples.get(spec.name)
            if not got:
                continue
            kind = CounterMetricFamily if spec.type == "counter" else GaugeMetricFamily
            fam = kind(spec.name, spec.help, labels=spec.labels)
            for labels, value in got:
                fam.add_metric(list(labels), value)
            yield fam


def _reference(samples: dict[str, Samples]) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Reference(samples))
    return reg


def test_hostile_labels_and_special_floats_byte_for_byte() -> None:
    """Quotes, backslashes, newlines and unicode in label values and help, NaN/Inf and big
    values: the same bytes as generate_latest, text and OpenMetrics; twice (cached)."""
    labels = [(a, b) for a in HOSTILE for b in HOSTILE[:3]]
    values = (SPECIAL * 3)[: len(labels)]
    samples = _samples(labels, values)
    writer = PageWriter(SPECS)
    for _ in range(2):  # the second time from the cached prefixes
        assert writer.render(samples) == generate_latest(_reference(samples))
        theirs = om.generate_latest(_reference(samples))  # type: ignore[no-untyped-call]
        assert writer.render(samples, openmetrics=True) == theirs


def test_changed_label_values_are_written_and_the_cache_follows_the_page() -> None:
    """A series whose label value changes is written with the new value; series no longer
    on the page leave the cache, so it never grows beyond one page."""
    writer = PageWriter(SPECS)
    first = _samples([("a", "1"), ("b", "2")], [1.0, 2.0])
    writer.render(first)
    second = _samples([("a", "changed"), ("c", 'new "one"')], [3.0, 4.0])
    assert writer.render(second) == generate_latest(_reference(second))
    assert writer.cached_series == 5  # 2 t_ratio + 2 t_bytes + 1 t_nolabels
    assert b'alpha="1"' not in writer.render(second)


def test_a_page_parses_back_to_what_was_given() -> None:
    """prometheus_client's parser reads the page back: families, label values and values."""
    labels = [(a, "x") for a in HOSTILE]
    values = [float(i) + 0.25 for i in range(len(labels))]
    page = PageWriter(SPECS).render(_samples(labels, values)).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(page)}
    assert set(parsed) == {"t_ratio", "t_bytes", "t_nolabels"}
    assert parsed["t_ratio"].documentation == SPECS[0].help
    got = {(s.labels["zeta"], s.value) for s in parsed["t_ratio"].samples}
    assert got == set(zip([lbl[0] for lbl in labels], values, strict=True))
    assert {s.name for s in parsed["t_bytes"].samples} == {"t_bytes_total"}


@pytest.mark.parametrize(
    "accept",
    [
        "",
        "*/*",
        "text/plain;version=0.0.4",
        "text/plain;version=1.0.0;escaping=allow-utf-8",
        "text/plain;version=1.0.0;escaping=bogus",
        "application/openmetrics-text",
        "application/openmetrics-text; version=1.0.0",
        "application/openmetrics-text;version=0.0.1,text/plain;version=0.0.4",
        # Prometheus 2.x and 3.x defaults
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
        "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
        "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
        "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
        # gpuscope's own collector
        "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;version=1.0.0;q=0.5",
    ],
)
def test_format_is_negotiated_as_prometheus_client_negotiates(accept: str) -> None:
    """Same format and Content-Type as choose_encoder for the headers scrapers send."""
    openmetrics, content_type = negotiate(accept)
    encoder, theirs = choose_encoder(accept)
    target = getattr(encoder, "func", encoder)
    assert openmetrics == (target is om.generate_latest)
    assert content_type == theirs


def _agent() -> AgentCollector:
    cluster = SimulatedCluster(default_scenario())
    now = lambda: 3600.0  # noqa: E731 - a frozen clock: every read gives the same readings
    node = "gpu-node-30"
    return AgentCollector(
        node,
        SimGpuSource(cluster, node, now),
        SimIbSource(cluster, node, now),
        SimAttributor(cluster, node, now),
    )


def _steady(lines: list[str]) -> list[str]:
    """Without the values that change between two scrapes by nature."""
    return [
        x.rsplit(" ", 1)[0] if x.startswith(("process_", "gpuscope_agent_collect_seconds")) else x
        for x in lines
    ]


@pytest.mark.parametrize("openmetrics", [False, True])
def test_the_agents_page_is_what_prometheus_client_wrote(openmetrics: bool) -> None:
    """The whole simulated agent with its process series: the page prometheus_client wrote
    from the same collector and its ProcessCollector, line for line (values that move
    between two scrapes compared by name and labels)."""
    collector = _agent()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    ProcessCollector(registry=reg)
    encode = om.generate_latest if openmetrics else generate_latest
    try:
        ours = collector.render(openmetrics=openmetrics, process=ProcessMetrics()).decode()
        theirs = encode(reg).decode()
    finally:
        collector.close()
    assert _steady(ours.splitlines()) == _steady(theirs.splitlines())
    assert len(ours.splitlines()) > 300
    assert "# HELP process_resident_memory_bytes" in ours


def test_process_series_are_the_process_collectors() -> None:
    """Same families and near-equal values as prometheus_client's ProcessCollector."""
    ours = ProcessMetrics().read()
    assert [f.name for f in PROCESS_FAMILIES] == list(ours)
    theirs = {m.name: m for m in ProcessCollector(registry=None).collect()}
    for spec in PROCESS_FAMILIES:
        assert theirs[spec.name].documentation == spec.help
        assert theirs[spec.name].type == spec.type
    assert ours["process_max_fds"][0][1] == theirs["process_max_fds"].samples[0].value
    assert ours["process_start_time_seconds"][0][1] == pytest.approx(
        theirs["process_start_time_seconds"].samples[0].value
    )
    # the fd directory's size does not count a listing's own descriptor
    open_fds = theirs["process_open_fds"].samples[0].value
    assert open_fds - 1 <= ours["process_open_fds"][0][1] <= open_fds
    rss = theirs["process_resident_memory_bytes"].samples[0].value
    assert ours["process_resident_memory_bytes"][0][1] == pytest.approx(rss, rel=0.2)

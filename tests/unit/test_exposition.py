"""Exposition: fresh families from the catalogue; one bad source never hides the others."""

import threading
from collections.abc import Sequence

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.records import GpuProcess, GpuReading, GpuWorkload, IbPortReading, WorkloadKind

FULL = GpuReading(
    index=0,
    uuid="GPU-a",
    model="NVIDIA H100 80GB HBM3",
    driver_version="550.90.07",
    pci_bus_id="00000000:18:00.0",
    mig_mode="disabled",
    utilization_ratio=0.5,
    memory_utilization_ratio=0.2,
    memory_used_bytes=10,
    memory_total_bytes=100,
    power_watts=300.0,
    temperature_celsius=60.0,
    energy_joules_total=1e6,
    sm_clock_hz=1.9e9,
    memory_clock_hz=2.6e9,
    sm_active_ratio=0.4,
    tensor_active_ratio=0.3,
    dram_active_ratio=0.2,
    ecc_corrected_total=1,
    ecc_uncorrected_total=0,
    nvlink_tx_bytes_total=5.0,
    nvlink_rx_bytes_total=6.0,
    pcie_tx_bytes_total=7.0,
    pcie_rx_bytes_total=8.0,
    processes=(GpuProcess(1, 10, 0.5),),
)
SPARSE = GpuReading(index=1, uuid="GPU-b", model="Tesla T4", utilization_ratio=0.0)
LOST = GpuReading(index=2, uuid="GPU-c", model="Tesla T4", up=False, error="GPU is lost")
PORT = IbPortReading(
    device="mlx5_0",
    port="1",
    link_layer="InfiniBand",
    state="ACTIVE",
    phys_state="LinkUp",
    up=True,
    rate_bytes_per_second=5e10,
    transmit_bytes_total=4.0,
    receive_bytes_total=8.0,
    transmit_packets_total=1.0,
    receive_packets_total=2.0,
    transmit_wait_total=3.0,
    errors=(("symbol_error", 2),),
    hw_counters=(("out_of_buffer", 9),),
)
WORK = GpuWorkload(
    "GPU-a", "research", "nb-0", "notebook", WorkloadKind.INTERACTIVE, "research", 10, 0.5
)


class Gpus:
    name = "fake"

    def __init__(
        self, readings: Sequence[GpuReading], delay: threading.Event | None = None
    ) -> None:
        self.readings = readings
        self.block = delay

    def read(self) -> Sequence[GpuReading]:
        if self.block is not None:
            self.block.wait(5)
        return self.readings

    def close(self) -> None:
        return None


class Ports:
    name = "infiniband"

    def read(self) -> Sequence[IbPortReading]:
        return [PORT]


class Attr:
    name = "attribution"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def attribute(self, gpus: Sequence[GpuReading]) -> Sequence[GpuWorkload]:
        if self.fail:
            raise RuntimeError("kubelet went away")
        return [WORK]


def scrape(collector: AgentCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The page the agent serves, parsed by prometheus_client's parser."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(collector.render().decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_every_catalogue_metric_appears_when_sources_give_it() -> None:
    """With full readings, every catalogued family is in the exposition."""
    got = scrape(AgentCollector("n1", Gpus([FULL]), Ports(), Attr()))
    missing = {m.sample_name for m in AGENT_METRICS} - set(got)
    # nothing was skipped (tested below), every file read
    assert missing == {"gpuscope_agent_errors_total", "gpuscope_ib_port_unreadable_files"}


def test_unavailable_fields_are_absent_not_zero() -> None:
    """A GPU without power or profiling fields has no such series (not a 0)."""
    got = scrape(AgentCollector("n1", Gpus([SPARSE]), None, None))
    assert ({"node": "n1", "gpu": "1", "uuid": "GPU-b", "mig_instance": ""}, 0.0) in got[
        "gpuscope_gpu_utilization_ratio"
    ]
    for name in (
        "gpuscope_gpu_power_watts",
        "gpuscope_gpu_sm_active_ratio",
        "gpuscope_gpu_ecc_errors_total",
    ):
        assert name not in got


def test_lost_gpu_is_visible_without_values() -> None:
    """A GPU that fell off the bus stays visible as up=0, beside the healthy one."""
    got = scrape(AgentCollector("n1", Gpus([FULL, LOST]), None, None))
    up = {lbl["uuid"]: v for lbl, v in got["gpuscope_gpu_up"]}
    assert up == {"GPU-a": 1.0, "GPU-c": 0.0}
    assert {lbl["uuid"] for lbl, _ in got["gpuscope_gpu_utilization_ratio"]} == {"GPU-a"}


def test_values_and_labels_are_exported_as_read() -> None:
    """Spot checks: units pass through, labelled counters get their label, workload labels."""
    got = scrape(AgentCollector("n1", Gpus([FULL]), Ports(), Attr()))
    assert got["gpuscope_gpu_power_watts"][0][1] == 300.0
    ecc = {lbl["type"]: v for lbl, v in got["gpuscope_gpu_ecc_errors_total"]}
    assert ecc == {"corrected": 1.0, "uncorrected": 0.0}
    info = got["gpuscope_gpu_workload_info"][0][0]
    assert info["interactive"] == "true" and info["workload_kind"] == "interactive"
    assert info["gpu"] == "0" and info["project"] == "research"
    assert got["gpuscope_ib_errors_total"] == [
        ({"node": "n1", "device": "mlx5_0", "port": "1", "type": "symbol_error"}, 2.0)
    ]


def test_failing_attribution_never_fails_the_scrape() -> None:
    """Attribution raising: GPU series still out, attribution reported down."""
    got = scrape(AgentCollector("n1", Gpus([FULL]), Ports(), Attr(fail=True)))
    assert "gpuscope_gpu_utilization_ratio" in got
    assert "gpuscope_gpu_workload_info" not in got
    up = {lbl["source"]: v for lbl, v in got["gpuscope_agent_source_up"]}
    assert up == {"fake": 1.0, "attribution": 0.0, "infiniband": 1.0}


def test_slow_source_times_out_and_others_are_exported() -> None:
    """A hung GPU source costs at most its timeout; IB is still exported; no pile-up."""
    gate = threading.Event()
    collector = AgentCollector("n1", Gpus([FULL], gate), Ports(), None, timeout_seconds=0.2)
    try:
        got = scrape(collector)
        up = {lbl["source"]: v for lbl, v in got["gpuscope_agent_source_up"]}
        assert up == {"fake": 0.0, "infiniband": 1.0}
        assert "gpuscope_ib_transmit_bytes_total" in got
        # the hung read is still running: the next scrape does not start a second one
        again = scrape(collector)
        assert {lbl["source"]: v for lbl, v in again["gpuscope_agent_source_up"]}["fake"] == 0.0
        assert collector.last_results[0].error == "previous read still running"
    finally:
        gate.set()
        collector.close()


def test_source_raising_is_reported_down() -> None:
    """A GPU source that raises gives source_up 0 and no GPU series."""

    class Broken(Gpus):
        def read(self) -> Sequence[GpuReading]:
            raise OSError("NVML: driver not loaded")

    got = scrape(AgentCollector("n1", Broken([]), Ports(), None))
    assert {lbl["source"]: v for lbl, v in got["gpuscope_agent_source_up"]}["fake"] == 0.0
    assert "gpuscope_gpu_info" not in got


@pytest.mark.parametrize("spec", AGENT_METRICS, ids=lambda m: m.name)
def test_catalogue_follows_prometheus_conventions(spec: object) -> None:
    """Names carry base-unit suffixes; counters are not named _total twice; GPU series have node/gpu/uuid."""
    from gpuscope.core.catalogue import MetricSpec

    assert isinstance(spec, MetricSpec)
    assert spec.name.startswith("gpuscope_")
    assert not spec.name.endswith("_total")
    assert "node" in spec.labels
    if spec.name.startswith("gpuscope_gpu_"):
        assert {"gpu", "uuid"} <= set(spec.labels)
    if spec.name.startswith("gpuscope_ib_"):
        assert {"device", "port"} <= set(spec.labels)
    units = (
        "_ratio",
        "_bytes",
        "_seconds",
        "_watts",
        "_celsius",
        "_joules",
        "_hertz",
        "_info",
        "_up",
        "_second",
        "_saturated",
        "_files",  # a count of files (gpuscope_ib_port_unreadable_files)
    )
    if spec.type == "gauge":
        assert spec.name.endswith(units), spec.name


def test_design_required_metrics_are_catalogued() -> None:
    """Every metric docs/design.md's catalogue requires exists under that exact name."""
    required = [
        "gpuscope_gpu_info",
        "gpuscope_gpu_utilization_ratio",
        "gpuscope_gpu_memory_utilization_ratio",
        "gpuscope_gpu_memory_used_bytes",
        "gpuscope_gpu_memory_total_bytes",
        "gpuscope_gpu_power_watts",
        "gpuscope_gpu_temperature_celsius",
        "gpuscope_gpu_energy_joules_total",
        "gpuscope_gpu_sm_active_ratio",
        "gpuscope_gpu_tensor_active_ratio",
        "gpuscope_gpu_dram_active_ratio",
        "gpuscope_gpu_ecc_errors_total",
        "gpuscope_gpu_nvlink_bytes_total",
        "gpuscope_gpu_pcie_bytes_total",
        "gpuscope_gpu_workload_info",
        "gpuscope_gpu_workload_memory_used_bytes",
        "gpuscope_gpu_workload_utilization_ratio",
        "gpuscope_ib_transmit_bytes_total",
        "gpuscope_ib_receive_bytes_total",
        "gpuscope_ib_transmit_packets_total",
        "gpuscope_ib_receive_packets_total",
        "gpuscope_ib_transmit_wait_total",
        "gpuscope_ib_errors_total",
        "gpuscope_ib_port_rate_bytes_per_second",
        "gpuscope_ib_port_up",
        "gpuscope_agent_source_up",
        "gpuscope_agent_collect_seconds",
    ]
    names = {m.sample_name for m in AGENT_METRICS}
    assert set(required) <= names


def test_bad_values_are_dropped_and_counted_never_failing_the_page() -> None:
    """NaN and infinite values, negative or 2**64 counters, a value too large for a float
    and a label that is not UTF-8 each drop what they touch, counted by source and reason;
    the good GPU, the port and the workload still go out, every scrape."""
    import dataclasses

    from gpuscope.agent.serving.textformat import generate_text

    bad = [
        dataclasses.replace(SPARSE, index=3, uuid="GPU-nan", power_watts=float("nan"),
                            temperature_celsius=float("inf")),
        dataclasses.replace(SPARSE, index=4, uuid="GPU-neg", energy_joules_total=-1.0,
                            ecc_corrected_total=2**64),
        dataclasses.replace(SPARSE, index=5, uuid="GPU-big", ecc_uncorrected_total=10**400),
        dataclasses.replace(SPARSE, index=6, uuid="GPU-\udcff"),
    ]  # fmt: skip
    collector = AgentCollector("n1", Gpus([FULL, *bad]), Ports(), Attr())
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    for scrapes in (1, 2):
        # the agent's page, then the registry's: both raised before on float(10**400)
        text = (collector.render() if scrapes == 1 else generate_text(reg)).decode()
        got: dict[str, list[tuple[dict[str, str], float]]] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                got.setdefault(s.name, []).append((s.labels, s.value))
        errors = {
            (lbl["source"], lbl["reason"]): v for lbl, v in got["gpuscope_agent_errors_total"]
        }
        assert errors == {
            ("fake", "not_finite"): 2.0 * scrapes,
            ("fake", "negative"): 1.0 * scrapes,
            ("fake", "out_of_range"): 1.0 * scrapes,
            ("fake", "bad_reading"): 1.0 * scrapes,
            ("fake", "label_not_utf8"): 3.0 * scrapes,  # info, up, utilization of GPU-\udcff
        }
        uuids = {lbl["uuid"] for lbl, _ in got["gpuscope_gpu_up"]}
        assert uuids == {"GPU-a", "GPU-nan", "GPU-neg"}  # GPU-big dropped whole
        assert {lbl["uuid"] for lbl, _ in got["gpuscope_gpu_power_watts"]} == {"GPU-a"}
        assert {lbl["uuid"] for lbl, _ in got["gpuscope_gpu_energy_joules_total"]} == {"GPU-a"}
        ecc = {(lbl["uuid"], lbl["type"]) for lbl, _ in got["gpuscope_gpu_ecc_errors_total"]}
        assert ecc == {("GPU-a", "corrected"), ("GPU-a", "uncorrected")}
        assert got["gpuscope_ib_port_up"] and got["gpuscope_gpu_workload_info"]


def test_registry_families_match_the_page() -> None:
    """collect() (for a prometheus_client registry) gives the page's series exactly."""
    collector = AgentCollector("n1", Gpus([FULL, LOST]), Ports(), Attr())
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)

    def strip(text: str) -> list[str]:  # durations differ between two reads
        return [x for x in text.splitlines() if not x.startswith("gpuscope_agent_collect_seconds{")]

    assert strip(collector.render().decode()) == strip(generate_latest(reg).decode())


@pytest.mark.parametrize(
    ("header", "wanted"),
    [
        ("gzip", True),
        ("gzip, deflate", True),
        ("deflate, gzip;q=0.5", True),
        ("GZIP", True),
        ("x-gzip", True),
        ("gzip;q=0", False),
        ("gzip;q=0.0, identity", False),
        ("identity", False),
        ("", False),
        ("*", True),
        ("*;q=0", False),
        ("*, gzip;q=0", False),
        ("gzip;q=bad", False),
    ],
)
def test_accept_encoding_gzip_follows_rfc_9110(header: str, wanted: bool) -> None:
    from gpuscope.agent.serving.server import accepts_gzip

    assert accepts_gzip(header) is wanted

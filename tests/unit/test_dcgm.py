"""DCGM: the shared field table and translation, the dcgm-exporter source, the DCGM source.

The dcgm-exporter page is a real recorded one (Datadog's fixture: two Tesla T4 hosts, a
block of unlabelled dummy series, one pod-attributed A10G line, ``# NOTE`` comments); the
expected values below were read off that file by hand. The exporter's counter lists
(``default-counters.csv``, ``dcp-metrics-included.csv``) check our field table's names and
types. DCGM's bindings are replaced by a reader double with the one method we call.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuscope.agent.devices.dcgm import WATCH_FIELD_IDS, DcgmSource, load_dcgm_bindings
from gpuscope.agent.devices.dcgm_exporter import parse_page
from gpuscope.core.dcgm import (
    FIELDS,
    FIELDS_BY_NAME,
    MIB,
    is_blank,
    readings_from_dcgm_exporter,
)
from gpuscope.core.errors import SourceError
from gpuscope.core.records import GpuProcess, GpuReading, PodRef
from tests.paths import FIXTURES

DATA = FIXTURES
SAMPLE = DATA / "dcgm-exporter-sample" / "dcgm-exporter-metrics.txt"
COUNTER_CSVS = (
    DATA / "dcgm-exporter" / "etc" / "default-counters.csv",
    DATA / "dcgm-exporter" / "etc" / "dcp-metrics-included.csv",
)
T4_A = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
T4_B = "GPU-9ef1b6d0-3643-5dd7-b823-c0ec20dcf2d5"
A10G = "GPU-abc"
INT64_NOT_SUPPORTED = 9223372036854775794  # 0x7ffffffffffffff0 + 2
FP64_NOT_SUPPORTED = 140737488355328.0 + 2.0


def sample_readings() -> dict[str, GpuReading]:
    readings = readings_from_dcgm_exporter(parse_page(SAMPLE.read_text()))
    by_uuid = {r.uuid: r for r in readings}
    assert len(by_uuid) == len(readings)
    return by_uuid


def line(name: str, value: str, **labels: str) -> str:
    labels = {"gpu": "0", "UUID": "GPU-x", **labels}
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {value}\n"


# --- gpuscope.core.dcgm: translation of the recorded page -------------------------------------


def test_sample_first_t4_values_in_base_units() -> None:
    """The first T4's values, converted: MHz->Hz, mJ->J, MiB->bytes, percent->ratio."""
    t4 = sample_readings()[T4_A]
    assert (t4.index, t4.model, t4.driver_version) == (0, "Tesla T4", "460.106.00")
    assert t4.utilization_ratio == 0.0  # a real 0 %, not "missing"
    assert t4.memory_utilization_ratio == 0.0
    assert t4.memory_used_bytes == 0
    # No FB_TOTAL on this host: total is FB_USED + FB_FREE = 0 + 15109 MiB.
    assert t4.memory_total_bytes == 15109 * MIB
    assert t4.power_watts == pytest.approx(8.969)
    assert t4.temperature_celsius == 25.0
    assert t4.energy_joules_total == pytest.approx(128996.013)
    assert t4.sm_clock_hz == 300e6
    assert t4.memory_clock_hz == 405e6
    assert t4.pods == ()
    assert t4.sm_active_ratio is None  # not on the page for this GPU


def test_sample_second_t4_uses_fb_total_and_its_driver_label() -> None:
    """FB_TOTAL wins over a sum (the page's FB_RESERVED is a copy of TOTAL, per its NOTE)."""
    t4 = sample_readings()[T4_B]
    assert t4.driver_version == "470.182.03"
    assert t4.memory_total_bytes == 15109 * MIB
    assert t4.memory_used_bytes is None
    assert t4.power_watts is None  # only POWER_MGMT_LIMIT, which is not power draw


def test_sample_a10g_dram_active_attributed_to_its_pod() -> None:
    """The A10G line keeps its 0..1 ratio and names pod ray-llm/ray-1111111 (ray-worker)."""
    a10g = sample_readings()[A10G]
    assert a10g.model == "NVIDIA A10G"
    assert a10g.driver_version == "550.144.03"
    assert a10g.dram_active_ratio == pytest.approx(0.000003)
    assert a10g.pods == (PodRef(namespace="ray-llm", pod="ray-1111111", container="ray-worker"),)
    assert a10g.utilization_ratio is None


def test_sample_unlabelled_dummy_block_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    """Series with no gpu/UUID labels make no reading and are logged at DEBUG."""
    with caplog.at_level(logging.DEBUG, logger="gpuscope.core.dcgm"):
        readings = sample_readings()
    assert set(readings) == {T4_A, T4_B, A10G}
    # The dummy DCGM_FI_PROF_SM_ACTIVE 0 must not land on any GPU as a real zero.
    assert all(r.sm_active_ratio is None for r in readings.values())
    assert "DCGM_FI_PROF_SM_ACTIVE has no gpu/UUID labels" in caplog.text


def test_note_comment_lines_do_not_break_parsing() -> None:
    """The series right after a '# NOTE' line still parses; NOTE lines vanish."""
    series = parse_page(SAMPLE.read_text())
    names = [name for name, _, _ in series]
    assert "DCGM_FI_DEV_FB_RESERVED" in names
    assert not any("NOTE" in name for name in names)
    page = "# NOTE anything, even {braces} and 1 2 3\n" + line("DCGM_FI_DEV_GPU_TEMP", "41")
    assert readings_from_dcgm_exporter(parse_page(page))[0].temperature_celsius == 41.0


def test_counter_families_parsed_with_total_suffix_still_map() -> None:
    """prometheus_client renames counter samples to *_total; energy must still be read."""
    page = "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" + line(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "5000"
    )
    series = parse_page(page)
    assert series[0][0] == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total"
    assert readings_from_dcgm_exporter(series)[0].energy_joules_total == 5.0


# --- blank sentinels --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "value_type", "blank"),
    [
        (0x7FFFFFFFFFFFFFF0, None, True),
        (INT64_NOT_SUPPORTED, None, True),
        (0x7FFFFFFFFFFFFFEF, None, False),
        (0, None, False),
        (140737488355328.0, None, True),
        (FP64_NOT_SUPPORTED, "double", True),
        (140737488355327.0, "double", False),
        (float(INT64_NOT_SUPPORTED), "int64", True),  # an int64 sentinel after a float trip
        (2e14, "int64", False),  # a big real int64 counter above 2**47
        (float("nan"), None, True),
        ("<<<NOT_SUPPORTED>>>", None, True),
        ("GPU-abc", None, False),
        (None, None, True),
    ],
)
def test_is_blank(value: object, value_type: Any, blank: bool) -> None:
    """DCGM's int64/double/string sentinels are blank; values next to them are not."""
    assert is_blank(value, value_type) is blank


def test_blank_sentinels_on_a_page_become_none() -> None:
    """Sentinels on a page are None, never a number; a real value next to them survives."""
    page = (
        line("DCGM_FI_DEV_GPU_UTIL", str(INT64_NOT_SUPPORTED))
        + line("DCGM_FI_PROF_SM_ACTIVE", repr(FP64_NOT_SUPPORTED))
        + line("DCGM_FI_DEV_FB_USED", "9223372036854775793")
        + line("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "200000000000000")
        + line("DCGM_FI_DEV_GPU_TEMP", "40")
    )
    (reading,) = readings_from_dcgm_exporter(parse_page(page))
    assert reading.utilization_ratio is None
    assert reading.sm_active_ratio is None
    assert reading.memory_used_bytes is None
    assert reading.energy_joules_total == pytest.approx(2e11)
    assert reading.temperature_celsius == 40.0


def test_profiling_byte_rates_never_fill_byte_counters() -> None:
    """PROF_PCIE/NVLINK_*_BYTES are per-second rates: the *_bytes_total stay None."""
    page = "".join(
        line(f"DCGM_FI_PROF_{bus}_{d}_BYTES", "1000000")
        for bus in ("PCIE", "NVLINK")
        for d in ("TX", "RX")
    ) + line("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "123")
    (reading,) = readings_from_dcgm_exporter(parse_page(page))
    assert reading.pcie_tx_bytes_total is None
    assert reading.pcie_rx_bytes_total is None
    assert reading.nvlink_tx_bytes_total is None
    assert reading.nvlink_rx_bytes_total is None


def test_memory_total_sums_used_free_and_reserved() -> None:
    """Without FB_TOTAL the total is USED + FREE + RESERVED, in bytes."""
    page = (
        line("DCGM_FI_DEV_FB_USED", "100")
        + line("DCGM_FI_DEV_FB_FREE", "900")
        + line("DCGM_FI_DEV_FB_RESERVED", "24")
    )
    (reading,) = readings_from_dcgm_exporter(parse_page(page))
    assert (reading.memory_used_bytes, reading.memory_total_bytes) == (100 * MIB, 1024 * MIB)


def test_mig_instances_are_separate_readings() -> None:
    """(UUID, GPU_I_ID) keys a reading: a MIG instance names its parent and profile."""
    mig = {"GPU_I_ID": "13", "GPU_I_PROFILE": "1g.5gb", "UUID": "GPU-p"}
    page = line("DCGM_FI_DEV_GPU_TEMP", "50", UUID="GPU-p") + line(
        "DCGM_FI_PROF_SM_ACTIVE", "0.25", **mig
    )
    whole, instance = readings_from_dcgm_exporter(parse_page(page))
    assert (whole.mig_instance, whole.mig_mode, whole.temperature_celsius) == ("", "enabled", 50)
    assert instance.mig_instance == "13"
    assert (instance.mig_profile, instance.parent_uuid) == ("1g.5gb", "GPU-p")
    assert (instance.sm_active_ratio, instance.temperature_celsius) == (0.25, None)


def test_node_filter_drops_other_hosts() -> None:
    """With node given, series whose Hostname names another host are skipped."""
    page = line("DCGM_FI_DEV_GPU_TEMP", "50", UUID="GPU-a", Hostname="node-a") + line(
        "DCGM_FI_DEV_GPU_TEMP", "60", UUID="GPU-b", Hostname="node-b"
    )
    readings = readings_from_dcgm_exporter(parse_page(page), node="node-a")
    assert [r.uuid for r in readings] == ["GPU-a"]


# --- the field table against dcgm-exporter's counter lists --------------------------------

_CSV_ENTRY = re.compile(r"^#?\s*(DCGM_FI_\w+)\s*,\s*(\w+)\s*,")


def csv_entries(path: Path) -> dict[str, str]:
    """Field name -> Prometheus type, for enabled and commented-out (disabled) entries."""
    entries = {}
    for text in path.read_text().splitlines():
        match = _CSV_ENTRY.match(text.strip())
        if match:
            entries[match.group(1).strip()] = match.group(2).strip()
    return entries


def test_csv_parser_trims_the_stray_space() -> None:
    """'DCGM_FI_DEV_DEC_UTIL ,' in default-counters.csv reads as DCGM_FI_DEV_DEC_UTIL."""
    entries = csv_entries(COUNTER_CSVS[0])
    assert entries["DCGM_FI_DEV_DEC_UTIL"] == "gauge"
    assert entries["DCGM_FI_PROF_SM_ACTIVE"] == "gauge"  # commented out there, still listed


def test_every_mapped_field_is_listed_by_dcgm_exporter_with_our_type() -> None:
    """Each field we read is in a counter list (or, FB_TOTAL, on the recorded page) as typed."""
    listed: dict[str, set[str]] = {}
    for path in COUNTER_CSVS:
        for name, type_ in csv_entries(path).items():
            listed.setdefault(name, set()).add(type_)
    page_types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", SAMPLE.read_text(), re.MULTILINE))
    mapped = [f for f in FIELDS if f.role in ("metric", "memory_part")]
    assert len(mapped) >= 14
    for f in mapped:
        types = listed.get(f.name) or {page_types[f.name]}
        assert types == {f.exporter_type}, f.name
    assert listed["DCGM_FI_DRIVER_VERSION"] == {
        FIELDS_BY_NAME["DCGM_FI_DRIVER_VERSION"].exporter_type
    }


def test_field_table_ids_and_names_are_unique() -> None:
    """Two entries with one id (or name) would silently overwrite each other."""
    assert len({f.field_id for f in FIELDS}) == len(FIELDS)
    assert len({f.name for f in FIELDS}) == len(FIELDS)
    assert FIELDS_BY_NAME["DCGM_FI_PROF_SM_ACTIVE"].field_id == 1002
    assert FIELDS_BY_NAME["DCGM_FI_DEV_UUID"].field_id == 54


# --- gpuscope.agent.devices.dcgm with a reader double -------------------------------------------------------


class FakeReader:
    """Stands in for DcgmReader.DcgmReader: the one method we call, plus Shutdown."""

    def __init__(self, values: Any = None, error: Exception | None = None) -> None:
        self.values = values
        self.error = error
        self.calls = 0
        self.shut_down = False

    def GetLatestGpuValuesAsFieldIdDict(self) -> Any:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.values

    def Shutdown(self) -> None:
        self.shut_down = True


class FakeBase:
    """An NVML-like base source."""

    name = "nvml"

    def __init__(self, readings: Sequence[GpuReading]) -> None:
        self.readings = readings
        self.closed = False

    def read(self) -> Sequence[GpuReading]:
        return self.readings

    def close(self) -> None:
        self.closed = True


def dcgm_gpu(uuid: str, **values: Any) -> dict[int, Any]:
    fields: dict[int, Any] = {54: uuid}
    fields.update({FIELDS_BY_NAME[name].field_id: v for name, v in values.items()})
    return fields


def test_dcgm_source_alone_takes_identity_from_dcgm_fields() -> None:
    """Without a base, name/UUID/bus id/driver/index come from DCGM fields 50/54/57/1/52."""
    fields = dcgm_gpu(
        "GPU-1",
        DCGM_FI_DEV_NAME="NVIDIA H100 80GB HBM3",
        DCGM_FI_DEV_PCI_BUSID="00000000:18:00.0",
        DCGM_FI_DRIVER_VERSION="550.54.15",
        DCGM_FI_DEV_NVML_INDEX=3,
        DCGM_FI_PROF_SM_ACTIVE=0.42,
        DCGM_FI_DEV_GPU_UTIL=97,
        DCGM_FI_DEV_FB_TOTAL=81559,
    )
    (reading,) = DcgmSource(FakeReader({0: fields})).read()
    assert (reading.uuid, reading.index, reading.model) == ("GPU-1", 3, "NVIDIA H100 80GB HBM3")
    assert (reading.pci_bus_id, reading.driver_version) == ("00000000:18:00.0", "550.54.15")
    assert reading.sm_active_ratio == 0.42
    assert reading.utilization_ratio == pytest.approx(0.97)
    assert reading.memory_total_bytes == 81559 * MIB


def test_dcgm_source_blank_values_are_none() -> None:
    """DCGM's blank/not-supported values are None in the reading, never numbers."""
    fields = dcgm_gpu(
        "GPU-1",
        DCGM_FI_PROF_SM_ACTIVE=FP64_NOT_SUPPORTED,
        DCGM_FI_DEV_GPU_UTIL=INT64_NOT_SUPPORTED,
        DCGM_FI_DEV_NAME="<<<NOT_SUPPORTED>>>",
        DCGM_FI_DEV_GPU_TEMP=33,
    )
    (reading,) = DcgmSource(FakeReader({0: fields})).read()
    assert reading.sm_active_ratio is None
    assert reading.utilization_ratio is None
    assert reading.model == ""
    assert reading.temperature_celsius == 33.0


def test_dcgm_source_overlays_base_readings_by_uuid() -> None:
    """DCGM values land on the base reading with the same UUID; the rest stays as NVML said."""
    process = GpuProcess(pid=42, used_memory_bytes=1 << 30)
    base = FakeBase(
        [
            GpuReading(
                index=0,
                uuid="GPU-a",
                model="A100",
                power_watts=300.0,
                utilization_ratio=1.0,
                processes=(process,),
            ),
            GpuReading(index=1, uuid="GPU-b", model="A100", power_watts=90.0),
            GpuReading(index=2, uuid="GPU-lost", up=False, error="fell off the bus"),
        ]
    )
    reader = FakeReader(
        {
            # Listed by DCGM in another order than NVML's indexes.
            1: dcgm_gpu(
                "GPU-a",
                DCGM_FI_PROF_SM_ACTIVE=0.05,
                DCGM_FI_DEV_GPU_UTIL=100,
                DCGM_FI_DEV_POWER_USAGE=FP64_NOT_SUPPORTED,
            ),
            0: dcgm_gpu("GPU-b", DCGM_FI_PROF_PIPE_TENSOR_ACTIVE=0.5),
            2: dcgm_gpu("GPU-lost", DCGM_FI_DEV_GPU_TEMP=99),
        }
    )
    a, b, lost = DcgmSource(reader, base=base).read()
    assert (a.uuid, a.index, a.sm_active_ratio, a.utilization_ratio) == ("GPU-a", 0, 0.05, 1.0)
    assert a.power_watts == 300.0  # a blank from DCGM never erases NVML's value
    assert a.processes == (process,)
    assert (b.uuid, b.tensor_active_ratio, b.sm_active_ratio) == ("GPU-b", 0.5, None)
    assert (lost.up, lost.temperature_celsius) == (False, None)


def test_dcgm_source_reader_error_is_source_error_and_reader_is_rebuilt() -> None:
    """A failing reader is a SourceError; with a factory the next read uses a fresh one."""
    broken = FakeReader(error=RuntimeError("DCGM_ST_CONNECTION_NOT_VALID\nline two"))
    healthy = FakeReader({0: dcgm_gpu("GPU-1", DCGM_FI_DEV_GPU_TEMP=30)})
    made = iter([broken, healthy])
    source = DcgmSource(lambda: next(made))
    with pytest.raises(SourceError, match="CONNECTION_NOT_VALID line two"):
        source.read()
    assert broken.shut_down
    assert source.read()[0].temperature_celsius == 30.0


@pytest.mark.parametrize("values", [{}, None, {0: "not a dict"}])
def test_dcgm_source_empty_or_odd_values_are_source_error(values: Any) -> None:
    """No GPUs (DcgmReader's answer when nv-hostengine is gone) or junk: SourceError."""
    with pytest.raises(SourceError, match="dcgm"):
        DcgmSource(FakeReader(values)).read()


def test_dcgm_source_close_shuts_reader_and_base() -> None:
    """close() shuts the DCGM reader down and closes the base source."""
    reader, base = FakeReader({}), FakeBase([])
    DcgmSource(reader, base=base).close()
    assert reader.shut_down
    assert base.closed


# --- load_dcgm_bindings --------------------------------------------------------------------

_FAKE_BINDINGS = {
    "dcgm_fields.py": "DCGM_FI_DEV_UUID = 54\n",
    "pydcgm.py": "import dcgm_fields\n",
    "DcgmReader.py": (
        "import pydcgm\n"
        "made = []\n"
        "class DcgmReader:\n"
        "    def __init__(self, hostname='localhost', fieldIds=None,\n"
        "                 updateFrequency=10000000, fieldGroupName='x', **kw):\n"
        "        made.append((hostname, fieldIds, updateFrequency, fieldGroupName))\n"
        "    def GetLatestGpuValuesAsFieldIdDict(self):\n"
        "        return {0: {54: 'GPU-fake', 150: 44}}\n"
    ),
}


@pytest.fixture
def clean_modules() -> Iterator[None]:
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.mark.usefixtures("clean_modules")
def test_load_dcgm_bindings_imports_from_the_folder_only_for_the_import(tmp_path: Path) -> None:
    """The fake bindings import (with their sibling modules); sys.path is left as it was."""
    for name, text in _FAKE_BINDINGS.items():
        (tmp_path / name).write_text(text)
    path_before = list(sys.path)
    module = load_dcgm_bindings(tmp_path)
    assert sys.path == path_before
    assert hasattr(module, "DcgmReader")
    assert "pydcgm" in sys.modules


@pytest.mark.usefixtures("clean_modules")
def test_from_bindings_builds_a_reader_watching_our_fields(tmp_path: Path) -> None:
    """from_bindings passes our field ids and the interval in microseconds to DcgmReader."""
    for name, text in _FAKE_BINDINGS.items():
        (tmp_path / name).write_text(text)
    source = DcgmSource.from_bindings(tmp_path, hostname="10.0.0.1", update_interval_s=2.0)
    (reading,) = source.read()
    assert (reading.uuid, reading.temperature_celsius) == ("GPU-fake", 44.0)
    ((hostname, field_ids, frequency, group),) = sys.modules["DcgmReader"].made
    assert (hostname, frequency, group) == ("10.0.0.1", 2_000_000, "gpuscope_agent")
    assert field_ids == list(WATCH_FIELD_IDS)
    assert {54, 1002, 1004, 1005, 203} <= set(field_ids)
    assert 1009 not in field_ids  # unmapped rates are not watched


def test_load_dcgm_bindings_missing_folder_is_source_error(tmp_path: Path) -> None:
    """No bindings on the node: a SourceError that names where we looked."""
    missing = tmp_path / "no-dcgm"
    with pytest.raises(SourceError, match="DCGM bindings not found under"):
        load_dcgm_bindings(missing)


@pytest.mark.usefixtures("clean_modules")
@pytest.mark.parametrize(
    ("value", "hostname"), [("10.1.2.3:5555", "10.1.2.3:5555"), ("embedded", None)]
)
def test_the_agent_connects_to_the_configured_hostengine(
    tmp_path: Path, value: str, hostname: str | None
) -> None:
    """GPUSCOPE_AGENT__DCGM_HOSTENGINE (what the Helm chart sets to the node's address) reaches
    DcgmReader; "embedded" asks for a host engine inside the agent (hostname None)."""
    from gpuscope.agent.build import _dcgm_source
    from gpuscope.core.settings import load_settings

    for name, text in _FAKE_BINDINGS.items():
        (tmp_path / name).write_text(text)
    env = {
        "GPUSCOPE_AGENT__DCGM_HOSTENGINE": value,
        "GPUSCOPE_AGENT__DCGM_BINDINGS_PATH": str(tmp_path),
    }
    source = _dcgm_source(load_settings(env=env).agent)
    source.read()
    ((made_for, *_),) = sys.modules["DcgmReader"].made
    assert made_for == hostname

"""NvmlSource against the NVML double, fed by real ``nvidia-smi -q -x`` dumps.

Expected numbers are written out by hand from the XML files (MiB * 1048576, W, C, MHz * 1e6),
not computed by the code under test.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

from gpuscope.agent.devices.nvml import NvmlSource
from gpuscope.core.errors import SourceError
from gpuscope.core.records import GpuReading
from tests.fakes.nvml import NVIDIA_SMI_XML, FakeNvml

A10G = NVIDIA_SMI_XML / "a10g.xml"
T4 = NVIDIA_SMI_XML / "tesla-t4.xml"
A100_MIG = NVIDIA_SMI_XML / "a100-sxm4-v12.xml"
RTX_ADA = NVIDIA_SMI_XML / "rtx-4000-sff-ada-v13.xml"


def _clock(*times: float) -> Callable[[], float]:
    it: Iterator[float] = iter(times)
    return lambda: next(it)


def _read_one(path: Path) -> GpuReading:
    source = NvmlSource(FakeNvml.from_nvidia_smi_xml(path))
    (reading,) = source.read()
    return reading


def test_a10g_dump_in_base_units() -> None:
    """Every A10G value in the dump comes out in base units (bytes, W, C, Hz, ratios)."""
    r = _read_one(A10G)
    assert r.up
    assert r.error == ""
    assert r.index == 0
    assert r.uuid == "GPU-9a9a6c50-2a47-2f51-a902-b82c3b127e94"
    assert r.model == "NVIDIA A10G"
    assert r.driver_version == "515.105.01"
    assert r.pci_bus_id == "00000000:00:1E.0"
    assert r.mig_mode == "unsupported"  # <current_mig>N/A</current_mig>
    assert r.utilization_ratio == 0.0  # "0 %" is a real zero
    assert r.memory_utilization_ratio == 0.0
    assert r.memory_used_bytes == 22 * 1048576 == 23068672
    assert r.memory_total_bytes == 23028 * 1048576 == 24146608128
    assert r.power_watts == pytest.approx(25.58)
    assert r.temperature_celsius == 17.0
    assert r.sm_clock_hz == 210e6
    assert r.memory_clock_hz == 405e6
    assert (r.ecc_corrected_total, r.ecc_uncorrected_total) == (0, 0)
    assert [(p.pid, p.used_memory_bytes) for p in r.processes] == [(725, 22 * 1048576)]


def test_tesla_t4_dump_with_two_processes() -> None:
    """The T4 dump's memory, power, clocks and both processes (Xorg and python) are read."""
    r = _read_one(T4)
    assert r.uuid == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert r.model == "Tesla T4"
    assert r.memory_used_bytes == 1032 * 1048576 == 1082130432
    assert r.memory_total_bytes == 15360 * 1048576 == 16106127360
    assert r.power_watts == pytest.approx(26.78)
    assert r.temperature_celsius == 40.0
    assert r.sm_clock_hz == 585e6
    assert r.memory_clock_hz == 5000e6
    assert [(p.pid, p.used_memory_bytes) for p in r.processes] == [
        (675, 22 * 1048576),
        (5762, 1005 * 1048576),
    ]


def test_rtx_ada_v13_dump_schema_drift() -> None:
    """v13 dump: average_power_draw is the power, N/A ECC is None, a C+G process is listed once."""
    r = _read_one(RTX_ADA)
    assert r.model == "NVIDIA RTX 4000 SFF Ada Generation"
    assert r.driver_version == "595.84"
    assert r.pci_bus_id == "00000000:06:00.0"
    assert r.power_watts == pytest.approx(8.81)  # average_power_draw, not instant 8.44
    assert r.memory_utilization_ratio == pytest.approx(0.37)
    assert r.utilization_ratio == 0.0
    assert r.memory_used_bytes == 3534 * 1048576
    assert r.memory_total_bytes == 20475 * 1048576
    assert r.temperature_celsius == 38.0
    assert r.ecc_corrected_total is None  # ECC disabled: every counter is N/A
    assert r.ecc_uncorrected_total is None
    pids = [p.pid for p in r.processes]
    assert pids == [1842, 3190, 4937, 34626]  # 34626 is "C+G": in both NVML lists, once here
    assert r.processes[-1].used_memory_bytes == 183 * 1048576


def test_a100_mig_dump_parent_and_instances() -> None:
    """MIG A100 dump: parent has no utilization; each of the 4 instances is its own reading."""
    source = NvmlSource(FakeNvml.from_nvidia_smi_xml(A100_MIG))
    parent, *instances = source.read()
    assert parent.mig_mode == "enabled"
    assert parent.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert parent.utilization_ratio is None
    assert parent.memory_utilization_ratio is None
    assert parent.memory_used_bytes == 50 * 1048576
    assert parent.memory_total_bytes == 81920 * 1048576
    assert parent.power_watts == pytest.approx(67.03)
    assert parent.temperature_celsius == 27.0
    assert parent.parent_uuid == ""
    assert [i.mig_instance for i in instances] == ["3", "4", "5", "6"]
    assert len({i.uuid for i in instances}) == 4
    for instance in instances:
        assert instance.index == 0
        assert instance.parent_uuid == parent.uuid
        assert instance.uuid.startswith("MIG-")
        assert instance.memory_used_bytes == 12 * 1048576
        assert instance.memory_total_bytes == 19968 * 1048576
        assert instance.mig_profile == ""  # the v12 dump names no profile
        assert instance.utilization_ratio is None  # no samples: not available, not 0


def test_not_supported_fields_are_none_not_zero() -> None:
    """Fields NVML refuses (NotSupported, NoPermission) are None; supported ones still read."""
    fake = FakeNvml()
    fake.add_device("GPU-bare", memory_used_bytes=1, memory_total_bytes=2)
    fake.add_device("GPU-perm", power_mw=70_000, temperature_c=50)

    def no_permission(handle: object) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    fake.nvmlDeviceGetPowerUsage = no_permission  # type: ignore[method-assign]
    bare, perm = NvmlSource(fake).read()
    assert bare.up
    assert bare.memory_used_bytes == 1
    for name in (
        "utilization_ratio",
        "memory_utilization_ratio",
        "power_watts",
        "temperature_celsius",
        "energy_joules_total",
        "sm_clock_hz",
        "memory_clock_hz",
        "ecc_corrected_total",
        "ecc_uncorrected_total",
        "nvlink_tx_bytes_total",
        "nvlink_rx_bytes_total",
        "pcie_tx_bytes_total",
        "pcie_rx_bytes_total",
    ):
        assert getattr(bare, name) is None, name
    assert perm.power_watts is None
    assert perm.temperature_celsius == 50.0


def test_dump_without_energy_or_nvlink_reports_none() -> None:
    """What the A10G dump lacks (energy, NVLink) stays None instead of becoming 0."""
    r = _read_one(A10G)
    assert r.energy_joules_total is None
    assert r.nvlink_tx_bytes_total is None
    assert r.nvlink_rx_bytes_total is None


def test_lost_gpu_in_the_middle_keeps_the_others_and_its_cached_uuid() -> None:
    """A GPU lost between reads is up=False with its earlier UUID and model; others go on."""
    fake = FakeNvml.from_nvidia_smi_xml(A10G, T4, RTX_ADA)
    source = NvmlSource(fake)
    assert [r.up for r in source.read()] == [True, True, True]
    fake.mark_lost(1)
    first, lost, last = source.read()
    assert first.up
    assert last.up
    assert first.power_watts == pytest.approx(25.58)
    assert last.power_watts == pytest.approx(8.81)
    assert not lost.up
    assert lost.index == 1
    assert lost.uuid == "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
    assert lost.model == "Tesla T4"
    assert lost.error == "GPU is lost"
    assert lost.power_watts is None
    assert lost.memory_used_bytes is None


def test_gpu_lost_before_any_read_has_empty_uuid() -> None:
    """A GPU lost from the first read has no cached identity: uuid is empty, not invented."""
    fake = FakeNvml()
    fake.add_device("GPU-a", power_mw=1000)
    fake.add_device("GPU-b", power_mw=2000)
    fake.mark_lost(0)
    down, up = NvmlSource(fake).read()
    assert (down.up, down.uuid, down.model) == (False, "", "")
    assert (up.up, up.uuid, up.power_watts) == (True, "GPU-b", 2.0)


def test_two_pods_sharing_a_gpu_get_their_own_utilization() -> None:
    """Per-process samples: latest per pid, and the 2nd read asks only for newer samples."""
    fake = FakeNvml()
    gpu = fake.add_device("GPU-shared", gpu_util=90)
    fake.add_process(gpu, 100, 4 * 1048576)  # pod A
    fake.add_process(gpu, 200, 8 * 1048576)  # pod B
    fake.add_sample(gpu, 100, timestamp=1_000, sm_util=30, mem_util=5)
    fake.add_sample(gpu, 100, timestamp=3_000, sm_util=40, mem_util=6)
    fake.add_sample(gpu, 200, timestamp=2_000, sm_util=60, mem_util=20)
    source = NvmlSource(fake)

    (first,) = source.read()
    by_pid = {p.pid: p for p in first.processes}
    assert by_pid[100].sm_utilization_ratio == pytest.approx(0.40)  # the later of 30 and 40
    assert by_pid[100].memory_utilization_ratio == pytest.approx(0.06)
    assert by_pid[200].sm_utilization_ratio == pytest.approx(0.60)
    assert by_pid[200].used_memory_bytes == 8 * 1048576

    fake.add_sample(gpu, 100, timestamp=4_000, sm_util=10)
    (second,) = source.read()
    by_pid = {p.pid: p for p in second.processes}
    assert by_pid[100].sm_utilization_ratio == pytest.approx(0.10)
    assert by_pid[200].sm_utilization_ratio is None  # no sample since the first read
    assert fake.process_utilization_calls == [("GPU-shared", 0), ("GPU-shared", 3_000)]

    (third,) = source.read()  # nothing new: NVML answers NotFound
    assert all(p.sm_utilization_ratio is None for p in third.processes)
    assert fake.process_utilization_calls[-1] == ("GPU-shared", 4_000)


def test_process_memory_not_available_is_none() -> None:
    """A process whose memory the driver cannot report (pynvml gives None) has None, not 0."""
    fake = FakeNvml()
    gpu = fake.add_device("GPU-x")
    fake.add_process(gpu, 7, None)
    (r,) = NvmlSource(fake).read()
    assert [(p.pid, p.used_memory_bytes) for p in r.processes] == [(7, None)]


def test_mig_parent_has_no_utilization_and_instances_are_own_readings() -> None:
    """MIG: parent utilization None even if NVML would answer; instances sum their samples."""
    fake = FakeNvml()
    parent = fake.add_device("GPU-parent", name="NVIDIA A100-SXM4-40GB", power_mw=100_000)
    parent.pci_bus_id = "00000000:07:00.0"
    small = fake.add_mig_device(
        parent, "MIG-small", 7, "1g.5gb", memory_used_bytes=1, memory_total_bytes=4864 * 1048576
    )
    big = fake.add_mig_device(
        parent, "MIG-big", 2, "3g.20gb", slot=3, memory_used_bytes=3, memory_total_bytes=4
    )
    # A driver that answers anyway must not leak a whole-GPU number into the reading.
    parent.gpu_util, parent.memory_util = 55, 20
    fake.add_process(parent, 1, 10)  # the parent's list repeats the instances' processes
    fake.add_process(small, 11, 100)
    fake.add_process(big, 21, 200)
    fake.add_process(big, 22, 300)
    fake.add_sample(small, 11, timestamp=5, sm_util=25)
    fake.add_sample(big, 21, timestamp=5, sm_util=70)
    fake.add_sample(big, 22, timestamp=6, sm_util=50)

    gpu, first, second = NvmlSource(fake).read()
    assert gpu.uuid == "GPU-parent"
    assert gpu.mig_mode == "enabled"
    assert gpu.utilization_ratio is None
    assert gpu.power_watts == 100.0
    assert gpu.processes == ()
    assert (first.uuid, first.mig_instance, first.mig_profile) == ("MIG-small", "7", "1g.5gb")
    assert (second.uuid, second.mig_instance, second.mig_profile) == ("MIG-big", "2", "3g.20gb")
    for instance in (first, second):
        assert instance.parent_uuid == "GPU-parent"
        assert instance.index == 0
        assert instance.model == "NVIDIA A100-SXM4-40GB"
        assert instance.pci_bus_id == "00000000:07:00.0"
        assert instance.power_watts is None  # a parent-wide value is not the instance's
    assert first.memory_total_bytes == 4864 * 1048576
    assert first.utilization_ratio == pytest.approx(0.25)
    assert second.utilization_ratio == 1.0  # 0.70 + 0.50, capped
    assert [p.pid for p in second.processes] == [21, 22]


def test_lost_mig_parent_is_reported_down_once() -> None:
    """A lost MIG GPU is one up=False reading, with its UUID from the earlier read."""
    fake = FakeNvml()
    parent = fake.add_device("GPU-mig")
    fake.add_mig_device(parent, "MIG-0", 1, "1g.10gb", memory_used_bytes=0, memory_total_bytes=1)
    source = NvmlSource(fake)
    assert len(source.read()) == 2
    fake.mark_lost(parent)
    (down,) = source.read()
    assert (down.up, down.uuid) == (False, "GPU-mig")


def test_nvml_init_failure_raises_source_error() -> None:
    """No driver: constructing the source raises SourceError with NVML's reason on one line."""
    fake = FakeNvml()
    fake.driver_loaded = False
    with pytest.raises(SourceError, match=r"^NVML is not available: Driver Not Loaded$"):
        NvmlSource(fake)


def test_device_count_failure_raises_source_error() -> None:
    """nvmlDeviceGetCount failing makes the whole read fail with SourceError."""
    fake = FakeNvml()
    fake.add_device("GPU-a")
    source = NvmlSource(fake)
    fake.count_error = pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(SourceError, match="cannot count GPUs"):
        source.read()


def test_close_shuts_nvml_down_once_and_reads_after_fail() -> None:
    """close() calls nvmlShutdown once; reading after it is a SourceError, not a crash."""
    fake = FakeNvml()
    fake.add_device("GPU-a")
    source = NvmlSource(fake)
    source.close()
    source.close()
    assert fake.shutdowns == 1
    with pytest.raises(SourceError):
        source.read()


def test_pcie_throughput_fallback_integrates_over_injected_clock() -> None:
    """Without PCIe byte fields, KB/s * seconds between reads sums into a monotonic counter."""
    fake = FakeNvml()
    gpu = fake.add_device("GPU-pcie", pcie_tx_kbps=1000, pcie_rx_kbps=500)
    source = NvmlSource(fake, clock=_clock(100.0, 110.0, 115.0, 115.0))
    totals = []
    (r,) = source.read()
    totals.append((r.pcie_tx_bytes_total, r.pcie_rx_bytes_total))
    (r,) = source.read()
    totals.append((r.pcie_tx_bytes_total, r.pcie_rx_bytes_total))
    gpu.pcie_tx_kbps, gpu.pcie_rx_kbps = 0, 2000
    (r,) = source.read()
    totals.append((r.pcie_tx_bytes_total, r.pcie_rx_bytes_total))
    (r,) = source.read()  # no time passed: nothing added
    totals.append((r.pcie_tx_bytes_total, r.pcie_rx_bytes_total))
    assert totals == [
        (0.0, 0.0),
        (1000 * 1024 * 10, 500 * 1024 * 10),
        (1000 * 1024 * 10, 500 * 1024 * 10 + 2000 * 1024 * 5),
        (1000 * 1024 * 10, 500 * 1024 * 10 + 2000 * 1024 * 5),
    ]
    for before, after in itertools.pairwise(totals):
        assert after[0] >= before[0]
        assert after[1] >= before[1]


def test_pcie_byte_fields_are_used_when_supported() -> None:
    """With the PCIE_COUNT_*_BYTES fields the driver's own counters are reported as they are."""
    fake = FakeNvml()
    fake.add_device(
        "GPU-h100", pcie_tx_bytes=123_456, pcie_rx_bytes=654_321, pcie_tx_kbps=9, pcie_rx_kbps=9
    )
    (r,) = NvmlSource(fake, clock=_clock(0.0)).read()
    assert (r.pcie_tx_bytes_total, r.pcie_rx_bytes_total) == (123_456.0, 654_321.0)


@pytest.mark.parametrize("aggregate_scope", [True, False])
def test_nvlink_counters_sum_all_links_in_bytes(aggregate_scope: bool) -> None:
    """NVLink KiB counters cover every link (not link 0 only) and come out in bytes."""
    fake = FakeNvml()
    fake.add_device(
        "GPU-nvl",
        nvlink_tx_kib=[1, 2, 3],
        nvlink_rx_kib=[10, 0, 5],
        nvlink_aggregate_scope=aggregate_scope,
    )
    (r,) = NvmlSource(fake).read()
    assert r.nvlink_tx_bytes_total == 6 * 1024
    assert r.nvlink_rx_bytes_total == 15 * 1024


def test_energy_and_ecc_units() -> None:
    """Energy mJ -> J and volatile ECC counts are taken as they are."""
    fake = FakeNvml()
    fake.add_device("GPU-e", energy_mj=123_456_789, ecc_volatile=(4, 1), ecc_aggregate=(40, 10))
    (r,) = NvmlSource(fake).read()
    assert r.energy_joules_total == pytest.approx(123_456.789)
    assert (r.ecc_corrected_total, r.ecc_uncorrected_total) == (4, 1)

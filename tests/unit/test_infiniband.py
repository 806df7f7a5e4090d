"""The InfiniBand sysfs reader, against real fixture trees and trees built to break it.

The expected values below were read by hand from the fixture files (word counts times 4 for
data counters); see ``tests/fixtures/infiniband-*/PROVENANCE.md`` for where the trees come from.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuscope.agent.devices.infiniband import SysfsIbSource, parse_rate
from gpuscope.agent.devices.sources import IbSource
from gpuscope.core.errors import SourceError
from gpuscope.core.records import IbPortReading
from tests.paths import FIXTURES

DATA = FIXTURES
NODE_EXPORTER = DATA / "infiniband-node-exporter" / "sys"
PROCFS = DATA / "infiniband-procfs" / "sys"

MakeSource = Callable[[Path], SysfsIbSource]


@pytest.fixture
def make_source() -> Iterator[MakeSource]:
    """Builds sources and closes the files they hold open when the test ends."""
    made: list[SysfsIbSource] = []

    def make(root: Path) -> SysfsIbSource:
        source = SysfsIbSource(root)
        made.append(source)
        return source

    yield make
    for source in made:
        source.close()


def _tree(path: Path) -> Path:
    assert (path / "class" / "infiniband").is_dir(), f"fixture tree {path} is missing"
    return path


def _by_port(readings: list[IbPortReading]) -> dict[tuple[str, str], IbPortReading]:
    return {(r.device, r.port): r for r in readings}


def _port(root: Path, device: str, port: str, files: dict[str, str]) -> Path:
    """Writes a port directory under ``root``: ``files`` maps relative paths to contents."""
    port_dir = root / "class" / "infiniband" / device / "ports" / port
    port_dir.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        (port_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (port_dir / rel).write_text(content)
    return port_dir


ACTIVE = {
    "state": "4: ACTIVE\n",
    "phys_state": "5: LinkUp\n",
    "rate": "100 Gb/sec (4X EDR)\n",
    "link_layer": "InfiniBand\n",
}


# --- the node_exporter fixture tree -----------------------------------------------------


def test_node_exporter_tree_ports_and_order(make_source: MakeSource) -> None:
    """Every port of the node_exporter tree is read, sorted by device then port."""
    readings = make_source(_tree(NODE_EXPORTER)).read()
    assert [(r.device, r.port) for r in readings] == [
        ("i40iw0", "1"),
        ("mlx4_0", "1"),
        ("mlx4_0", "2"),
    ]


def test_node_exporter_i40iw_no_pma_gives_no_counter_values(make_source: MakeSource) -> None:
    """i40iw0 (iWARP) has every counter as "N/A (no PMA)": state and rate, but no values."""
    r = _by_port(make_source(_tree(NODE_EXPORTER)).read())["i40iw0", "1"]
    assert (r.link_layer, r.state, r.phys_state, r.up) == ("InfiniBand", "ACTIVE", "LinkUp", True)
    assert r.rate_bytes_per_second == 10e9 / 8  # "10 Gb/sec (4X)"
    assert r.transmit_bytes_total is None
    assert r.receive_bytes_total is None
    assert r.transmit_packets_total is None
    assert r.receive_packets_total is None
    assert r.transmit_wait_total is None
    assert r.errors == ()
    assert r.hw_counters == ()
    assert r.data_counter_saturated is False


def test_node_exporter_mlx4_port1_prefers_64bit_counters(make_source: MakeSource) -> None:
    """mlx4_0 port 1: bytes and packets come from counters_ext/*_64, not counters/."""
    r = _by_port(make_source(_tree(NODE_EXPORTER)).read())["mlx4_0", "1"]
    assert (r.state, r.phys_state, r.up, r.link_layer) == ("ACTIVE", "LinkUp", True, "InfiniBand")
    assert r.rate_bytes_per_second == 5e9  # "40 Gb/sec (4X QDR)"
    assert r.transmit_bytes_total == 3733440 * 4  # counters_ext/port_xmit_data_64
    assert r.receive_bytes_total == 4631917 * 4  # counters_ext/port_rcv_data_64
    # The 64-bit packet counters read 0 although counters/ has 6235865 and 6825908347: a
    # 64-bit file that never counted is unsupported, so the 32-bit values are reported.
    assert r.transmit_packets_total == 6235865
    assert r.receive_packets_total == 6825908347
    # port_xmit_wait is a saturated 32-bit counter; it is reported as it is, and it is not
    # a data counter, so the saturation flag stays down.
    assert r.transmit_wait_total == 4294967295
    assert r.data_counter_saturated is False
    assert r.errors == (
        ("link_error_recovery", 0),
        ("link_downed", 0),
        ("port_rcv_errors", 0),
        ("port_xmit_discards", 5),
        ("port_xmit_constraint_errors", 0),
        ("port_rcv_constraint_errors", 0),
    )
    # No file for these on this port: no value, not zero (port_rcv_discards is not an error
    # counter of the catalogue).
    assert {"symbol_error", "vl15_dropped", "port_rcv_discards"}.isdisjoint(dict(r.errors))
    assert r.hw_counters == ()


def test_node_exporter_mlx4_port2_missing_counters(make_source: MakeSource) -> None:
    """mlx4_0 port 2: counters/port_rcv_data is 0 but the 64-bit file is not; wait is missing."""
    r = _by_port(make_source(_tree(NODE_EXPORTER)).read())["mlx4_0", "2"]
    assert r.up is True
    assert r.rate_bytes_per_second == 5e9
    assert r.transmit_bytes_total == 3733440 * 4
    assert r.receive_bytes_total == 4631917 * 4  # not 0 from counters/port_rcv_data
    # counters_ext/port_xmit_packets_64 reads 0 and there is no 32-bit twin: 0 is the value
    assert r.transmit_packets_total == 0
    assert r.receive_packets_total == 0
    assert r.transmit_wait_total is None  # no counters/port_xmit_wait
    assert dict(r.errors) == {"link_error_recovery": 0, "link_downed": 0}
    assert r.data_counter_saturated is False


# --- the procfs fixture tree ------------------------------------------------------------


def test_procfs_tree_ports_and_order(make_source: MakeSource) -> None:
    """Every port of the procfs tree is read, sorted by device then port."""
    readings = make_source(_tree(PROCFS)).read()
    assert [(r.device, r.port) for r in readings] == [
        ("hfi1_0", "1"),
        ("mlx4_0", "1"),
        ("mlx4_0", "2"),
        ("mlx5_0", "1"),
    ]


ALL_ERRORS_ZERO = {
    name: 0
    for name in (
        "symbol_error",
        "link_error_recovery",
        "link_downed",
        "port_rcv_errors",
        "port_rcv_remote_physical_errors",
        "port_rcv_switch_relay_errors",
        "port_xmit_discards",
        "port_xmit_constraint_errors",
        "port_rcv_constraint_errors",
        "local_link_integrity_errors",
        "excessive_buffer_overrun_errors",
        "vl15_dropped",
    )
}


@pytest.mark.parametrize(
    ("device", "port", "rate", "tx_words", "rx_words", "tx_packets", "rx_packets", "wait"),
    [
        ("hfi1_0", "1", 100, 273558326543, 345091702026, 568318856, 638036947, 0),
        ("mlx4_0", "1", 40, 26509113295, 2221223609, 85734114, 87169372, 3599),
        ("mlx4_0", "2", 40, 26540356890, 2460436784, 88622850, 89332064, 3846),
        ("mlx5_0", "1", 25, 2880761508848, 18126345378, 10907922116, 541889824, 0),
    ],
)
def test_procfs_port_counters(
    make_source: MakeSource,
    device: str,
    port: str,
    rate: int,
    tx_words: int,
    rx_words: int,
    tx_packets: int,
    rx_packets: int,
    wait: int,
) -> None:
    """Each procfs port: bytes are words * 4 from counters/ (64-bit there), packets, wait."""
    r = _by_port(make_source(_tree(PROCFS)).read())[device, port]
    assert (r.state, r.up, r.link_layer) == ("ACTIVE", True, "InfiniBand")
    assert r.rate_bytes_per_second == rate * 1e9 / 8
    assert r.transmit_bytes_total == tx_words * 4
    assert r.receive_bytes_total == rx_words * 4
    assert r.transmit_packets_total == tx_packets
    assert r.receive_packets_total == rx_packets
    assert r.transmit_wait_total == wait
    assert dict(r.errors) == ALL_ERRORS_ZERO
    assert r.data_counter_saturated is False


def test_procfs_values_by_hand(make_source: MakeSource) -> None:
    """A few values spelled out, and the fixture's quirks: padded link_layer, odd phys_state."""
    ports = _by_port(make_source(_tree(PROCFS)).read())
    assert ports["mlx4_0", "1"].receive_bytes_total == 8884894436  # as procfs' own test
    assert ports["mlx5_0", "1"].transmit_bytes_total == 11523046035392
    assert ports["hfi1_0", "1"].rate_bytes_per_second == 12.5e9
    assert ports["mlx5_0", "1"].rate_bytes_per_second == 3.125e9  # "25 Gb/sec (1X EDR)"
    assert ports["mlx4_0", "2"].link_layer == "InfiniBand"  # file is "InfiniBand\n\n"
    assert ports["mlx4_0", "1"].phys_state == "LinkUp"
    assert ports["mlx5_0", "1"].phys_state == "ACTIVE"  # "4: ACTIVE" in the fixture
    assert all(ports[p].hw_counters == () for p in ports if p[0] != "mlx5_0")


def test_procfs_mlx5_hw_counters(make_source: MakeSource) -> None:
    """mlx5_0 port 1: every hw_counters/ file but ``lifespan``, sorted by name."""
    r = _by_port(make_source(_tree(PROCFS)).read())["mlx5_0", "1"]
    assert r.hw_counters == (
        ("duplicate_request", 41),
        ("implied_nak_seq_err", 0),
        ("local_ack_timeout_err", 131),
        ("out_of_buffer", 0),
        ("out_of_sequence", 1),
        ("packet_seq_err", 1),
        ("req_cqe_error", 3481),
        ("req_cqe_flush_error", 80),
        ("req_remote_access_errors", 0),
        ("req_remote_invalid_request", 0),
        ("resp_cqe_error", 8109),
        ("resp_cqe_flush_error", 4708),
        ("resp_local_length_error", 0),
        ("resp_remote_access_errors", 0),
        ("rnr_nak_retry_err", 0),
        ("roce_adp_retrans", 99),
        ("roce_adp_retrans_to", 4),
        ("roce_slow_restart", 0),
        ("roce_slow_restart_cnps", 131),
        ("roce_slow_restart_trans", 0),
        ("rx_atomic_requests", 0),
        ("rx_dct_connect", 0),
        ("rx_read_requests", 175528982),
        ("rx_write_requests", 742114),
    )


def test_fixture_trees_read_the_same_twice(make_source: MakeSource) -> None:
    """A second read (files held open, listings cached) gives the same readings."""
    for tree in (NODE_EXPORTER, PROCFS):
        source = make_source(_tree(tree))
        assert source.read() == source.read()


# --- built trees: widths, saturation, units ---------------------------------------------


def test_saturated_32bit_data_counter_is_flagged(make_source: MakeSource, tmp_path: Path) -> None:
    """A counters/ data counter at 0xFFFFFFFF with no 64-bit twin is reported and flagged."""
    _port(tmp_path, "mlx4_0", "1", {**ACTIVE, "counters/port_xmit_data": "4294967295\n"})
    _port(tmp_path, "mlx4_0", "2", {**ACTIVE, "counters/port_rcv_data": "4294967295\n"})
    _port(tmp_path, "mlx4_0", "3", {**ACTIVE, "counters/port_rcv_data": "4294967294\n"})
    _port(tmp_path, "mlx5_0", "1", {**ACTIVE, "counters/port_xmit_data": "4294967296\n"})
    ports = _by_port(make_source(tmp_path).read())
    assert ports["mlx4_0", "1"].transmit_bytes_total == 4294967295 * 4
    assert ports["mlx4_0", "1"].data_counter_saturated is True
    assert ports["mlx4_0", "2"].receive_bytes_total == 4294967295 * 4
    assert ports["mlx4_0", "2"].data_counter_saturated is True
    assert ports["mlx4_0", "3"].data_counter_saturated is False
    # Above 2**32-1: the kernel gives a 64-bit value in counters/ (mlx5), never saturated.
    assert ports["mlx5_0", "1"].transmit_bytes_total == 4294967296 * 4
    assert ports["mlx5_0", "1"].data_counter_saturated is False


def test_64bit_counters_preferred_over_32bit(make_source: MakeSource, tmp_path: Path) -> None:
    """counters_ext/*_64 wins over a saturated counters/ twin, and the flag stays down."""
    _port(
        tmp_path,
        "mlx4_0",
        "1",
        {
            **ACTIVE,
            "counters/port_xmit_data": "4294967295\n",
            "counters/port_rcv_data": "4294967295\n",
            "counters/port_xmit_packets": "4294967295\n",
            "counters/port_rcv_packets": "7\n",
            "counters_ext/port_xmit_data_64": "5000000000\n",
            "counters_ext/port_rcv_data_64": "6000000000\n",
            "counters_ext/port_xmit_packets_64": "70000000000\n",
            "counters_ext/port_rcv_packets_64": "80000000000\n",
        },
    )
    (r,) = make_source(tmp_path).read()
    assert r.transmit_bytes_total == 5000000000 * 4
    assert r.receive_bytes_total == 6000000000 * 4
    assert r.transmit_packets_total == 70000000000
    assert r.receive_packets_total == 80000000000
    assert r.data_counter_saturated is False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("40 Gb/sec (4X QDR)", 5e9),
        ("100 Gb/sec (4X EDR)", 12.5e9),
        ("10 Gb/sec", 1.25e9),
        ("2.5 Gb/sec (1X SDR)", 312.5e6),
        ("400 Gb/sec (4X NDR)", 50e9),
        ("", None),
        ("N/A", None),
        ("fast Gb/sec", None),
        ("40 Mb/s", None),
    ],
)
def test_parse_rate(text: str, expected: float | None) -> None:
    """The rate file is Gb/s (decimals too) turned into bytes/s; anything else is no value."""
    assert parse_rate(text) == expected


def test_state_down_and_missing_state(make_source: MakeSource, tmp_path: Path) -> None:
    """Only ACTIVE is up; a port without a state file has no up value at all."""
    _port(tmp_path, "mlx5_0", "1", {"state": "1: DOWN\n", "phys_state": "3: Disabled\n"})
    _port(tmp_path, "mlx5_0", "2", {"rate": "10 Gb/sec\n"})
    ports = _by_port(make_source(tmp_path).read())
    assert (ports["mlx5_0", "1"].state, ports["mlx5_0", "1"].up) == ("DOWN", False)
    assert ports["mlx5_0", "1"].phys_state == "Disabled"
    assert (ports["mlx5_0", "2"].state, ports["mlx5_0", "2"].up) == ("", None)
    assert ports["mlx5_0", "2"].rate_bytes_per_second == 1.25e9


def test_ports_sorted_numerically(make_source: MakeSource, tmp_path: Path) -> None:
    """Ports sort by number (2 before 10) within devices sorted by name."""
    for device, port in [("mlx5_1", "1"), ("mlx5_0", "10"), ("mlx5_0", "2"), ("mlx5_0", "1")]:
        _port(tmp_path, device, port, ACTIVE)
    readings = make_source(tmp_path).read()
    assert [(r.device, r.port) for r in readings] == [
        ("mlx5_0", "1"),
        ("mlx5_0", "2"),
        ("mlx5_0", "10"),
        ("mlx5_1", "1"),
    ]


# --- built trees: what must not raise ---------------------------------------------------


def test_unreadable_and_non_numeric_files_are_omitted(
    make_source: MakeSource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """EISDIR, EACCES, EINVAL, "N/A (no PMA)" and empty files give no value and no error."""
    port_dir = _port(
        tmp_path,
        "mlx5_0",
        "1",
        {
            **ACTIVE,
            "counters/port_xmit_data": "100\n",
            "counters/port_rcv_data": "N/A (no PMA)\n",
            "counters/link_downed": "\n",
            "counters/port_rcv_errors": "",
            "counters/port_xmit_packets": "secret\n",  # made unreadable below
            "counters/port_rcv_packets": "9\n",  # read fails with EINVAL below
            "counters/port_xmit_wait": "3\n",
            "hw_counters/out_of_buffer": "5\n",
            "hw_counters/bogus": "n/a\n",
            "hw_counters/lifespan": "10\n",
        },
    )
    (port_dir / "counters" / "symbol_error").mkdir()  # a directory where a file belongs
    denied = str(port_dir / "counters" / "port_xmit_packets")
    einval = str(port_dir / "counters" / "port_rcv_packets")
    real_open, real_pread = os.open, os.pread

    def fake_open(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if path == denied:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    def fake_pread(fd: int, size: int, offset: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}") == einval:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "pread", fake_pread)
    with caplog.at_level(logging.DEBUG, logger="gpuscope.agent.devices.infiniband"):
        source = make_source(tmp_path)
        (r,) = source.read()
    assert r.transmit_bytes_total == 400
    assert r.receive_bytes_total is None
    assert r.transmit_packets_total is None
    assert r.receive_packets_total is None
    assert r.transmit_wait_total == 3
    assert r.errors == ()
    assert r.hw_counters == (("out_of_buffer", 5),)
    assert r.up is True
    # counted on the port (issue 38: they used to vanish silently): the directory where a
    # file belongs, the denied file and the one whose read fails
    assert r.unreadable == (("unreadable", 3),)
    assert ("infiniband", "unreadable", 3) in source.errors.items()
    logged = "\n".join(caplog.messages)
    assert f"path={denied} error=Permission denied reason=unreadable" in logged
    assert f"path={einval} error=Invalid argument reason=unreadable" in logged


def test_missing_class_infiniband_returns_empty(make_source: MakeSource, tmp_path: Path) -> None:
    """A node without IB (no class/infiniband, or no sysfs root at all) has no readings."""
    (tmp_path / "class" / "net").mkdir(parents=True)
    assert make_source(tmp_path).read() == []
    assert make_source(tmp_path / "nowhere").read() == []


def test_unlistable_class_dir_raises_source_error(
    make_source: MakeSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """class/infiniband that exists but cannot be listed makes the source down (SourceError)."""
    class_dir = str(tmp_path / "class" / "infiniband")
    _port(tmp_path, "mlx5_0", "1", ACTIVE)
    real_scandir = os.scandir

    def fake_scandir(path: str) -> Any:
        if path == class_dir:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", fake_scandir)
    with pytest.raises(SourceError, match="Permission denied"):
        make_source(tmp_path).read()


def test_dangling_device_and_port_links_are_skipped(
    make_source: MakeSource, tmp_path: Path
) -> None:
    """A device or port whose sysfs link points at nothing (removed) is skipped silently."""
    _port(tmp_path, "mlx5_0", "1", {**ACTIVE, "counters/port_xmit_data": "1\n"})
    class_dir = tmp_path / "class" / "infiniband"
    (class_dir / "mlx5_1").symlink_to(tmp_path / "devices" / "gone")
    (class_dir / "mlx5_0" / "ports" / "2").symlink_to(tmp_path / "devices" / "gone-port")
    readings = make_source(tmp_path).read()
    assert [(r.device, r.port, r.transmit_bytes_total) for r in readings] == [("mlx5_0", "1", 4)]


@pytest.mark.parametrize("listed", ["ports", "port", "2/counters", "2/hw_counters"])
def test_port_removed_while_being_read_is_skipped(
    make_source: MakeSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listed: str
) -> None:
    """A port removed right after ports/, the port or a counter directory was listed is skipped.

    Each read is from a fresh source (nothing cached), so the directory listing and the
    reads that follow it really race with the removal.
    """
    _port(tmp_path, "mlx5_0", "1", {**ACTIVE, "counters/port_xmit_data": "1\n"})
    victim = _port(
        tmp_path,
        "mlx5_0",
        "2",
        {**ACTIVE, "counters/port_xmit_data": "2\n", "hw_counters/out_of_buffer": "3\n"},
    )
    trigger = str({"ports": victim.parent, "port": victim}.get(listed, victim.parent / listed))
    real_scandir = os.scandir

    class ListThenRemove:
        """Lists a directory in full, then removes the victim port if it was the trigger."""

        def __init__(self, path: str | int) -> None:
            with real_scandir(path) as it:  # (shutil.rmtree lists by file descriptor)
                self.entries = list(it)
            if isinstance(path, str) and os.path.normpath(path) == os.path.normpath(trigger):
                shutil.rmtree(victim)

        def __enter__(self) -> Iterator[os.DirEntry[Any]]:
            return iter(self.entries)

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(os, "scandir", ListThenRemove)
    readings = make_source(tmp_path).read()
    assert [(r.device, r.port) for r in readings] == [("mlx5_0", "1")]
    assert not victim.exists()


# --- built trees: files held open between scrapes ---------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_second_read_sees_new_values_and_releases_gone_ports(
    make_source: MakeSource, tmp_path: Path
) -> None:
    """Held-open files are re-read from offset 0; a removed port's files are closed."""
    _port(tmp_path, "mlx5_0", "1", {**ACTIVE, "counters/port_xmit_data": "1\n"})
    gone = _port(tmp_path, "mlx5_0", "2", {**ACTIVE, "counters/port_xmit_data": "2\n"})
    before = _open_fds()
    source = make_source(tmp_path)
    source.read()
    held = _open_fds() - before
    assert held == 10  # 2 ports x (4 attributes + 1 counter)
    (tmp_path / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data").write_text("12345\n")
    (tmp_path / "class/infiniband/mlx5_0/ports/1/state").write_text("1: DOWN\n")
    shutil.rmtree(gone)
    (r,) = source.read()
    assert (r.port, r.transmit_bytes_total, r.up) == ("1", 12345 * 4, False)
    assert _open_fds() - before == 5
    source.close()
    assert _open_fds() == before


def test_vanished_file_of_cached_listing_relists(
    make_source: MakeSource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A held file that fails (ENODEV, as sysfs does once removed) and is gone is dropped.

    The cached listing of its directory is replaced by a fresh one, so the gone file is not
    looked for (and logged) again.
    """
    port_dir = _port(
        tmp_path,
        "mlx5_0",
        "1",
        {**ACTIVE, "counters/port_xmit_data": "1\n", "counters/port_xmit_wait": "7\n"},
    )
    source = make_source(tmp_path)
    assert source.read()[0].transmit_wait_total == 7
    (port_dir / "counters" / "port_xmit_wait").unlink()
    real_pread = os.pread

    def sysfs_pread(fd: int, size: int, offset: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(" (deleted)"):
            raise OSError(errno.ENODEV, "No such device")
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", sysfs_pread)
    with caplog.at_level(logging.DEBUG, logger="gpuscope.agent.devices.infiniband"):
        (r,) = source.read()
    assert r.transmit_wait_total is None
    assert r.transmit_bytes_total == 4
    assert not [m for m in caplog.messages if "port_xmit_wait" in m]
    assert source.read() == [r]


def test_satisfies_ib_source_protocol(tmp_path: Path) -> None:
    """SysfsIbSource is an IbSource named "infiniband" by default."""
    source: IbSource = SysfsIbSource(tmp_path)
    assert source.name == "infiniband"
    assert SysfsIbSource(tmp_path, name="ib").name == "ib"


def test_dead_64bit_counter_falls_back_but_live_one_wins(tmp_path: Path) -> None:
    """A 64-bit file stuck at 0 beside a counting 32-bit one is ignored; a counting one wins."""
    from gpuscope.agent.devices.infiniband import SysfsIbSource

    port = tmp_path / "class" / "infiniband" / "mlx4_9" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "counters_ext").mkdir()
    (port / "counters" / "port_xmit_packets").write_text("500\n")
    (port / "counters_ext" / "port_xmit_packets_64").write_text("0\n")
    (port / "counters" / "port_rcv_packets").write_text("4294967295\n")
    (port / "counters_ext" / "port_rcv_packets_64").write_text("9000000000\n")
    (r,) = SysfsIbSource(tmp_path).read()
    assert r.transmit_packets_total == 500
    assert r.receive_packets_total == 9000000000

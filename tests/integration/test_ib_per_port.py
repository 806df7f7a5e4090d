"""The InfiniBand source degrades per port, never as a whole (issue 38).

Seen: a port counter file whose read never returns left ``/metrics`` answering, but with
``gpuscope_agent_source_up{source="infiniband"} 0`` and no ``gpuscope_ib_*`` series for
any of the node's ports; a FIFO (or any unreadable file) dropped its series silently, with
the port still ``up 1`` and no reason counted. On a copy of node_exporter's IB tree
(mlx4_0 ports 1 and 2, i40iw0 port 1), served by the agent's real HTTP server.

The hung read is a real blocked read: the file's read waits on an event until the test
lets it return (a FIFO opened without waiting for a writer fails its read at once, so it
is the unreadable case, not the hung one).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from gpuscope.agent.devices.infiniband import SysfsIbSource
from gpuscope.agent.serving.exposition import AgentCollector
from tests.integration.test_agent_bad_values import (  # noqa: F401  (fixture)
    _ib,
    errors,
    port_value,
    scrape,
    serving,
    tree,
)

pytestmark = pytest.mark.integration
PORTS = [("i40iw0", "1"), ("mlx4_0", "1"), ("mlx4_0", "2")]


def _source_up(got: dict[str, list[tuple[dict[str, str], float]]]) -> float | None:
    ups = [v for lbl, v in got["gpuscope_agent_source_up"] if lbl["source"] == "infiniband"]
    return ups[0] if ups else None


def _ports(got: dict[str, list[tuple[dict[str, str], float]]]) -> list[tuple[str, str]]:
    return sorted((lbl["device"], lbl["port"]) for lbl, _ in got.get("gpuscope_ib_port_info", []))


def test_a_fifo_counter_is_counted_on_its_port_and_the_rest_goes_out(
    tree: Path,  # noqa: F811
) -> None:
    fifo = _ib(tree) / "mlx4_0" / "ports" / "1" / "counters" / "port_xmit_data"
    fifo.unlink()
    os.mkfifo(fifo)
    with serving(AgentCollector("n1", None, SysfsIbSource(tree))) as url:
        got = scrape(url)
    assert _source_up(got) == 1.0
    assert _ports(got) == PORTS
    unreadable = "gpuscope_ib_port_unreadable_files"
    assert port_value(got, unreadable, "mlx4_0", "1", reason="unreadable") == 1.0
    assert port_value(got, unreadable, "mlx4_0", "2", reason="unreadable") is None
    assert errors(got)[("infiniband", "unreadable")] == 1.0
    # the FIFO's counter has no value (never 0); the port's other counters go out
    assert port_value(got, "gpuscope_ib_receive_bytes_total", "mlx4_0", "1") is not None
    assert port_value(got, "gpuscope_ib_transmit_packets_total", "mlx4_0", "1") is not None


def test_a_read_that_never_returns_blanks_only_its_port(
    tree: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hung = str(_ib(tree) / "mlx4_0" / "ports" / "1" / "counters" / "port_rcv_data")
    release = threading.Event()
    real_pread = os.pread

    def pread(fd: int, size: int, offset: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}") == hung:
            release.wait(120)  # a read stuck in the kernel, until the test lets it go
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread)
    collector = AgentCollector("n1", None, SysfsIbSource(tree), timeout_seconds=2.0)
    try:
        with serving(collector) as url:
            first = scrape(url)
            again = scrape(url)  # the read still hangs: the port is skipped at once
            release.set()
            for _ in range(50):  # the hung read returns; the port comes back
                after = scrape(url)
                if _ports(after) == PORTS:
                    break
    finally:
        release.set()
    unreadable = "gpuscope_ib_port_unreadable_files"
    for got in (first, again):
        assert _source_up(got) == 1.0
        assert _ports(got) == [("i40iw0", "1"), ("mlx4_0", "2")]  # the others go out
        assert port_value(got, "gpuscope_ib_transmit_bytes_total", "mlx4_0", "2") is not None
        assert port_value(got, unreadable, "mlx4_0", "1", reason="stuck") == 1.0
        # nothing else of the stuck port: no zeros, no state
        assert port_value(got, "gpuscope_ib_port_up", "mlx4_0", "1") is None
        assert port_value(got, "gpuscope_ib_receive_bytes_total", "mlx4_0", "1") is None
    assert errors(again)[("infiniband", "read_stuck")] == 2.0
    assert _ports(after) == PORTS
    assert port_value(after, unreadable, "mlx4_0", "1", reason="stuck") is None
    assert port_value(after, "gpuscope_ib_receive_bytes_total", "mlx4_0", "1") is not None

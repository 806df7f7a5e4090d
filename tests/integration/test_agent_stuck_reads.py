"""The agent beside sysfs files that never answer, and counters that are garbage (issue 25).

Seen: with a sysfs read stuck (a FIFO, a hung driver file) the agent logged "stopping" on
SIGTERM and kept running for minutes; one garbage 32-bit counter beside a dead 64-bit twin
was exported as 0 (the collector then booked a 6.8e9 jump at the next good scrape);
non-integer counter values were skipped without being counted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from gpuscope.agent.devices.infiniband import SysfsIbSource
from gpuscope.agent.serving.exposition import AgentCollector
from tests import loopback
from tests.conftest import free_port
from tests.integration.test_agent_bad_values import (  # noqa: F401  (fixture)
    _ib,
    _poison,
    errors,
    port_value,
    scrape,
    serving,
    tree,
)

pytestmark = pytest.mark.integration


def test_a_garbage_32bit_counter_beside_a_dead_64bit_twin_gives_no_value(
    tree: Path,  # noqa: F811
) -> None:
    with serving(AgentCollector("n1", None, SysfsIbSource(tree))) as url:
        _poison(tree, "mlx4_0/ports/1/counters_ext/port_xmit_data_64", "0\n")
        _poison(tree, "mlx4_0/ports/1/counters/port_xmit_data", "0x1f!garbage\n")
        got = scrape(url)
        assert port_value(got, "gpuscope_ib_transmit_bytes_total", "mlx4_0", "1") is None
        assert errors(got) == {
            ("infiniband", "not_an_integer"): 1.0,
            ("infiniband", "dead_64bit"): 1.0,
        }


def test_a_non_integer_counter_is_skipped_and_counted(tree: Path) -> None:  # noqa: F811
    with serving(AgentCollector("n1", None, SysfsIbSource(tree))) as url:
        _poison(tree, "mlx4_0/ports/1/counters/link_downed", "twelve\n")
        got = scrape(url)
        assert errors(got) == {("infiniband", "not_an_integer"): 1.0}
        assert errors(scrape(url)) == {("infiniband", "not_an_integer"): 2.0}


def test_a_read_that_never_returns_does_not_hold_the_page_or_the_close() -> None:
    """A source stuck in the kernel: the scrape answers at its deadline with the source
    down, and closing the collector does not wait for the stuck read."""
    release = threading.Event()

    class Stuck:
        name = "infiniband"

        def read(self) -> list[object]:
            release.wait()
            return []

    collector = AgentCollector("n1", None, Stuck(), timeout_seconds=0.2)  # type: ignore[arg-type]
    try:
        collector.render()
        [result] = collector.last_results
        assert (result.ok, result.error) == (False, "timeout")
        collector.render()  # the stuck read still holds: no second thread piles up
        assert collector.last_results[0].error == "previous read still running"
        stuck = [t for t in threading.enumerate() if t.name == "src-infiniband"]
        assert stuck and all(t.daemon for t in stuck)  # never joined at exit
        collector.close()
    finally:
        release.set()


def test_sigterm_stops_the_agent_with_a_fifo_in_its_sysfs_tree(tree: Path) -> None:  # noqa: F811
    """The FIFO is opened without waiting for a writer and skipped; SIGTERM ends the
    agent (the 60 s limit is a hang detector, not a timing)."""
    rate = _ib(tree) / "mlx4_0" / "ports" / "1" / "counters" / "port_rcv_data"
    rate.unlink()
    os.mkfifo(rate)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCOPE_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuscope.cli.main", "agent", "--gpu-source", "sim",
         "--sysfs-root", str(tree), "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        for _ in range(600):
            try:
                r = loopback.get(f"http://127.0.0.1:{port}/metrics", timeout=30)
                break
            except httpx.TransportError:
                if proc.poll() is not None:
                    raise AssertionError(proc.stderr.read() if proc.stderr else "") from None
                threading.Event().wait(0.1)
        assert r.status_code == 200
        assert "gpuscope_ib_port_info{" in r.text  # the port still goes out
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

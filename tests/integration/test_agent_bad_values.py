"""The agent's page never fails whole: copies of the reference sysfs trees with one poisoned
file, served by the agent's real HTTP server. The bad device or counter is left out and
counted in ``gpuscope_agent_errors_total``; everything else still goes out, and /healthz
tells the truth."""

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from gpuscope.agent.devices.infiniband import SysfsIbSource
from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.agent.serving.server import AgentHttpServer
from tests import loopback

pytestmark = pytest.mark.integration
Samples = dict[str, list[tuple[dict[str, str], float]]]


@pytest.fixture
def tree(fixtures_dir: Path, tmp_path: Path) -> Path:
    """A private copy of node_exporter's IB tree (mlx4_0 with counters_ext, i40iw0)."""
    root = tmp_path / "sys"
    shutil.copytree(fixtures_dir / "infiniband-node-exporter" / "sys", root)
    return root


def _ib(root: Path) -> Path:
    return root / "class" / "infiniband"


def _poison(root: Path, rel: str, content: str) -> None:
    (_ib(root) / rel).write_text(content)


@contextmanager
def serving(collector: AgentCollector, registry: CollectorRegistry | None = None) -> Iterator[str]:
    """The agent's HTTP server on a loopback port, as `gpuscope agent --listen` runs it
    (with a registry: serving what that registry collects instead)."""
    server = AgentHttpServer(("127.0.0.1", 0), registry, collector)
    server.start_in_thread()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        collector.close()


def scrape(url: str) -> Samples:
    r = loopback.get(f"{url}/metrics", timeout=10)
    assert r.status_code == 200, r.text
    out: Samples = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def port_value(got: Samples, name: str, device: str, port: str, **extra: str) -> float | None:
    want = {"device": device, "port": port, **extra}
    values = [v for lbl, v in got.get(name, []) if want.items() <= lbl.items()]
    assert len(values) <= 1
    return values[0] if values else None


def errors(got: Samples) -> dict[tuple[str, str], float]:
    return {
        (lbl["source"], lbl["reason"]): v for lbl, v in got.get("gpuscope_agent_errors_total", [])
    }


def healthy(url: str) -> bool:
    r = loopback.get(f"{url}/healthz", timeout=10)
    return r.status_code == 200 and r.json()["status"] == "ok"


@pytest.mark.parametrize(
    ("rel", "content", "metric", "reason"),
    [
        # 400 digits: float() of it raised OverflowError and the whole page was a 500
        ("mlx4_0/ports/1/counters/port_xmit_wait", "9" * 400 + "\n",
         "gpuscope_ib_transmit_wait_total", "out_of_range"),
        ("mlx4_0/ports/1/counters/link_downed", f"{2**64}\n", "gpuscope_ib_errors_total",
         "out_of_range"),
        ("mlx4_0/ports/1/counters/link_downed", "-3\n", "gpuscope_ib_errors_total", "negative"),
        ("mlx4_0/ports/1/rate", "nan Gb/sec (4X QDR)\n",
         "gpuscope_ib_port_rate_bytes_per_second", "not_finite"),
        ("mlx4_0/ports/1/rate", "inf Gb/sec (4X QDR)\n",
         "gpuscope_ib_port_rate_bytes_per_second", "not_finite"),
        ("mlx4_0/ports/1/rate", "-inf Gb/sec (4X QDR)\n",
         "gpuscope_ib_port_rate_bytes_per_second", "not_finite"),
        # the 64-bit twin reads 0 (dead on this firmware) beside a saturated 32-bit counter
        ("mlx4_0/ports/1/counters/port_xmit_packets", "4294967295\n",
         "gpuscope_ib_transmit_packets_total", "saturated_32bit"),
    ],
)  # fmt: skip
def test_one_bad_counter_is_left_out_and_counted(
    tree: Path, rel: str, content: str, metric: str, reason: str
) -> None:
    with serving(AgentCollector("n1", None, SysfsIbSource(tree))) as url:
        clean = scrape(url)
        extra = {"type": "link_downed"} if metric == "gpuscope_ib_errors_total" else {}
        assert port_value(clean, metric, "mlx4_0", "1", **extra) is not None
        assert errors(clean) == {}
        _poison(tree, rel, content)
        got = scrape(url)
        assert port_value(got, metric, "mlx4_0", "1", **extra) is None
        # the rest of the port and the other ports still go out
        assert port_value(got, "gpuscope_ib_receive_bytes_total", "mlx4_0", "1") == 4631917 * 4
        errs = "gpuscope_ib_errors_total"
        assert port_value(got, errs, "mlx4_0", "1", type="link_error_recovery") is not None
        assert port_value(got, "gpuscope_ib_port_up", "mlx4_0", "2") is not None
        assert errors(got) == {("infiniband", reason): 1.0}
        assert errors(scrape(url)) == {("infiniband", reason): 2.0}  # once a scrape
        assert healthy(url)


def test_saturated_32bit_data_counter_beside_dead_64bit_is_not_exported(tree: Path) -> None:
    """Exporting the stuck 32-bit value would make a jump of 16 GiB from the 64-bit one."""
    with serving(AgentCollector("n1", None, SysfsIbSource(tree))) as url:
        before = port_value(scrape(url), "gpuscope_ib_transmit_bytes_total", "mlx4_0", "1")
        assert before == 3733440 * 4  # from port_xmit_data_64
        _poison(tree, "mlx4_0/ports/1/counters_ext/port_xmit_data_64", "0\n")
        _poison(tree, "mlx4_0/ports/1/counters/port_xmit_data", "4294967295\n")
        got = scrape(url)
        assert port_value(got, "gpuscope_ib_transmit_bytes_total", "mlx4_0", "1") is None
        assert port_value(got, "gpuscope_ib_port_data_saturated", "mlx4_0", "1") == 1.0
        assert errors(got) == {("infiniband", "saturated_32bit"): 1.0}


def test_device_name_that_is_not_utf8_is_skipped(tree: Path) -> None:
    """A device directory named with a byte that is not UTF-8: it failed the whole page."""
    os.rename(os.fsencode(_ib(tree) / "i40iw0"), os.fsencode(_ib(tree)) + b"/i40iw\xff")
    with serving(AgentCollector("n1", None, SysfsIbSource(tree))) as url:
        got = scrape(url)
        devices = {lbl["device"] for lbl, _ in got["gpuscope_ib_port_info"]}
        assert devices == {"mlx4_0"}
        assert errors(got) == {("infiniband", "name_not_utf8"): 1.0}
        assert healthy(url)


def test_port_name_that_is_not_utf8_is_skipped(tree: Path) -> None:
    ports = os.fsencode(_ib(tree) / "mlx4_0" / "ports")
    os.rename(ports + b"/2", ports + b"/2\xfe")
    with serving(AgentCollector("n1", None, SysfsIbSource(tree))) as url:
        got = scrape(url)
        assert {(lbl["device"], lbl["port"]) for lbl, _ in got["gpuscope_ib_port_info"]} == {
            ("mlx4_0", "1"),
            ("i40iw0", "1"),
        }
        assert errors(got) == {("infiniband", "name_not_utf8"): 1.0}


def test_healthz_is_not_ok_while_the_page_fails() -> None:
    """If exposition fails all the same (a broken collector), /healthz answers 503 with the
    error until a page goes out again."""

    class Broken(Collector):
        def __init__(self) -> None:
            self.broken = True

        def collect(self):  # type: ignore[no-untyped-def]
            if self.broken:
                raise RuntimeError("boom")
            return iter(())

    agent = AgentCollector("n1", None, None)
    broken = Broken()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(agent)
    registry.register(broken)
    with serving(agent, registry) as url:
        assert healthy(url)
        assert loopback.get(f"{url}/metrics", timeout=10).status_code == 500
        r = loopback.get(f"{url}/healthz", timeout=10)
        assert r.status_code == 503 and "boom" in r.json()["error"]
        broken.broken = False
        scrape(url)
        assert healthy(url)

"""The scraper against real agents and against targets that misbehave, all on loopback."""

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from gpuscope.collector.scraping.outcome import Target
from gpuscope.collector.scraping.scrape import Scraper
from tests.integration.helpers import agent_process, http_server, send

pytestmark = pytest.mark.integration
TEXT = "text/plain; version=0.0.4; charset=utf-8"


@pytest.fixture(scope="module")
def agents() -> Iterator[list[str]]:
    with agent_process("gpu-node-08") as a, agent_process("gpu-node-30") as b:
        yield [a, b]


def test_agents_are_scraped_concurrently_into_batches(agents: list[str]) -> None:
    """Both agents up, each batch holds that node's catalogue series with counter types."""
    outcomes = Scraper(timeout_seconds=10).scrape([Target(u) for u in agents])
    assert [o.up for o in outcomes] == [True, True]
    for outcome, node in zip(outcomes, ["gpu-node-08", "gpu-node-30"], strict=True):
        batch = outcome.batch
        assert batch is not None
        assert len(batch) > 250
        nodes = {
            dict(lbl).get("node")
            for n, lbl in zip(batch.names, batch.labels, strict=True)
            if n.startswith("gpuscope_")
        }
        assert nodes == {node}
        assert batch.types["gpuscope_gpu_energy_joules"] == "counter"
        assert "gpuscope_gpu_utilization_ratio" in batch.names
        assert all(lbl == tuple(sorted(lbl)) for lbl in batch.labels)


def test_html_hang_and_garbage_are_down_while_others_go_on(agents: list[str]) -> None:
    """An HTML page, a target that hangs past the timeout and garbage: down, with reasons."""
    release = threading.Event()

    def html(h: BaseHTTPRequestHandler) -> None:
        send(h, b"<html><body>login</body></html>", "text/html")

    def html_as_text(h: BaseHTTPRequestHandler) -> None:
        send(h, b"<!DOCTYPE html><html></html>", "text/plain")

    def hang(h: BaseHTTPRequestHandler) -> None:
        release.wait(120)

    def garbage(h: BaseHTTPRequestHandler) -> None:
        send(h, b"\x00\x01 this is not { an exposition\n", TEXT)

    with (
        http_server(html) as u_html,
        http_server(html_as_text) as u_html2,
        http_server(hang) as u_hang,
        http_server(garbage) as u_garbage,
    ):
        t0 = time.monotonic()
        # 3 s: room for the agent's page on a loaded machine; the hang lasts 120 s
        outcomes = Scraper(timeout_seconds=3.0).scrape(
            [Target(agents[0]), Target(u_html), Target(u_html2), Target(u_hang), Target(u_garbage)]
        )
        took = time.monotonic() - t0
        release.set()
    up = {o.target.url: o for o in outcomes}
    assert up[agents[0]].up
    assert not up[u_html].up and "text/html" in up[u_html].error
    assert not up[u_html2].up and "HTML" in up[u_html2].error
    assert not up[u_hang].up and "timeout" in up[u_hang].error
    assert not up[u_garbage].up and up[u_garbage].error.startswith("no samples")
    assert all(o.batch is None for o in outcomes if not o.up)
    assert took < 60  # the hang cost its timeout (3 s), not its 120 s


def test_bad_lines_are_counted_and_a_page_over_the_sample_limit_fails_whole() -> None:
    """A 10 kB label value is dropped and counted; a page over the sample limit fails its
    scrape with the reason (as Prometheus's sample_limit: no random first-N subset)."""
    good = "".join(f'm_ratio{{i="{i}"}} 0.5\n' for i in range(50))
    huge = 'm_ratio{i="' + "x" * 10_000 + '"} 1\n'
    body = ("# TYPE m_ratio gauge\n" + good + huge + "not a line at all {\n").encode()

    def page(h: BaseHTTPRequestHandler) -> None:
        send(h, body, TEXT)

    with http_server(page) as url:
        (ok,) = Scraper().scrape([Target(url)])
        (cut,) = Scraper(max_series=10).scrape([Target(url)])
    assert ok.up and ok.samples == 50 and ok.parse_errors == 2
    assert "malformed" in ok.error
    assert not cut.up and cut.batch is None and cut.reason == "sample_limit"
    assert "sample_limit exceeded: more than 10 samples" in cut.error


def test_page_over_the_size_cap_is_refused() -> None:
    """A page larger than max_body_bytes is down, not half ingested."""
    body = b"m_ratio 1\n" * 50_000

    def page(h: BaseHTTPRequestHandler) -> None:
        send(h, body, TEXT)

    with http_server(page) as url:
        (o,) = Scraper(max_body_bytes=100_000).scrape([Target(url)])
    assert not o.up and "larger than" in o.error and o.batch is None
    assert o.reason == "body_size_limit"


def test_dcgm_exporter_page_is_translated_into_the_catalogue(fixtures_dir: Path) -> None:
    """The recorded dcgm-exporter page becomes catalogue series per host, pods attributed."""
    body = (fixtures_dir / "dcgm-exporter-sample" / "dcgm-exporter-metrics.txt").read_bytes()

    def page(h: BaseHTTPRequestHandler) -> None:
        send(h, body, TEXT)

    with http_server(page) as url:
        (o,) = Scraper().scrape([Target(url, kind="dcgm-exporter", node="fallback-node")])
    assert o.up and o.batch is not None
    rows = [
        (n, dict(lbl), v)
        for n, lbl, v in zip(o.batch.names, o.batch.labels, o.batch.values, strict=True)
    ]
    names = {n for n, _, _ in rows}
    assert {
        "gpuscope_gpu_utilization_ratio",
        "gpuscope_gpu_memory_used_bytes",
        "gpuscope_gpu_power_watts",
        "gpuscope_gpu_info",
    } <= names
    assert not any(n.startswith("DCGM_") for n in names)
    assert all(set(lbl) >= {"node", "gpu", "uuid"} for _, lbl, _ in rows)
    workloads = [lbl for n, lbl, _ in rows if n == "gpuscope_gpu_workload_info"]
    assert {(w["namespace"], w["pod"], w["container"]) for w in workloads} == {
        ("ray-llm", "ray-1111111", "ray-worker")
    }
    assert o.batch.types["gpuscope_gpu_energy_joules"] == "counter"


def test_a_scrape_whose_parse_ends_past_the_timeout_is_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The page arrived in time but its parse (a starved CPU, here a parse made to take
    0.6 s) ended past the 0.3 s timeout: a failure with reason timeout, nothing stored.
    Before, such a scrape counted as a success however long it took."""
    import gpuscope.collector.scraping.scrape as scrape_module

    body = b"# TYPE m_ratio gauge\nm_ratio 0.5\n"
    real = scrape_module.page_to_outcome

    def slow(*args: object, **kwargs: object) -> object:
        time.sleep(0.6)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    def page(h: BaseHTTPRequestHandler) -> None:
        send(h, body, TEXT)

    with http_server(page) as url:
        (fast,) = Scraper(timeout_seconds=30).scrape([Target(url)])
        monkeypatch.setattr(scrape_module, "page_to_outcome", slow)
        (late,) = Scraper(timeout_seconds=0.3).scrape([Target(url)])
    assert fast.up and fast.samples == 1
    assert not late.up and late.reason == "timeout" and late.batch is None
    assert "past its 0.3s timeout" in late.error

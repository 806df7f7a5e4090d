"""The agent's /metrics honours ``Accept-Encoding: gzip`` as Prometheus sends it: the page is
compressed, says so, and inflates to the page an identity request gets; a scraper that
does not ask (or refuses gzip with q=0) gets plain text."""

from __future__ import annotations

import gzip
import http.client
import shutil
from pathlib import Path

import pytest

from gpuscope.agent.devices.infiniband import SysfsIbSource
from gpuscope.agent.serving.exposition import AgentCollector
from gpuscope.agent.serving.server import AgentHttpServer

pytestmark = pytest.mark.integration


def _get(port: int, encoding: str | None) -> tuple[dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Accept-Encoding": encoding} if encoding is not None else {}
        conn.request("GET", "/metrics", headers=headers)
        resp = conn.getresponse()
        assert resp.status == 200
        return {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _steady(page: bytes) -> list[bytes]:
    """The page without the agent's own collection timings, which change every scrape."""
    return [ln for ln in page.splitlines() if not ln.startswith(b"gpuscope_agent_collect_seconds")]


def test_gzip_when_asked_and_identity_otherwise(fixtures_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "sys"
    shutil.copytree(fixtures_dir / "infiniband-node-exporter" / "sys", root)
    collector = AgentCollector("node-a", None, SysfsIbSource(root), None)
    # without the process's own series, two scrapes of the static tree differ only in timings
    server = AgentHttpServer(("127.0.0.1", 0), None, collector, process_metrics=False)
    server.start_in_thread()
    port = server.server_address[1]
    try:
        plain_headers, plain = _get(port, None)
        zipped_headers, zipped = _get(port, "gzip")
        refused_headers, refused = _get(port, "gzip;q=0, identity")
        _, star = _get(port, "*")
    finally:
        server.shutdown()
        server.server_close()
        collector.close()
    assert b"gpuscope_ib_" in plain
    assert "content-encoding" not in plain_headers
    assert zipped_headers["content-encoding"] == "gzip"
    assert zipped_headers["vary"] == "Accept-Encoding"
    assert int(zipped_headers["content-length"]) == len(zipped)
    assert _steady(gzip.decompress(zipped)) == _steady(plain)
    assert len(zipped) * 4 < len(plain)  # text pages compress well; this one ~10x
    assert "content-encoding" not in refused_headers and _steady(refused) == _steady(plain)
    assert _steady(gzip.decompress(star)) == _steady(plain)

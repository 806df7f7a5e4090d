"""GPU readings from a dcgm-exporter ``/metrics`` page.

On nodes where the GPU Operator already runs dcgm-exporter, it holds DCGM's profiling
watches and does its own pod mapping; starting a second DCGM client would compete with it.
This source reads that page over HTTP instead and translates it with :mod:`gpuscope.core.dcgm`
(shared with the collector). A page that cannot be fetched or parsed is a
:class:`~gpuscope.core.errors.SourceError` with one line naming the URL and the reason, so the
agent reports the source down and carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.core.dcgm import Series, readings_from_dcgm_exporter
from gpuscope.core.errors import SourceError
from gpuscope.core.records import GpuReading

log = logging.getLogger(__name__)

_MAX_REASON = 200


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 3] + "..."


def series_from_families(families: Iterable[object]) -> Iterator[Series]:
    """Adapt prometheus_client metric families to ``(name, labels, value)`` series."""
    for family in families:
        for sample in getattr(family, "samples", ()):
            yield str(sample.name), dict(sample.labels), float(sample.value)


def parse_page(page: str) -> list[Series]:
    """Parse a Prometheus text page into series; raises ``ValueError`` when it is not one.

    Comment lines other than HELP/TYPE (the recorded page's ``# NOTE ...``) are skipped by
    prometheus_client's parser itself, as the exposition format allows.
    """
    return list(series_from_families(text_string_to_metric_families(page)))


class DcgmExporterSource:
    """A :class:`~gpuscope.agent.devices.sources.GpuSource` that scrapes a dcgm-exporter
    endpoint."""

    name = "dcgm-exporter"

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 2.0,
        client: httpx.Client | None = None,
        node: str | None = None,
    ) -> None:
        """``client`` is borrowed (not closed here); ``node`` keeps only that Hostname."""
        self.url = url
        self._timeout = timeout
        self._node = node
        self._own_client = client is None
        self._client = client if client is not None else httpx.Client(timeout=timeout)

    def _fail(self, reason: str) -> SourceError:
        return SourceError(f"dcgm-exporter {self.url}: {_one_line(reason)}")

    def read(self) -> list[GpuReading]:
        try:
            response = self._client.get(self.url, timeout=self._timeout)
        except httpx.HTTPError as exc:
            raise self._fail(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code != httpx.codes.OK:
            raise self._fail(f"HTTP {response.status_code} {response.reason_phrase}")
        try:
            series = parse_page(response.text)
        except Exception as exc:  # the parser raises ValueError, IndexError, ... on junk
            raise self._fail(f"not a Prometheus text page ({exc})") from exc
        if not any(name.startswith("DCGM_FI_") for name, _, _ in series):
            raise self._fail("page has no DCGM_FI_* series (is this a dcgm-exporter?)")
        readings = readings_from_dcgm_exporter(series, node=self._node)
        log.debug(
            "dcgm-exporter %s: %d series, %d GPU readings", self.url, len(series), len(readings)
        )
        return readings

    def close(self) -> None:
        if self._own_client:
            self._client.close()

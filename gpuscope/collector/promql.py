"""Ingest from a Prometheus-compatible query API instead of scraping every agent.

For clusters too large for one collector to scrape (docs/design.md, Scale): Prometheus (with
Thanos or Mimir) or VictoriaMetrics scrapes the agents, and the collector pulls the
``gpuscope_*`` series it needs through ``/api/v1/query_range``. The result becomes the same
batches a scrape gives, one per evaluation step, so everything downstream is unchanged.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import dataclass

import httpx

from gpuscope.collector.batch import Batch, Labels
from gpuscope.collector.fetch import redact_url
from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.errors import SourceError

log = logging.getLogger(__name__)

#: Labels the scraping engine adds that are not the series' own.
ENGINE_LABELS = frozenset({"__name__", "instance", "job", "prometheus", "prometheus_replica"})
_TYPES = {m.name: m.type for m in AGENT_METRICS}
#: Prometheus refuses ranges of more than 11,000 points per series.
MAX_POINTS = 11_000


@dataclass
class PrometheusQuerySource:
    base_url: str
    selector: str = '{__name__=~"gpuscope_.+"}'
    step_seconds: float = 15.0
    timeout_seconds: float = 30.0
    client: httpx.Client | None = None

    @property
    def shown_url(self) -> str:
        """``base_url`` as batches, errors and logs show it: its password redacted (the
        URL may carry credentials for a query API behind basic auth)."""
        return redact_url(self.base_url)

    def fetch(self, start: float, end: float) -> list[Batch]:
        """Every matching series between start and end (Unix seconds), one batch per step."""
        if end <= start:
            return []
        span = self.step_seconds * (MAX_POINTS - 1)
        batches: list[Batch] = []
        t = start
        while t < end:
            stop = min(end, t + span)
            batches.extend(self._fetch_range(t, stop))
            t = stop + self.step_seconds
        return batches

    def _fetch_range(self, start: float, end: float) -> list[Batch]:
        url = self.base_url.rstrip("/") + "/api/v1/query_range"
        params = {
            "query": self.selector,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{self.step_seconds:g}",
        }
        client = self.client or httpx.Client(timeout=self.timeout_seconds)
        try:
            resp = client.post(url, data=params)
        except httpx.HTTPError as exc:
            text = str(exc).replace(self.base_url, self.shown_url)
            raise SourceError(f"query API {self.shown_url} unreachable: {text}") from None
        finally:
            if self.client is None:
                client.close()
        try:
            body = resp.json()
        except ValueError:
            raise SourceError(
                f"query API {self.shown_url} answered HTTP {resp.status_code}, not JSON"
            ) from None
        if resp.status_code != 200 or body.get("status") != "success":
            raise SourceError(
                f"query API {self.shown_url}: {body.get('errorType', resp.status_code)}: "
                f"{body.get('error', 'failed')}"
            )
        data = body.get("data", {})
        if data.get("resultType") != "matrix":
            raise SourceError(f"query API {self.shown_url}: expected a matrix result")
        return self._batches(data.get("result", []))

    def _batches(self, result: list[dict[str, object]]) -> list[Batch]:
        shown = self.shown_url
        by_ts: dict[int, Batch] = defaultdict(lambda: Batch(shown, 0, types=dict(_TYPES)))
        for item in result:
            metric = item.get("metric")
            values = item.get("values")
            if not isinstance(metric, dict) or not isinstance(values, list):
                continue
            name = str(metric.get("__name__", ""))
            if not name:
                continue
            labels: Labels = tuple(
                sorted((str(k), str(v)) for k, v in metric.items() if k not in ENGINE_LABELS)
            )
            for ts, raw in values:
                value = float(raw)
                if math.isnan(value):  # a staleness marker, not a value
                    continue
                ts_ms = round(float(ts) * 1000)
                batch = by_ts[ts_ms]
                batch.names.append(name)
                batch.labels.append(labels)
                batch.values.append(value)
        return [
            Batch(shown, ts, b.names, b.labels, b.values, b.types)
            for ts, b in sorted(by_ts.items())
        ]

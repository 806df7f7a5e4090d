"""Ingest from a Prometheus-compatible query API instead of scraping every agent (pull mode).

Prometheus (with Thanos or Mimir) or VictoriaMetrics scrapes the agents, and the collector
pulls the ``gpuscope_*`` series through ``/api/v1/query_range``, one batch per evaluation
step, so everything downstream is unchanged. Which steps each cycle asks is
:class:`~gpuscope.collector.querying.step_window.StepWindow`'s (whole steps, the engine's latency
offset respected, never a growing catch-up); the HTTP side (tenant, token, timeout, retry,
cancellation) is :class:`~gpuscope.collector.querying.query_client.QueryClient`'s. Fleet mode
(``gpuscope/collector/querying/fleet.py``) asks 5-minute summaries instead of raw steps.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuscope.collector.querying.query_client import QueryClient
from gpuscope.collector.scraping.batch import Batch, Labels
from gpuscope.core.catalogue import AGENT_METRICS
from gpuscope.core.errors import SourceError

log = logging.getLogger(__name__)

#: Labels the scraping engine adds that are not the series' own.
ENGINE_LABELS = frozenset({"__name__", "instance", "job", "prometheus", "prometheus_replica"})
TYPES = {m.name: m.type for m in AGENT_METRICS}
#: Prometheus refuses ranges of more than 11,000 points per series.
MAX_POINTS = 11_000


class LabelCache:
    """One tuple per distinct label set, built of one tuple per distinct label pair.

    Why: a parsed answer makes fresh strings and tuples for every series, and the store
    keeps each series' labels as the key of its id map for as long as it runs: 240,000
    series of 8 labels each held their own ~1 KB of copies (at 10,000 GPUs in fleet mode
    the collector's peak RSS was 694 MB). Shared pairs (a node's, a GPU's) and one canonical
    tuple per series bring that to the tuple itself. Cleared past ``limit`` label sets.
    """

    def __init__(self, limit: int = 2_000_000) -> None:
        self.limit = limit
        self._pairs: dict[tuple[str, str], tuple[str, str]] = {}
        self._sets: dict[Labels, Labels] = {}

    def labels(self, metric: dict[str, object]) -> Labels:
        if len(self._sets) > self.limit:
            self._pairs.clear()
            self._sets.clear()
        pairs = self._pairs
        got = tuple(
            pairs.setdefault(p, p)
            for p in sorted((str(k), str(v)) for k, v in metric.items() if k not in ENGINE_LABELS)
        )
        return self._sets.setdefault(got, got)


def matrix_result(data: dict[str, object], shown_url: str) -> list[dict[str, object]]:
    if data.get("resultType") != "matrix":
        raise SourceError(f"query API {shown_url}: expected a matrix result")
    result = data.get("result", [])
    return result if isinstance(result, list) else []


def batches_from_matrix(
    result: Iterable[dict[str, object]],
    target: str,
    *,
    name_of: dict[str, str] | None = None,
    cache: LabelCache | None = None,
) -> list[Batch]:
    """One batch per timestamp of a ``query_range`` matrix; ``name_of`` maps a series'
    ``__name__`` to the name it is stored as (recording rules, fleet mode)."""
    by_ts: dict[int, Batch] = defaultdict(lambda: Batch(target, 0, types=dict(TYPES)))
    for item in result:
        metric = item.get("metric")
        values = item.get("values")
        if not isinstance(metric, dict) or not isinstance(values, list):
            continue
        name = str(metric.get("__name__", ""))
        if name_of is not None:
            name = name_of.get(name, "")
        if not name:
            continue
        labels: Labels = (
            cache.labels(metric)
            if cache is not None
            else tuple(
                sorted((str(k), str(v)) for k, v in metric.items() if k not in ENGINE_LABELS)
            )
        )
        for ts, raw in values:
            value = float(raw)
            if math.isnan(value):  # a staleness marker, not a value
                continue
            batch = by_ts[round(float(ts) * 1000)]
            batch.names.append(name)
            batch.labels.append(labels)
            batch.values.append(value)
    return [
        Batch(target, ts, b.names, b.labels, b.values, b.types) for ts, b in sorted(by_ts.items())
    ]


@dataclass
class PrometheusQuerySource:
    base_url: str
    selector: str = '{__name__=~"gpuscope_.+"}'
    step_seconds: float = 15.0
    timeout_seconds: float = 30.0
    client: QueryClient | None = None
    _own: QueryClient | None = field(default=None, init=False, repr=False)
    _cache: LabelCache = field(default_factory=LabelCache, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.client is None:
            self._own = QueryClient(self.base_url, timeout_seconds=self.timeout_seconds)

    @property
    def query_client(self) -> QueryClient:
        client = self.client or self._own
        assert client is not None
        return client

    @property
    def shown_url(self) -> str:
        """``base_url`` as batches, errors and logs show it: its password redacted (the
        URL may carry credentials for a query API behind basic auth)."""
        return self.query_client.shown_url

    def fetch(self, start: float, end: float) -> list[Batch]:
        """Every matching series between start and end (Unix seconds), one batch per step."""
        if end < start:
            return []
        span = self.step_seconds * (MAX_POINTS - 1)
        batches: list[Batch] = []
        t = start
        while t <= end:
            stop = min(end, t + span)
            batches.extend(self._fetch_range(t, stop))
            t = stop + self.step_seconds
        return batches

    def _fetch_range(self, start: float, end: float) -> list[Batch]:
        params = {
            "query": self.selector,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{self.step_seconds:g}",
        }
        data = self.query_client.query("/api/v1/query_range", params)
        return batches_from_matrix(
            matrix_result(data, self.shown_url), self.shown_url, cache=self._cache
        )

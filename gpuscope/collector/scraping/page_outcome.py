"""One fetched page into a scrape's outcome: parsed, relabelled (an ``instance`` label
where no ``node`` label is) and checked against the limits into one batch, with what a
target's earlier scrapes taught kept per target (:class:`TargetCache`), so that a steady
page parses, relabels and checks by lookup.

Apart from gpuscope/collector/scraping/scrape.py, which fetches the pages and runs this on
each in its parse lanes; scrape.py still names ``page_to_outcome``, the name its scraper
calls it by (tests replace it there).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import yarl

from gpuscope.collector.scraping.batch import Batch, Labels
from gpuscope.collector.scraping.dcgm_ingest import dcgm_batch
from gpuscope.collector.scraping.fetch import ScrapeError
from gpuscope.collector.scraping.limits import IngestLimits, LimitExceeded, check_page
from gpuscope.collector.scraping.outcome import ScrapeOutcome, Target
from gpuscope.collector.scraping.parse import SeriesCache, parse_exposition

log = logging.getLogger("gpuscope.collector.scraping.scrape")  # its records keep their name

__all__ = ["TargetCache", "page_to_outcome"]


@dataclass
class TargetCache:
    """What a target's previous scrapes taught: parsed label sets, and their relabelled form.

    A target exports the same series scrape after scrape, so the steady state parses labels
    by lookup. Cleared when it grows past a few times its last page (series churn: a target
    whose labels change every scrape would otherwise keep every label set it ever sent, up
    to ``limit`` entries, ~140 MB for a 20,000-series page) or past ``limit``.
    """

    limit: int = 400_000
    #: Series on the target's last parsed page: what a steady cache holds (twice: the
    #: line and the label text), so a cache far beyond it is churn, not steady state.
    page_series: int = 0
    series: SeriesCache = field(default_factory=SeriesCache)
    #: id(parsed labels) -> (those labels, with an instance label where no node label is)
    relabelled: dict[int, tuple[Labels, Labels]] = field(default_factory=dict)
    #: The last page's label column as parsed and as relabelled: the parser hands the same
    #: list back for a page of the same shape, and so does the relabelling then.
    last_labels: tuple[list[Labels], list[Labels]] | None = None
    #: The last (names, labels) columns that passed the page checks under these limits
    #: with nothing dropped (checks that depend on nothing else without timestamps).
    checked: tuple[list[str], list[Labels], IngestLimits] | None = None

    def trim(self) -> None:
        bound = min(self.limit, 3 * self.page_series + 4096)
        if len(self.series) > bound or len(self.relabelled) > bound:
            self.series.clear()
            self.relabelled.clear()
            self.last_labels = self.checked = None


def page_to_outcome(
    target: Target,
    body: bytes | bytearray,
    started: float,
    *,
    max_series: int | None = None,
    max_label_value_bytes: int | None = None,
    limits: IngestLimits | None = None,
    cache: TargetCache | None = None,
) -> ScrapeOutcome:
    """Parse and check one fetched page into a batch.

    Raises :class:`ScrapeError` when it holds no samples and :class:`LimitExceeded` when it
    is over a limit that fails the scrape.
    """
    limits = limits or IngestLimits()
    sample_limit = limits.sample_limit if max_series is None else max_series
    value_limit = (
        limits.label_value_length_limit if max_label_value_bytes is None else max_label_value_bytes
    )
    if body.lstrip()[:1] == b"<":
        raise ScrapeError("answered HTML, not a Prometheus exposition", "page")
    if cache is not None:
        cache.trim()
    parsed = parse_exposition(
        body,
        max_series=sample_limit,
        max_label_value_bytes=value_limit,
        cache=None if cache is None else cache.series,
    )
    if parsed.truncated:
        raise LimitExceeded(
            f"sample_limit exceeded: more than {sample_limit} samples", "sample_limit"
        )
    cols = parsed.samples
    if cache is not None:
        cache.page_series = len(cols.names)
    if not cols.names:
        first = parsed.errors[0] if parsed.errors else "empty page"
        raise ScrapeError(f"no samples ({first})", "page")
    ts_ms = int(started * 1000)
    if target.kind == "dcgm-exporter":
        series = [
            (n, dict(lbl), v)
            for n, lbl, v in zip(cols.names, cols.labels, cols.values, strict=True)
        ]
        batch = dcgm_batch(target.url, ts_ms, series, target.node or _host(target.url))
    else:
        batch = Batch(
            target.url,
            ts_ms,
            cols.names,
            _relabelled(cols.labels, target.url, cache),
            cols.values,
            dict(parsed.types),
            cols.timestamps_ms,
        )
    batch, dropped = _checked(batch, limits, cache)
    problems = [f"{n} samples dropped ({why})" for why, n in sorted(dropped.items())]
    if parsed.errors:
        problems.append(f"{parsed.error_count} malformed lines, first: {parsed.errors[0]}")
    error = "; ".join(problems)
    if error:
        log.debug("target page problems target=%s error=%s", target.url, error)
    return ScrapeOutcome(
        target, started, 0.0, True, error, parsed.error_count, False, batch, "", dropped
    )


def _relabelled(labels: list[Labels], url: str, cache: TargetCache | None) -> list[Labels]:
    if cache is None:
        return _with_instance(labels, url, {})
    last = cache.last_labels
    if last is not None and last[0] is labels:
        return last[1]
    out = _with_instance(labels, url, cache.relabelled)
    cache.last_labels = (labels, out)
    return out


def _checked(
    batch: Batch, limits: IngestLimits, cache: TargetCache | None
) -> tuple[Batch, Counter[str]]:
    """:func:`check_page`, skipped for the columns of the last page that passed whole."""
    plain = batch.timestamps_ms is None or batch.timestamps_ms.count(None) == len(batch)
    if cache is not None and plain and cache.checked is not None:
        names, labels, under = cache.checked
        if names is batch.names and labels is batch.labels and under == limits:
            return batch, Counter()
    checked, dropped = check_page(batch, limits)
    if cache is not None and plain and not dropped:
        cache.checked = (batch.names, batch.labels, limits)
    return checked, dropped


def _with_instance(
    labels: list[Labels], url: str, memo: dict[int, tuple[Labels, Labels]]
) -> list[Labels]:
    """Give series without a ``node`` label an ``instance`` label (host:port), as Prometheus
    does: the agents' own process metrics would otherwise be one series for all of them.

    ``memo`` remembers each label set's answer by identity (the parser's cache hands the
    same tuples back every scrape); it holds the tuple too, so an id is never reused.
    """
    instance: tuple[str, str] | None = None
    out: list[Labels] = []
    append = out.append
    for lbl in labels:
        hit = memo.get(id(lbl))
        if hit is not None and hit[0] is lbl:
            append(hit[1])
            continue
        new = lbl
        if not any(k == "node" for k, _ in lbl):
            if instance is None:
                u = yarl.URL(url)
                port = u.explicit_port
                instance = ("instance", f"{u.host}:{port}" if port else u.host or "")
            new = tuple(sorted((*lbl, instance)))
        memo[id(lbl)] = (lbl, new)
        append(new)
    return out


def _host(url: str) -> str:
    return yarl.URL(url).host or url

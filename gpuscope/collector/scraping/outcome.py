"""What is scraped and what a scrape gives: a target (its URL's credentials kept apart from
the URL everything shows) and the outcome of one scrape of it (``up``, its batch, why it
failed, what its parse cost), and the rule that a scrape parsed past its timeout fails.

Apart from gpuscope/collector/scraping/scrape.py (the scraper) so that the page's parse
into an outcome (page_outcome.py) and the scraper share these types without importing
each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from gpuscope.collector.scraping.batch import Batch
from gpuscope.collector.scraping.fetch import redact_url

__all__ = ["ScrapeOutcome", "Target", "TargetKind", "past_timeout"]


TargetKind = Literal["agent", "dcgm-exporter"]


@dataclass(frozen=True, slots=True)
class Target:
    """A scrape target. ``url`` is what everything shows (its password, if any, redacted);
    the URL as given, credentials included, is kept apart and used only to fetch."""

    url: str
    kind: TargetKind = "agent"
    #: Node a dcgm-exporter page belongs to when its series carry no Hostname label.
    node: str = ""
    secret_url: str = field(default="", repr=False, compare=False)

    def __post_init__(self) -> None:
        public = redact_url(self.url)
        if public != self.url:
            object.__setattr__(self, "secret_url", self.url)
            object.__setattr__(self, "url", public)

    @property
    def fetch_url(self) -> str:
        return self.secret_url or self.url


@dataclass(frozen=True, slots=True)
class ScrapeOutcome:
    target: Target
    started_at: float
    duration_seconds: float
    up: bool
    error: str = ""
    parse_errors: int = 0
    truncated: bool = False
    batch: Batch | None = None
    #: Why the scrape failed, as a label value (timeout, connect, http, body_size_limit,
    #: sample_limit, label_limit, page, store); empty when up.
    reason: str = ""
    #: Samples of the page left out, by reason (gpuscope/collector/scraping/limits.py).
    dropped: Mapping[str, int] = field(default_factory=dict)
    #: CPU the page's parse and admission took (gpuscope/collector/scraping/cpu_budget.py).
    cpu_seconds: float = 0.0
    #: What the budget charges: that CPU stretched by its thread's wait for a CPU (the wall
    #: time it needed on a starved CPU; gpuscope/collector/scraping/cpu_budget.py).
    cost_seconds: float = 0.0
    #: Ticks of the target's schedule that passed without a scrape since its previous one
    #: (the previous scrape, the collector, or its CPU budget, ran past them): counted,
    #: never silent.
    skipped_ticks: int = 0
    #: The tick of the schedule this scrape was due at (0.0 outside the scrape loop).
    scheduled_at: float = 0.0

    @property
    def samples(self) -> int:
        return len(self.batch) if self.batch is not None else 0

    def at_tick(self, scheduled_at: float, skipped_ticks: int) -> ScrapeOutcome:
        """This outcome as the scrape of the tick ``scheduled_at`` (``dataclasses.replace``
        takes twice as long: ~3.6 us against ~1.8 us)."""
        return ScrapeOutcome(
            self.target, self.started_at, self.duration_seconds, self.up, self.error,
            self.parse_errors, self.truncated, self.batch, self.reason, self.dropped,
            self.cpu_seconds, self.cost_seconds, skipped_ticks, scheduled_at,
        )  # fmt: skip


def past_timeout(outcome: ScrapeOutcome, elapsed: float, timeout_seconds: float) -> ScrapeOutcome:
    """A page fetched in time but parsed too late (a starved CPU) fails its scrape, as
    Prometheus counts a scrape past its timeout, and is not stored; the CPU its parse took
    stays on the outcome, so a target whose pages are too costly to parse in time is still
    held to its CPU budget (gpuscope/collector/scraping/cpu_budget.py) instead of being parsed again
    at every tick."""
    if not outcome.up or elapsed <= timeout_seconds:
        return outcome
    error = f"scrape took {elapsed:.3g}s, past its {timeout_seconds:g}s timeout"
    return ScrapeOutcome(
        outcome.target, outcome.started_at, 0.0, False, error,
        reason="timeout", cpu_seconds=outcome.cpu_seconds, cost_seconds=outcome.cost_seconds,
    )  # fmt: skip

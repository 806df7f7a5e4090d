"""What a parse of one page gives: its samples as parallel columns, its types and help
texts, and its problems (gpuscope/collector/scraping/parse.py makes it)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscope.collector.scraping.batch import Labels

__all__ = ["ParseResult", "Samples"]


@dataclass(frozen=True, slots=True)
class Samples:
    """Parallel columns, one entry per sample line; labels sorted by label name."""

    names: list[str]
    labels: list[Labels]
    values: list[float]
    timestamps_ms: list[int | None]

    def __len__(self) -> int:
        return len(self.names)


@dataclass(frozen=True, slots=True)
class ParseResult:
    samples: Samples
    types: dict[str, str]
    helps: dict[str, str]
    #: the first MAX_ERRORS problems ("line N: what: 'text'"), then "... and K more errors"
    errors: list[str]
    truncated: bool
    #: every problem, including those not kept in `errors`
    error_count: int = 0

    # The columns, straight from the result (the scraper reads them so).
    @property
    def names(self) -> list[str]:
        return self.samples.names

    @property
    def labels(self) -> list[Labels]:
        return self.samples.labels

    @property
    def values(self) -> list[float]:
        return self.samples.values

    @property
    def timestamps_ms(self) -> list[int | None]:
        return self.samples.timestamps_ms

"""A batch: one target's samples at one time, in catalogue terms, ready for the store.

Columnar (parallel lists) because the store appends it through Arrow in one statement and
the parser produces it that way; a row-per-object shape would cost more than the insert.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Batch:
    target: str
    #: Scrape time, Unix milliseconds (a sample's own timestamp overrides it).
    ts_ms: int
    names: list[str] = field(default_factory=list)
    #: Each sample's labels, sorted by name.
    labels: list[Labels] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    #: Family name (without ``_total``) -> counter, gauge, ...
    types: dict[str, str] = field(default_factory=dict)
    timestamps_ms: list[int | None] | None = None

    def __len__(self) -> int:
        return len(self.names)

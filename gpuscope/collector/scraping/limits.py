"""What one target's page may hold, checked before anything of it is staged for the store.

In the spirit of Prometheus's scrape limits: a page over ``sample_limit`` samples, with a
series over ``label_limit`` labels, or larger than ``body_size_limit`` bytes once inflated
fails its scrape whole (the target is down with the reason; a partial page would be a
misleading random subset). Problems of single samples drop that sample and are counted, as
Prometheus counts its out-of-bounds and duplicate samples: an explicit timestamp outside a
sane window around the scrape, a series twice in one page (the first is kept), a new series
beyond a target's or the collector's churn budget. So no value a target can send reaches the
database's transaction, and one target's page never affects another's.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuscope.collector.scraping.batch import Batch, Labels

#: Why a sample was dropped (the ``reason`` label of gpuscope_collector_samples_dropped).
OUT_OF_BOUNDS = "out_of_bounds"
DUPLICATE = "duplicate"
SERIES_CHURN = "series_churn"
SERIES_CHURN_TOTAL = "series_churn_total"
SERIES_LIMIT = "series_limit"


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """The limits of the ingest path; docs/configuration.md lists their settings."""

    #: Samples in one page; a larger page fails its scrape (Prometheus ``sample_limit``).
    sample_limit: int = 50_000
    #: Labels on one series; more fails the scrape (Prometheus ``label_limit``).
    label_limit: int = 64
    #: Bytes of one label value; a longer one drops its line, counted as a parse error.
    label_value_length_limit: int = 4096
    #: Bytes of a page after inflation; more fails the scrape while it is read.
    body_size_limit: int = 8 * 2**20
    #: New series one target may create per hour after its first stored page.
    new_series_per_target_per_hour: int = 10_000
    #: New series all targets together may create per hour after their first pages.
    new_series_per_hour: int = 100_000
    #: Series the store keeps in memory at most; new ones beyond it are dropped.
    max_series: int = 1_000_000
    #: An explicit sample timestamp this far before or after its scrape is dropped.
    max_sample_age_seconds: float = 3600.0
    max_sample_future_seconds: float = 600.0


class LimitExceeded(Exception):
    """A page over a limit that fails the scrape; ``reason`` names the limit."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_page(batch: Batch, limits: IngestLimits) -> tuple[Batch, Counter[str]]:
    """The batch without samples that must not be stored, and the count dropped by reason.

    Raises :class:`LimitExceeded` when the page as a whole is over a limit. Cheap when
    nothing is wrong: each check is one pass in C over a column.
    """
    n = len(batch)
    if n > limits.sample_limit:
        raise LimitExceeded(
            f"sample_limit exceeded: more than {limits.sample_limit} samples", "sample_limit"
        )
    if n and max(map(len, batch.labels)) > limits.label_limit:
        worst = max(range(n), key=lambda i: len(batch.labels[i]))
        raise LimitExceeded(
            f"label_limit exceeded: {batch.names[worst]} has {len(batch.labels[worst])} labels "
            f"(limit {limits.label_limit})",
            "label_limit",
        )
    dropped: Counter[str] = Counter()
    keep: list[bool] | None = None
    times = batch.timestamps_ms
    if times is not None and times.count(None) != n:
        lo = batch.ts_ms - int(limits.max_sample_age_seconds * 1000)
        hi = batch.ts_ms + int(limits.max_sample_future_seconds * 1000)
        keep = [t is None or lo <= t <= hi for t in times]
        dropped[OUT_OF_BOUNDS] = keep.count(False)
    keys = list(zip(batch.names, batch.labels, strict=True))
    if len(set(keys)) != n:  # Prometheus: a duplicate sample is an error; the first stays
        seen: set[tuple[str, Labels]] = set()
        keep = keep or [True] * n
        for i, key in enumerate(keys):
            if key in seen:
                if keep[i]:
                    keep[i] = False
                    dropped[DUPLICATE] += 1
            else:
                seen.add(key)
    if keep is None or all(keep):
        return batch, +dropped
    return subset(batch, [i for i in range(n) if keep[i]]), +dropped


def subset(batch: Batch, rows: Sequence[int]) -> Batch:
    """The batch with only the samples at ``rows``."""
    times = batch.timestamps_ms
    return Batch(
        batch.target,
        batch.ts_ms,
        [batch.names[i] for i in rows],
        [batch.labels[i] for i in rows],
        [batch.values[i] for i in rows],
        batch.types,
        None if times is None else [times[i] for i in rows],
    )


class ChurnGuard:
    """Budgets of new series, per target and overall, per clock hour.

    A label set that changes every scrape would otherwise add series (and the store's memory
    for each) without bound. A target's first stored page is free of its own budget and of
    the overall one (a new node brings all its series at once); after it, new series beyond
    either budget, or beyond the store's ``max_series``, are dropped and counted while the
    target's known series go on being stored.
    """

    def __init__(self, limits: IngestLimits, clock: Callable[[], float]) -> None:
        self.limits = limits
        self.clock = clock
        self._lock = threading.Lock()
        self._hour = -1
        self._per_target: Counter[str] = Counter()
        self._total = 0
        self._seen_targets: set[str] = set()
        #: Per target, the last (names, labels) columns none of whose series was new: the
        #: store never forgets a series, so the same columns have none new again.
        self._all_known: dict[str, tuple[list[str], list[Labels]]] = {}

    def admit(
        self, batch: Batch, is_new: Callable[[str, Labels], bool], known_series: int
    ) -> tuple[Batch, Counter[str]]:
        """The batch with the new series it may create; the count of those dropped."""
        dropped: Counter[str] = Counter()
        known = self._all_known.get(batch.target)
        if known is not None and known[0] is batch.names and known[1] is batch.labels:
            return batch, dropped
        new_rows = [
            i for i, key in enumerate(zip(batch.names, batch.labels, strict=True)) if is_new(*key)
        ]
        if not new_rows:
            with self._lock:
                self._all_known[batch.target] = (batch.names, batch.labels)
            return batch, dropped
        lim = self.limits
        with self._lock:
            hour = int(self.clock() // 3600)
            if hour != self._hour:
                self._hour, self._total = hour, 0
                self._per_target.clear()
            first = batch.target not in self._seen_targets
            room_store = max(lim.max_series - known_series, 0)
            if first:
                allowed = min(len(new_rows), room_store)
                reason = SERIES_LIMIT
            else:
                room_target = lim.new_series_per_target_per_hour - self._per_target[batch.target]
                room_total = lim.new_series_per_hour - self._total
                allowed = max(min(len(new_rows), room_target, room_total, room_store), 0)
                reason = (
                    SERIES_LIMIT
                    if room_store <= min(room_target, room_total)
                    else SERIES_CHURN
                    if room_target <= room_total
                    else SERIES_CHURN_TOTAL
                )
                self._per_target[batch.target] += allowed
                self._total += allowed
        if allowed == len(new_rows):
            return batch, dropped
        dropped[reason] = len(new_rows) - allowed
        refused = set(new_rows[allowed:])
        return subset(batch, [i for i in range(len(batch)) if i not in refused]), dropped

    def stored(self, target: str) -> None:
        """Note that ``target`` has had a page stored (its first page's pass is used)."""
        with self._lock:
            self._seen_targets.add(target)

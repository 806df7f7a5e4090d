"""What earlier pages of one target parsed to, so that a steady page parses by lookup.

A target exports the same series scrape after scrape, in the same order: once a page has
parsed without a problem, its shape (which lines are comments, which are samples and what
they parsed to) is kept, and a page of the same shape with new values costs a split into
lines and a float per changed value (gpuscope/collector/scraping/parse.py falls back to the
full parser on any other difference).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import is_, itemgetter, ne
from typing import TypeVar

from gpuscope.collector.scraping.batch import Labels
from gpuscope.collector.scraping.parse_result import ParseResult, Samples

__all__ = ["PageShape", "SeriesCache", "parse_same_shape", "shape_of"]

_T = TypeVar("_T")


@dataclass
class SeriesCache:
    """What earlier pages of one target parsed to, so that an unchanged page parses by lookup.

    A target exports the same series scrape after scrape. ``series`` maps the text of a
    plain sample line before its value (``name{labels}``) to what the full parser made of
    it, and only lines the full parser accepted without a timestamp or exemplar get in; so
    a cached parse is always the parse the full parser would give. Pass one cache per
    target, and clear it when it grows past a bound (series churn).
    """

    series: dict[str, tuple[str, Labels]] = field(default_factory=dict)
    labels: dict[str, Labels] = field(default_factory=dict)
    comments: set[str] = field(default_factory=set)
    #: The last page's structure, when every line of it was a comment, a blank or a plain
    #: sample: a page that differs from it only in sample values parses in a few passes in C.
    page: PageShape | None = None

    def __len__(self) -> int:
        return len(self.series) + len(self.labels)

    def clear(self) -> None:
        self.series.clear()
        self.labels.clear()
        self.comments.clear()
        self.page = None


@dataclass(frozen=True, eq=False, slots=True)
class PageShape:
    """A page with its sample values taken out, and what the full parser made of it.

    A page of ``size`` lines whose lines at ``others_at`` (comments, blanks) are ``others``
    whole, whose lines at ``samples_at`` start with ``prefixes`` (each the line up to and
    with its last blank, ``line.rpartition(" ")[0] + " "``) and end in a value without a
    blank that the full parser takes as it is, parses to ``names`` and ``labels`` (the
    very same lists, so later stages can recognise the page by identity; never change
    them) with the new values. Nothing is split off a line but its value (the line less
    its prefix), so a steady page costs a split into lines and a float per value.

    A shape holds no object per line that Python's garbage collector tracks (strings and
    floats are not tracked; tuples of them are untracked at the first collection): a
    churning target's page of 20,000 lines once left 20,000 slices here, which survived
    into the oldest generation and set off full collections that, on a starved CPU, held
    every thread of the collector for a second or more and cost every healthy target a
    tick (the suite's starved-CPU isolation test, seen in CI).
    """

    size: int
    samples_at: tuple[int, ...]
    prefixes: tuple[str, ...]
    others_at: tuple[int, ...]
    others: tuple[str, ...]
    names: list[str]
    labels: list[Labels]
    types: dict[str, str]
    helps: dict[str, str]
    #: The last page of this shape: its sample lines and their values (a copy of them):
    #: a line that has not changed since keeps its value without a parse.
    last: list[tuple[tuple[str, ...], list[float]]] = field(default_factory=list)


def _pick(items: Sequence[_T], at: tuple[int, ...]) -> tuple[_T, ...]:
    """``items`` at the indices ``at``, in C (itemgetter of one index gives no tuple)."""
    if len(at) > 1:
        return itemgetter(*at)(items)  # type: ignore[no-any-return]
    return tuple(items[i] for i in at)


def _split_lines(lines: list[str]) -> tuple[list[str], list[str]]:
    """Each line's text before its last blank, and after it."""
    parts = list(map(str.rpartition, lines, repeat(" ")))
    return list(map(itemgetter(0), parts)), list(map(itemgetter(2), parts))


def parse_same_shape(lines: list[str], shape: PageShape, limit: int) -> ParseResult | None:
    """The page, if it is ``shape`` with new sample values; None on any other difference."""
    if len(lines) != shape.size or 0 <= limit < len(shape.names):
        return None
    if _pick(lines, shape.others_at) != shape.others:
        return None
    sample_lines = _pick(lines, shape.samples_at)
    prefixes = shape.prefixes
    changed: list[int] | None = None
    if shape.last:  # only the lines that changed since the last page are looked at
        before, before_values = shape.last[0]
        changed = list(compress(range(len(sample_lines)), map(ne, sample_lines, before)))
        at = tuple(changed)
        sample_lines, prefixes = _pick(sample_lines, at), _pick(prefixes, at)
    tokens: list[str] = list(map(str.removeprefix, sample_lines, prefixes))
    # a line not starting with its (never empty) prefix comes back as the very same object
    if any(map(is_, tokens, sample_lines)):
        return None
    joined = "".join(tokens)
    # a blank in a value: the line's last blank is further on; Go's floats have no "_"
    if " " in joined or "_" in joined or not joined.isascii():
        return None
    try:
        values = list(map(float, tokens))
    except ValueError:
        return None
    if changed is not None:
        new_values = values
        values = before_values.copy()
        for i, v in zip(changed, new_values, strict=True):
            values[i] = v
        shape.last[0] = (_pick(lines, shape.samples_at), values.copy())
    else:
        shape.last.append((_pick(lines, shape.samples_at), values.copy()))
    samples = Samples(shape.names, shape.labels, values, [None] * len(values))
    return ParseResult(samples, dict(shape.types), dict(shape.helps), [], False, 0)


def shape_of(lines: list[str], result: ParseResult, cache: SeriesCache) -> PageShape | None:
    """The shape of a page the full parser read without a problem, if every line of it is
    a comment or blank line as written, or a sample the cache knows as plain text."""
    if result.error_count or result.truncated:
        return None
    heads, _ = _split_lines(lines)
    samples_at: list[int] = []
    others_at: list[int] = []
    known = cache.series
    for i, line in enumerate(lines):
        if not line or line[0] == "#":
            others_at.append(i)
        elif heads[i] in known:  # no timestamp, no exemplar, one blank before the value
            samples_at.append(i)
        else:
            return None
    if len(samples_at) != len(result.names):
        return None
    at = tuple(samples_at)
    prefixes = tuple(h + " " for h in _pick(heads, at))
    others = tuple(others_at)
    return PageShape(len(lines), at, prefixes, others, _pick(lines, others), result.names,
                     result.labels, dict(result.types), dict(result.helps))  # fmt: skip

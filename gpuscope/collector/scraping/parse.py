"""Parse the Prometheus text exposition format (0.0.4) into columns, fast and exactly.

Never raises on bad input: a malformed line is skipped and reported in `errors` (the first
MAX_ERRORS, with line numbers, plus a count), so HTML or garbage gives zero samples and errors.

Speed: nearly every line is `name{l="v",...} value`, and one label string repeats across many
metric names (a GPU's labels on ~60 metrics). Lines are cut with str.find, and the name and the
raw label string are looked up in per-call caches holding only strings proven well-formed, so
a hit needs no checking. A new backslash-free label string is split on quotes; escapes, '}'
in quotes, exemplars and errors take the careful path: an anchored regex of the exact grammar.

Exactness, as Prometheus reads the format: label values unescape \\\\, \\" and \\n (other
escapes stay as written); values are Go floats (NaN, +Inf, -Inf, 1e+06, -0) without hex or
`_`; timestamps are integer ms (OpenMetrics' float seconds are errors: scrape text/plain); a
last line cut off mid-way is malformed, but a whole one without its newline is kept (as
prometheus_client and recorded pages expect; the Prometheus server would refuse the page);
after OpenMetrics `# EOF` only blank lines may follow; exemplars (` # {...} v [ts]`) are ignored.
"""

from __future__ import annotations

import re
from typing import Any

from gpuscope.collector.scraping.batch import Labels
from gpuscope.collector.scraping.page_shape import (
    SeriesCache,
    parse_same_shape,
    shape_of,
)
from gpuscope.collector.scraping.parse_result import ParseResult, Samples

__all__ = ["MAX_ERRORS", "ParseResult", "Samples", "SeriesCache", "parse_exposition"]

MAX_ERRORS = 20
METRIC_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})
METRIC_TYPES |= {"info", "stateset", "unknown", "gaugehistogram"}  # OpenMetrics


_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_VALUE = r'"(?:[^"\\]|\\.)*+"'
_PAIR = r"[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*" + _VALUE + r"[ \t]*"
#: a whole label set from its '{' to its '}' (trailing comma allowed, whitespace around terms)
_LABELSET_RE = re.compile(r"\{(?:" + _PAIR + r",)*+(?:" + _PAIR + r")?[ \t]*\}")
_LNAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_PAIR_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*+)"')
_ESC_RE = re.compile(r'\\[\\"n]')
_META_RE = re.compile(r"#[ \t]*(HELP|TYPE)(?:[ \t]+([^ \t]*)(?:[ \t](.*))?)?\Z")
_HELP_ESC_RE = re.compile(r"\\[\\n]")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(m: re.Match[str]) -> str:
    return _ESCAPES[m.group()]


def _parse_known(lines: list[str], cache: SeriesCache, limit: int) -> ParseResult | None:
    """A page every line of which an earlier page had: lookups only. None on anything else."""
    get, comments = cache.series.get, cache.comments
    names: list[str] = []
    labels: list[Labels] = []
    values: list[float] = []
    add_name, add_labels, add_value = names.append, labels.append, values.append
    seen_comments: list[str] = []
    for line in lines:
        if not line:
            continue
        if line[0] == "#":
            if line not in comments:
                return None
            seen_comments.append(line)
            continue
        key, _, v = line.rpartition(" ")
        hit = get(key)
        if hit is None:
            return None
        try:
            value = float(v)
        except ValueError:
            return None
        if "_" in v or not v.isascii():
            return None
        add_name(hit[0])
        add_labels(hit[1])
        add_value(value)
    if 0 <= limit < len(names):
        return None
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    try:
        for line in seen_comments:
            _comment(line, types, helps)
    except _LineError:  # e.g. a TYPE line twice: the full parser reports it
        return None
    return ParseResult(Samples(names, labels, values, [None] * len(names)), types, helps, [],
                       False, 0)  # fmt: skip


class _LineError(Exception):
    """One malformed line."""


class _Problems:
    """Counts every problem; keeps the first MAX_ERRORS as one-line messages."""

    def __init__(self) -> None:
        self.count = 0
        self.kept: list[str] = []

    def add(self, lineno: int, msg: str, line: str | None = None) -> None:
        self.count += 1
        if len(self.kept) < MAX_ERRORS:
            if line is not None:
                msg += ": " + repr(line[:80] + "..." if len(line) > 80 else line)
            self.kept.append(f"line {lineno}: {msg}")


def _decode(data: bytes | bytearray, problems: _Problems) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:  # find the bad lines, blank them out, keep the rest
        out = []
        for lineno, raw in enumerate(bytes(data).split(b"\n"), 1):
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                problems.add(lineno, f"invalid UTF-8 at byte {exc.start} of the line")
                out.append("")
        return "\n".join(out)


def _quick(key: str, shapes: dict[tuple[str, ...], Any], max_bytes: int) -> Labels | None:
    """Labels of a backslash-free label string, or None to leave it to `_careful`."""
    parts = ("," + key).split('"')  # [',n0=', v0, ',n1=', v1, ..., '' or ',']
    if not len(parts) & 1:  # odd number of quotes: '}' inside a value, or worse
        return None
    seps = tuple(parts[0::2])
    shape = shapes.get(seps, False)
    if shape is False:  # first sight of these names: check them once
        names = tuple(sep[1:-1] for sep in seps[:-1])
        ok = seps[-1] in ("", ",") and len(set(names)) == len(names)
        ok = ok and all(sep[:1] == "," and sep[-1:] == "=" for sep in seps[:-1])
        ok = ok and all(_LNAME_RE.fullmatch(n) for n in names)
        shape = shapes[seps] = (names, list(names) == sorted(names)) if ok else None
    if shape is None:
        return None
    values = parts[1::2]
    if (
        len(key) * 4 > max_bytes
        and max(len(v.encode("utf-8", "surrogatepass")) for v in values) > max_bytes
    ):
        return None
    if shape[1]:
        return tuple(zip(shape[0], values, strict=True))
    return tuple(sorted(zip(shape[0], values, strict=True)))


def _careful(
    line: str, b: int, lcache: dict[str, Labels], ncache: dict[str, str], max_bytes: int
) -> tuple[str, Labels, int]:
    """Name, labels and the index of the label set's '}' for a line the caches missed."""
    head = line[:b]
    name = head.rstrip(" \t")
    if _NAME_RE.fullmatch(name) is None:
        # Not `name{`: a label-less sample whose exemplar has the first '{', or garbage.
        m = _NAME_RE.match(line)
        if m is None or line[m.end() : m.end() + 1] not in (" ", "\t"):
            raise _LineError("invalid metric name")
        return m.group(), (), m.end() - 1
    m = _LABELSET_RE.match(line, b)
    if m is None:
        raise _LineError("malformed label set")
    end = m.end() - 1
    out: dict[str, str] = {}
    for lname, raw in _PAIR_RE.findall(line, b, end):
        value = _ESC_RE.sub(_unescape, raw) if "\\" in raw else raw
        size = len(value.encode("utf-8", "surrogatepass")) if len(value) * 4 > max_bytes else 0
        if size > max_bytes:
            raise _LineError(f"label {lname} value is {size} bytes (limit {max_bytes})")
        if lname in out:
            raise _LineError(f"duplicate label {lname}")
        out[lname] = value
    labels = tuple(sorted(out.items()))
    ncache[head] = name
    if end == line.find("}", b):  # a key the fast path can slice (no '}' in a value)
        lcache[line[b + 1 : end]] = labels
    return name, labels, end


def _timestamp(tok: str) -> int:
    digits = tok[1:] if tok[:1] in ("-", "+") else tok
    if digits.isascii() and digits.isdigit():
        ts = int(tok)
        if -(2**63) <= ts < 2**63:
            return ts
    raise _LineError(f"invalid timestamp {tok!r}")


def _comment(line: str, types: dict[str, str], helps: dict[str, str]) -> bool:
    """Handle a '#' line; True for OpenMetrics `# EOF`."""
    m = _META_RE.match(line)
    if m is None:
        return line[1:].strip() == "EOF"
    kw, family, rest = m.group(1, 2, 3)
    if not family or _NAME_RE.fullmatch(family) is None:
        raise _LineError(f"{kw} without a valid metric name")
    rest = rest or ""
    if kw == "HELP":  # the text is verbatim after one blank, as Prometheus reads it
        if family in helps:
            raise _LineError(f"second HELP for {family}")
        helps[family] = _HELP_ESC_RE.sub(_unescape, rest) if "\\" in rest else rest
    else:
        rest = rest.strip(" \t")
        if rest not in METRIC_TYPES:
            raise _LineError(f"unknown metric type {rest!r}")
        if family in types:
            raise _LineError(f"second TYPE for {family}")
        types[family] = rest
    return False


def parse_exposition(
    text: str | bytes | bytearray | memoryview,
    *,
    max_series: int | None = None,
    max_label_value_bytes: int = 4096,
    cache: SeriesCache | None = None,
) -> ParseResult:
    """Parse one scraped page. Stops after `max_series` samples (`truncated`) or `# EOF`.

    ``cache``: the same :class:`SeriesCache` for every scrape of one target makes a
    steady-state page a matter of lookups; it never changes what a page parses to.
    """
    problems = _Problems()
    if isinstance(text, memoryview):
        text = bytes(text)
    if isinstance(text, bytes | bytearray):  # decoded in place: a big page is not copied
        text = _decode(text, problems)
    if text.startswith("\ufeff"):
        text = text[1:]
    names: list[str] = []
    labels_col: list[Labels] = []
    values: list[float] = []
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    truncated = False
    if text[:1024].lstrip().startswith("<"):
        problems.add(1, "not a Prometheus exposition (HTML?)", text.lstrip())
        text = ""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    limit = -1 if max_series is None else max(max_series, 0)
    if cache is not None and cache.page is not None and not problems.count:
        same = parse_same_shape(lines, cache.page, limit)
        if same is not None:
            return same
    if cache is not None and cache.series and not problems.count:
        known = _parse_known(lines, cache, limit)
        if known is not None:
            cache.page = shape_of(lines, known, cache)
            return known
    add_name, add_labels, add_value = names.append, labels_col.append, values.append
    # raw label string -> labels, only well-formed ones
    lcache: dict[str, Labels] = {} if cache is None else cache.labels
    remember = None if cache is None else cache.series
    ncache: dict[str, str] = {}  # raw text before '{' (or first token) -> metric name
    shapes: dict[tuple[str, ...], Any] = {}  # label-name skeletons seen by _quick
    stamps: dict[int, int] = {}  # sample index -> timestamp, for the few that have one
    prefix, plen, pname = "\n", 1, ""  # `name{` of the last labelled sample, its name
    count = eof = 0
    name: str | None
    labels: Labels | None
    for lineno, line in enumerate(lines, 1):
        if line.startswith(prefix):  # fast path: same family as the line before
            e = line.find("}")
            key = line[plen:e]
            labels = lcache.get(key) if e > 0 else None
            if labels is None and e > 0 and "\\" not in key:
                labels = _quick(key, shapes, max_label_value_bytes)
                if labels is not None:
                    lcache[key] = labels
            if labels is not None:
                v = line[e + 1 :]
                try:
                    value = float(v)  # fails on a timestamp or an exemplar: slow path
                except ValueError:
                    pass
                else:
                    if "_" not in v and v.isascii():
                        if count == limit:
                            truncated = True
                            break
                        count += 1
                        add_name(pname)
                        add_labels(labels)
                        add_value(value)
                        if remember is not None and v[:1] == " " and " " not in v[1:]:
                            remember[line[: e + 1]] = (pname, labels)
                        continue
        if not line:
            continue
        c = line[0]
        raw = line
        if c in {" ", "\t"}:
            line = line.strip(" \t")  # noqa: PLW2901
            if not line:
                continue
            c = line[0]
        try:
            if c == "#":
                if _comment(line, types, helps):
                    eof = lineno
                    break
                if cache is not None and raw is line:
                    cache.comments.add(line)
                continue
            b = line.find("{")
            if b < 0:
                tail = line.split()
                if not tail:
                    raise _LineError("invalid line")
                name = ncache.get(tail[0])
                if name is None:
                    if _NAME_RE.fullmatch(tail[0]) is None:
                        raise _LineError("invalid metric name")
                    name = ncache[tail[0]] = tail[0]
                del tail[0]
                labels = ()
            else:
                e = line.find("}", b)
                name = ncache.get(line[:b])
                labels = None
                if e > 0:
                    key = line[b + 1 : e]
                    labels = lcache.get(key)
                    if labels is None and name is not None and "\\" not in key:
                        labels = _quick(key, shapes, max_label_value_bytes)
                        if labels is not None:
                            lcache[key] = labels
                if labels is None or name is None:
                    name, labels, e = _careful(line, b, lcache, ncache, max_label_value_bytes)
                if e > b:  # a labelled sample: `name{` or `name {` starts the next fast path
                    prefix, plen, pname = line[: b + 1], b + 1, name
                tail = line[e + 1 :].split()
            n = len(tail)
            if n == 0:
                raise _LineError("missing value")
            v = tail[0]
            try:
                value = float(v)
            except ValueError:
                raise _LineError(f"invalid value {v!r}") from None
            if "_" in v or not v.isascii():
                raise _LineError(f"invalid value {v!r}")
            ts = None
            if n > 1 and tail[1] != "#":  # '#' starts an exemplar: ignored
                ts = _timestamp(tail[1])
                if n > 2 and tail[2] != "#":
                    raise _LineError("unexpected text after the timestamp")
        except _LineError as exc:
            problems.add(lineno, str(exc), line)
            continue
        if count == limit:
            truncated = True
            break
        count += 1
        add_name(name)
        add_labels(labels)
        add_value(value)
        if ts is not None:
            stamps[count - 1] = ts
        elif remember is not None and n == 1 and raw is line:
            key = line.rpartition(" ")[0]
            if key and f"{key} {v}" == line:  # what the lookup path will split it into
                remember[key] = (name, labels)
    if eof:  # only blank lines may follow `# EOF`
        rest = lines[eof:]
        bad = next((i for i, ln in enumerate(rest) if ln.strip()), -1)
        if bad >= 0:
            problems.add(eof + 1 + bad, "content after # EOF", rest[bad])
    errors = problems.kept
    if problems.count > len(errors):
        errors.append(f"... and {problems.count - len(errors)} more errors")
    timestamps: list[int | None] = [None] * count
    for i, ts in stamps.items():
        timestamps[i] = ts
    samples = Samples(names, labels_col, values, timestamps)
    result = ParseResult(samples, types, helps, errors, truncated, problems.count)
    if cache is not None:  # an OpenMetrics page's `# EOF` (blank lines only after it, else a
        # problem) is one of the shape's comment lines, compared whole like the others
        cache.page = None if problems.count else shape_of(lines, result, cache)
    return result

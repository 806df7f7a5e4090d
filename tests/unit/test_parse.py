"""gpuscope.collector.scraping.parse: the Prometheus text parser, exact against prometheus_client and the spec."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from gpuscope.collector.scraping.parse import MAX_ERRORS, ParseResult, parse_exposition
from tests.paths import FIXTURES

DCGM_PAGE = FIXTURES / "dcgm-exporter-sample" / "dcgm-exporter-metrics.txt"

Row = tuple[str, tuple[tuple[str, str], ...], float, int | None]


def rows(result: ParseResult) -> list[Row]:
    s = result.samples
    return list(zip(s.names, s.labels, s.values, s.timestamps_ms, strict=True))


def one(text: str | bytes) -> Row:
    result = parse_exposition(text)
    assert result.errors == [], result.errors
    (row,) = rows(result)
    return row


def same_value(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def client_line(line: str) -> Row:
    """What prometheus_client says one sample line says (alone: no TYPE, so no renaming)."""
    (family,) = text_string_to_metric_families(line + "\n")
    (s,) = family.samples
    ts = None if s.timestamp is None else round(float(s.timestamp) * 1000)
    return s.name, tuple(sorted(s.labels.items())), float(s.value), ts


def assert_matches_client(text: str) -> int:
    """Every sample agrees with prometheus_client, line by line and over the whole page."""
    ours = parse_exposition(text)
    assert ours.errors == []
    got = rows(ours)
    lines = [ln for ln in text.split("\n") if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(got) == len(lines)
    for line, (name, labels, value, ts) in zip(lines, got, strict=True):
        c_name, c_labels, c_value, c_ts = client_line(line)
        assert (name, labels, ts) == (c_name, c_labels, c_ts), line
        assert same_value(value, c_value), line
    # The whole page: prometheus_client renames counter samples to *_total; undo that.
    theirs = [(fam, s) for fam in text_string_to_metric_families(text) for s in fam.samples]
    assert len(theirs) == len(got)
    for (fam, s), (name, labels, value, _) in zip(theirs, got, strict=True):
        renamed = fam.type == "counter" and s.name == fam.name + "_total" == name + "_total"
        assert name == s.name or renamed
        assert labels == tuple(sorted(s.labels.items()))
        assert same_value(value, float(s.value))
    return len(got)


# --- differential: real pages -------------------------------------------------------------


def test_matches_client_on_recorded_dcgm_exporter_page() -> None:
    """Every sample of a real dcgm-exporter page equals prometheus_client's reading of it."""
    if not DCGM_PAGE.is_file():
        pytest.skip(f"reference data not found at {DCGM_PAGE}")
    raw = DCGM_PAGE.read_bytes()
    assert not raw.endswith(b"\n")  # as recorded (PROVENANCE.md): the last line is still kept
    assert assert_matches_client(raw.decode()) > 30
    result = parse_exposition(raw)
    assert dict(result.samples.labels[-1])["pod"] == "ray-1111111"
    assert result.types["DCGM_FI_DEV_SM_CLOCK"] == "gauge"
    assert result.helps["DCGM_FI_DEV_SM_CLOCK"] == "SM clock frequency (in MHz)."


# --- differential and round trip: generated pages -----------------------------------------

ALPHABET = ['"', "\\", "\n", ",", "}", "{", "=", " ", "\t", "#", "a", "Z", "0", "é", "日", "🚀"]
ALPHABET += ["\\n", '\\"', '"}', '="', "} 1", "le", "\\\\"]
VALUES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e6, 1e-9, 1.5e300, 123456789012.0, 42.0]


def random_value(rng: random.Random) -> float:
    return rng.choice(VALUES) if rng.random() < 0.5 else rng.uniform(-1e3, 1e3)


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8)))


class RandomFamilies(Collector):
    """Seeded families of every kind with hostile label values and help texts."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def collect(self) -> Iterator[Metric]:
        rng = random.Random(self.seed)
        for i in range(12):
            names = rng.sample(["node", "gpu", "uuid", "mig_instance", "a", "z_z", "_x"], 3)
            kind = rng.choice(["gauge", "counter", "histogram", "summary"])
            name, doc = f"fam{i}:sub_{kind}", random_text(rng)
            series = [[random_text(rng) for _ in names] for _ in range(rng.randint(1, 6))]
            if kind == "histogram":
                hist = HistogramMetricFamily(name, doc, labels=names)
                for values in series:
                    buckets = [("0.5", 1.0), ("1e+06", 3.0), ("+Inf", 4.0)]
                    hist.add_metric(values, buckets, sum_value=random_value(rng))
                yield hist
            elif kind == "summary":
                summ = SummaryMetricFamily(name, doc, labels=names)
                for values in series:
                    summ.add_metric(values, count_value=3, sum_value=random_value(rng))
                yield summ
            else:
                fam = (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
                    name, doc, labels=names
                )
                for values in series:
                    ts = rng.choice([None, rng.randint(0, 2**41) / 1000])
                    fam.add_metric(values, random_value(rng), timestamp=ts)
                yield fam


@pytest.mark.parametrize("seed", range(25))
def test_round_trips_generate_latest_and_matches_client(seed: int) -> None:
    """Hostile label values (quotes, backslashes, newlines, '}', unicode) written by
    prometheus_client's generate_latest come back exactly, and agree with its parser."""
    registry = CollectorRegistry(auto_describe=False)
    collector = RandomFamilies(seed)
    registry.register(collector)
    page = generate_latest(registry)
    result = parse_exposition(page)
    assert result.errors == []
    expected: list[Row] = []
    for fam in collector.collect():
        for s in fam.samples:
            ts = None if s.timestamp is None else int(float(s.timestamp) * 1000)
            expected.append((s.name, tuple(sorted(s.labels.items())), float(s.value), ts))
        mname = fam.name + "_total" if fam.type == "counter" else fam.name
        assert result.helps[mname] == fam.documentation
        assert result.types[mname] == fam.type
    got = rows(result)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g[:2] == e[:2] and g[3] == e[3]
        assert same_value(g[2], e[2])
    assert_matches_client(page.decode())


LINE_POOL = [
    'm{a="x"} 1',
    'm{a="x"} 2 1700000000000',
    'm{a="x"}} 3',
    'm{a="x"',
    'm{a="}",b="x"} 4',
    'm{a="x\\"}"} 5',
    'm{a="x\\\\"} 6',
    'm {a="x"} 7',
    'm{a="x",} 8',
    'm{a="x"}9',
    "m 10",
    "m{} 11",
    'm{a="x"} 12 # {t="1"} 1 2',
    'm 13 # {t="}"} 1',
    'n{a="x",a="y"} 14',
    'n{a="x"b="y"} 15',
    'n{a="x"} 0x10',
    'n{a="x"} 1_000',
    'm{a="}"} 17',
    'm{a="x"5',
    'm{a="x","} 19',
    'm{a="x""y"} 22',
    'm{,a="x"} 23',
    'm{a="x",,} 24',
    'm{a="",a=""} 25',
    'm{a="x",a="x"} 26',
    'm{b="y",a="x"} 20',
    'm{a="x",b="y"} 21',
    'n{a="x"} NaN',
    'n{a="x"} 1 2 3',
    'n{ a = "x" ,\tb="y" } -Inf',
    "n{a=x} 1",
    '{a="x"} 1',
    "9n 1",
    "n",
    'n{a="' + "w" * 5000 + '"} 16',
]


@pytest.mark.parametrize("seed", range(10))
def test_line_results_do_not_depend_on_earlier_lines(seed: int) -> None:
    """The label and name caches never leak, and nothing raises: a shuffled page of tricky,
    broken and random junk lines gives the same samples and error count as each line alone."""
    rng = random.Random(seed)
    tokens = ["m", "{", "}", '"', ",", "=", "a", "\\", " ", "1", "#", "NaN", "\t", "é", '="x"']
    junk = ["".join(rng.choice(tokens) for _ in range(rng.randint(1, 12))) for _ in range(100)]
    lines = [rng.choice(LINE_POOL) if rng.random() < 0.7 else rng.choice(junk) for _ in range(300)]
    whole = parse_exposition("\n".join(lines) + "\n")
    alone = [parse_exposition(line + "\n") for line in lines]
    expected = [row for r in alone for row in rows(r)]
    got = rows(whole)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g[:2] == e[:2] and g[3] == e[3] and same_value(g[2], e[2])
    assert whole.error_count == sum(r.error_count for r in alone)


# --- explicit cases -----------------------------------------------------------------------


def test_escaped_label_values() -> None:
    """\\\\, \\" and \\n unescape; other escapes stay as written (as Prometheus keeps them)."""
    row = one('m{a="back\\\\slash",b="say \\"hi\\"",c="two\\nlines",d="tab\\t",e="\\\\n"} 1\n')
    assert dict(row[1]) == {
        "a": "back\\slash",
        "b": 'say "hi"',
        "c": "two\nlines",
        "d": "tab\\t",
        "e": "\\n",
    }


def test_commas_braces_and_equals_inside_quotes() -> None:
    """',', '}', '=' and '{' inside a quoted value are part of the value."""
    row = one('m{a="x,y",b="}",c="k=v",d="{",e="a\\"},b=\\""} 2\n')
    assert dict(row[1]) == {"a": "x,y", "b": "}", "c": "k=v", "d": "{", "e": 'a"},b="'}
    assert row[2] == 2.0


def test_labels_are_sorted_by_name() -> None:
    """Labels come back as a tuple sorted by label name, whatever the page's order (on the
    first sight of a name and on the fast path after it)."""
    result = parse_exposition('m{z="1",a="2",m="3"} 1\nm{z="4",a="5",m="6"} 2\nm{a="7"} 3\n')
    assert result.samples.labels == [
        (("a", "2"), ("m", "3"), ("z", "1")),
        (("a", "5"), ("m", "6"), ("z", "4")),
        (("a", "7"),),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NaN", math.nan),
        ("+Inf", math.inf),
        ("-Inf", -math.inf),
        ("1e+06", 1e6),
        ("-1.5e-3", -0.0015),
        ("17", 17.0),
        (".5", 0.5),
        ("1E3", 1000.0),
    ],
)
def test_special_and_exponent_values(text: str, expected: float) -> None:
    """Go-style floats: NaN, +Inf, -Inf and exponents parse to the right float."""
    assert same_value(one(f"m {text}\n")[2], expected)


def test_negative_zero_keeps_its_sign() -> None:
    """-0 is -0.0 (prometheus_client reads it as int 0 and loses the sign)."""
    value = one("m -0\n")[2]
    assert value == 0.0 and math.copysign(1.0, value) == -1.0


@pytest.mark.parametrize("bad", ["0x10", "0x1p3", "1_000", "\u0661", "abc", "1.2.3", "--1"])
def test_invalid_values_are_errors(bad: str) -> None:
    """Hex, underscores, non-ASCII digits and junk are errors; the line is skipped."""
    result = parse_exposition(f'good 1\nm{{a="b"}} {bad}\nm {bad}\n')
    assert result.samples.names == ["good"]
    assert result.error_count == 2
    assert result.errors[0].startswith("line 2: invalid value")


def test_timestamps_are_integer_milliseconds() -> None:
    """An optional integer timestamp is kept in ms; a float one is an error."""
    page = 'a 1 1700000000123\nb{x="y"} 2  -5\nc 3\nd 4 1.5\ne 5 12abc\nf 6 9223372036854775808\n'
    result = parse_exposition(page + "g 7 1 2\n")
    assert [r[3] for r in rows(result)] == [1700000000123, -5, None]
    assert result.error_count == 4  # a float, junk, one past int64, a token after it


def test_help_type_and_comments() -> None:
    """HELP unescapes \\\\ and \\n, TYPE records every known type, other comments are skipped."""
    kinds = ["counter", "gauge", "histogram", "summary", "untyped", "info", "stateset", "unknown"]
    page = '# HELP m first\\nsecond \\\\ \\"q\\"\n# a comment\n#\n# HELP\n# HELP m again\n'
    page += "".join(f"# TYPE t{i}\t{k} \n" for i, k in enumerate(kinds)) + "m 1\n"
    result = parse_exposition(page)
    assert result.helps == {"m": 'first\nsecond \\ \\"q\\"'}
    assert result.types == {f"t{i}": k for i, k in enumerate(kinds)}
    assert rows(result) == [("m", (), 1.0, None)]
    assert result.error_count == 2  # "# HELP" without a name, a second HELP for m


def test_bad_type_lines_are_errors() -> None:
    """An unknown type, a missing type and a second TYPE for a family are errors."""
    result = parse_exposition("# TYPE a bogus\n# TYPE b\n# TYPE c gauge\n# TYPE c counter\n")
    assert result.types == {"c": "gauge"}
    assert result.error_count == 3


def test_openmetrics_eof_stops_parsing() -> None:
    """`# EOF` ends the page; a sample after it is an error and not kept."""
    result = parse_exposition("a 1\n# EOF\n\nb 2\nc 3\n")
    assert result.samples.names == ["a"]
    assert result.errors == ["line 4: content after # EOF: 'b 2'"]
    clean = parse_exposition("a 1\n# EOF")
    assert clean.samples.names == ["a"] and clean.errors == []


def test_openmetrics_created_and_exemplars() -> None:
    """`_created` samples are ordinary samples; exemplars after the value are ignored (with
    or without a timestamp before them, and on label-less samples)."""
    page = (
        "# TYPE req counter\n"
        'req_total{path="/"} 7 # {trace_id="x y}"} 1 123\n'
        'req_created{path="/"} 1.7e+09\n'
        'req_total{path="/a"} 8 1000 # {trace_id="z"} 2\n'
        'bare_total 9 # {trace_id="q"} 1\n'
    )
    result = parse_exposition(page)
    assert result.errors == []
    assert rows(result) == [
        ("req_total", (("path", "/"),), 7.0, None),
        ("req_created", (("path", "/"),), 1.7e9, None),
        ("req_total", (("path", "/a"),), 8.0, 1000),
        ("bare_total", (), 9.0, None),
    ]


def test_names_with_colons_empty_sets_and_trailing_commas() -> None:
    """Colons in metric names, `{}` and a trailing comma in the label set are valid."""
    result = parse_exposition('job:rate:5m{} 1\nm{a="b",} 2\nm{a="b" , } 3\n')
    assert result.errors == []
    assert rows(result) == [
        ("job:rate:5m", (), 1.0, None),
        ("m", (("a", "b"),), 2.0, None),
        ("m", (("a", "b"),), 3.0, None),
    ]


def test_whitespace_variations() -> None:
    """Leading/trailing blanks, tabs, spaces around label terms and between tokens."""
    page = '  m 1\n\tm{ a = "b" ,\tc="d" }  2\t 5 \nm {a="b"}\t3   \nm\t4\n'
    result = parse_exposition(page)
    assert result.errors == []
    assert [(r[0], r[2], r[3]) for r in rows(result)] == [
        ("m", 1.0, None),
        ("m", 2.0, 5),
        ("m", 3.0, None),
        ("m", 4.0, None),
    ]
    assert rows(result)[1][1] == (("a", "b"), ("c", "d"))


def test_crlf_and_blank_lines() -> None:
    """CRLF line endings and blank lines change nothing."""
    lf = '# HELP m h\n# TYPE m gauge\n\nm{a="b"} 1\n\n\nm{a="c"} 2 77\n'
    crlf = parse_exposition(lf.replace("\n", "\r\n"))
    assert crlf.errors == []
    assert rows(crlf) == rows(parse_exposition(lf))
    assert crlf.helps == {"m": "h"} and rows(crlf)[1] == ("m", (("a", "c"),), 2.0, 77)


def test_max_series_cap() -> None:
    """max_series keeps the first N samples and sets truncated only if more exist."""
    page = "".join(f'm{{i="{i}"}} {i}\n' for i in range(10))
    capped = parse_exposition(page, max_series=4)
    assert capped.truncated and capped.samples.values == [0.0, 1.0, 2.0, 3.0]
    exact = parse_exposition(page, max_series=10)
    assert not exact.truncated and len(exact.samples) == 10
    assert not parse_exposition(page).truncated
    plain = parse_exposition("a 1\nb 2\nc 3\n", max_series=2)
    assert plain.truncated and plain.samples.names == ["a", "b"]
    for cap in (0, -1):  # nothing allowed: nothing kept
        none = parse_exposition(page, max_series=cap)
        assert none.truncated and len(none.samples) == 0


def test_oversized_label_value_drops_the_sample() -> None:
    """A 10 kB label value drops its sample with an error; the limit counts UTF-8 bytes."""
    page = f'm{{a="{"x" * 10_000}"}} 1\nm{{a="ok"}} 2\n'
    result = parse_exposition(page)
    assert rows(result) == [("m", (("a", "ok"),), 2.0, None)]
    assert result.errors[0].startswith("line 1: label a value is 10000 bytes (limit 4096)")
    assert len(result.errors[0]) < 200
    assert parse_exposition(f'm{{a="{"é" * 8}"}} 1\n', max_label_value_bytes=16).errors == []
    assert parse_exposition(f'm{{a="{"é" * 9}"}} 1\n', max_label_value_bytes=16).error_count == 1


def test_html_page_yields_no_samples() -> None:
    """An HTML page (a login proxy, a 404 page) gives zero samples and an error."""
    html = b"<!DOCTYPE html>\n<html><body>\nError 1\n</body></html>\n"
    result = parse_exposition(html)
    assert len(result.samples) == 0
    assert result.errors and "HTML" in result.errors[0]


def test_garbage_yields_errors_never_raises() -> None:
    """Binary junk and invalid UTF-8 give errors (with line numbers), never an exception."""
    rng = random.Random(7)
    junk = bytes(rng.randrange(256) for _ in range(5000))
    result = parse_exposition(junk)
    assert result.error_count > 0 and result.errors[0].startswith("line ")
    mixed = parse_exposition(b'ok 1\nbad{a="\xff"} 2\nok 3\n')
    assert mixed.samples.values == [1.0, 3.0]
    assert mixed.errors == ["line 2: invalid UTF-8 at byte 7 of the line"]


def test_last_line_without_newline() -> None:
    """A last line cut off mid-way is an error (earlier samples kept); a whole last line that
    only lacks its newline is kept, and so is `# EOF` without one."""
    cut = parse_exposition('a 1\nm{a="b",c="d')
    assert cut.samples.names == ["a"]
    assert cut.errors == ['line 2: malformed label set: \'m{a="b",c="d\'']
    assert parse_exposition("a 1\nb 2.").errors == []  # undetectable: "2." is a whole float
    whole = parse_exposition('a 1\nm{a="b"} 12')
    assert rows(whole)[1] == ("m", (("a", "b"),), 12.0, None) and whole.errors == []
    assert parse_exposition("a 1\n# EOF").errors == []


def test_errors_are_capped_with_a_count() -> None:
    """At most MAX_ERRORS messages are kept, then one line with the rest counted."""
    result = parse_exposition("bad line here\n" * 50 + "ok 1\n")
    assert len(result.errors) == MAX_ERRORS + 1
    assert result.errors[-1] == f"... and {50 - MAX_ERRORS} more errors"
    assert result.error_count == 50 and result.samples.names == ["ok"]
    assert all("\n" not in e for e in result.errors)


def test_malformed_label_sets_are_errors() -> None:
    """Missing quotes, missing commas, duplicate names, bad names and unclosed sets."""
    page = (
        'm{a=b} 1\nm{a="b"c="d"} 1\nm{a="b",a="c"} 1\nm{1a="b"} 1\nm{a="b" 1\n'
        'm{,} 1\n{a="b"} 1\n9m 1\nm{a="b"}\nm{a="x",a="x"} 1\nm{a="",a=""} 1\n'
    )
    result = parse_exposition(page)
    assert len(result.samples) == 0
    assert result.error_count == 11


def test_bytes_and_str_agree() -> None:
    """bytes input is decoded as UTF-8 once and parses the same as the str (a BOM is skipped)."""
    page = 'm{a="日本",b="🚀"} 1\n'
    assert rows(parse_exposition(page.encode())) == rows(parse_exposition(page))
    assert rows(parse_exposition(("\ufeff" + page).encode())) == rows(parse_exposition(page))
    assert rows(parse_exposition(page))[0][1] == (("a", "日本"), ("b", "🚀"))


def test_result_columns_are_reachable_from_the_result() -> None:
    """names/labels/values/timestamps_ms on the result are the sample columns."""
    result = parse_exposition('m{a="b"} 1 5\n')
    assert result.names is result.samples.names and result.labels == [(("a", "b"),)]
    assert result.values == [1.0] and result.timestamps_ms == [5]


def _same(a: ParseResult, b: ParseResult) -> bool:
    return (
        a.samples.names == b.samples.names
        and a.samples.labels == b.samples.labels
        and [repr(v) for v in a.samples.values] == [repr(v) for v in b.samples.values]
        and a.samples.timestamps_ms == b.samples.timestamps_ms
        and a.types == b.types
        and a.helps == b.helps
        and a.errors == b.errors
        and a.truncated == b.truncated
    )


def test_series_cache_never_changes_the_result() -> None:
    """With a per-target cache, each page parses exactly as it would without one: new
    series, values, a timestamp, an escape, changed HELP, a bad line, a tab and a cut."""
    from gpuscope.collector.scraping.parse import SeriesCache

    base = (
        "# HELP m_ratio a ratio\n# TYPE m_ratio gauge\n"
        'm_ratio{a="1",b="x y"} 0.5\nm_ratio{a="2",b="q\\"uote"} 1\n'
        "# TYPE c counter\nc_total 10\n"
    )
    pages = [
        base,
        base.replace("0.5", "0.75").replace("c_total 10", "c_total 11"),
        base + 'm_ratio{a="3",b=""} 2\n',
        base.replace("c_total 10", "c_total 12 1700000000000"),
        base.replace("a ratio", "another ratio"),
        base + "not a valid line {\n",
        base.replace("c_total 10", "c_total\t13"),
        base.replace("c_total 10", "c_total  14"),
        base.replace("0.5", "NaN"),
        base.replace("0.5", "1_000"),
        "  " + base,
        base,
    ]
    cache = SeriesCache()
    for page in pages:
        assert _same(parse_exposition(page, cache=cache), parse_exposition(page)), page
    capped = parse_exposition(base, cache=cache, max_series=2)
    assert _same(capped, parse_exposition(base, max_series=2))


def test_series_cache_makes_an_unchanged_page_a_lookup() -> None:
    """The second scrape of an unchanged page goes through the lookup path only."""
    from gpuscope.collector.scraping import parse as parse_module
    from gpuscope.collector.scraping.parse import SeriesCache

    page = "# TYPE m_ratio gauge\n" + "".join(f'm_ratio{{i="{i}"}} 0.{i}\n' for i in range(100))
    cache = SeriesCache()
    parse_exposition(page, cache=cache)
    assert len(cache.series) == 100
    calls = []
    real = parse_module._parse_known

    def spy(*args: object) -> object:
        result = real(*args)  # type: ignore[arg-type]
        calls.append(result is not None)
        return result

    parse_module._parse_known = spy  # type: ignore[assignment]
    try:
        again = parse_exposition(page.replace("0.5\n", "0.55\n"), cache=cache)
        assert calls == []  # same shape, new values: not even a lookup per line
        changed = parse_exposition(page + 'm_ratio{i="new"} 1\n', cache=cache)
        moved = parse_exposition(page.replace("0.5\n", "0.5\n\n"), cache=cache)
    finally:
        parse_module._parse_known = real
    # a new series: the lookup path misses, the full parser reads it; a blank line added:
    # the shape misses, the lookups hit
    assert calls == [False, True]
    assert again.samples.values[5] == 0.55
    assert len(changed.samples.names) == 101
    assert len(moved.samples.names) == 100


def _page(values: tuple[str, ...] = ("0.5", "1", "10")) -> str:
    a, b, c = values
    return (
        "# HELP m_ratio a ratio\n# TYPE m_ratio gauge\n"
        f'm_ratio{{a="1",b="x y"}} {a}\nm_ratio{{a="2",b="q\\"uote"}} {b}\n'
        f"# TYPE c counter\nc_total {c}\n"
    )


@pytest.mark.parametrize(
    "page",
    [
        _page(("0.25", "2", "11")),  # new values: the shape path
        _page(("NaN", "+Inf", "-Inf")),
        _page(("1e+06", "-0", "0.0")),
        _page(("1_000", "2", "3")),  # not a Go float: a parse error, as without the cache
        _page(("0x1p3", "2", "3")),
        _page(("1\t", "2", "3")),  # a tab after the value
        _page(("1", "2", "3 1700000000000")),  # a timestamp appears
        _page(("1", "2", "3 # {} 1")),  # an exemplar
        _page(("", "2", "3")),  # a missing value
        _page().replace('a="2"', 'a="3"'),  # a changed label set
        _page().replace('a="2",b', 'b="q\\"uote",a').replace('uote"}', 'x"}'),
        _page().replace("gauge", "counter"),  # same head "# TYPE m_ratio", other type
        _page().replace("a ratio", "a rate"),  # a HELP's last word
        _page() + _page().split("\n", 2)[2],  # duplicates, and a second TYPE line
        "\n".join(reversed(_page().splitlines())) + "\n",  # reordered
        _page().replace("c_total 10\n", "c_total 10"),  # no newline at the end
        _page().replace("c_total 10\n", "c_total 10\n\n"),  # a blank line more
        _page() + "# EOF\n",
        _page() + "# EOF\nc_total 1\n",
        _page().replace("\n", "\r\n"),
        "\ufeff" + _page(),
        _page().replace("c_total", "c_total "),  # two blanks before the value
    ],
)
def test_a_page_of_another_shape_or_odd_values_parses_as_without_the_cache(page: str) -> None:
    """The per-target page shape (values swapped into a known page) never changes a
    result: each variant, after a primed cache and before the original again, parses
    exactly as the full parser without a cache reads it."""
    from gpuscope.collector.scraping.parse import SeriesCache

    cache = SeriesCache()
    for _ in range(2):
        assert _same(parse_exposition(_page(), cache=cache), parse_exposition(_page()))
    assert cache.page is not None
    assert _same(parse_exposition(page, cache=cache), parse_exposition(page)), page
    assert _same(parse_exposition(page, cache=cache), parse_exposition(page)), page
    assert _same(parse_exposition(_page(), cache=cache), parse_exposition(_page()))


def test_a_steady_page_hands_back_the_same_series_columns() -> None:
    """Later stages recognise a target's unchanged series by the identity of the columns:
    the same label set gives the same lists, a changed one new lists."""
    from gpuscope.collector.scraping.parse import SeriesCache

    cache = SeriesCache()
    first = parse_exposition(_page(), cache=cache)
    second = parse_exposition(_page(("0.1", "0.2", "12")), cache=cache)
    assert second.names is first.names and second.labels is first.labels
    assert second.values == [0.1, 0.2, 12.0]
    other = parse_exposition(_page().replace('a="2"', 'a="9"'), cache=cache)
    assert other.labels is not first.labels
    assert dict(other.labels[1])["a"] == "9"
    capped = parse_exposition(_page(), cache=cache, max_series=2)
    assert capped.truncated and len(capped.names) == 2


def test_an_openmetrics_page_keeps_its_shape_across_scrapes() -> None:
    """An agent answers the collector in OpenMetrics (ending in `# EOF`): its steady page
    must take the shape path (same columns handed back, so the later stages skip their
    per-sample work) and still parse exactly as without a cache. It did not: the shape was
    dropped for every page with `# EOF`, so each scrape of every agent went through the
    full grammar (issue 27: most of the collector's CPU per stored sample)."""
    from gpuscope.collector.scraping.parse import SeriesCache

    def om(values: tuple[str, ...] = ("0.5", "1", "10")) -> str:
        return _page(values) + "# EOF\n"

    cache = SeriesCache()
    first = parse_exposition(om(), cache=cache)
    assert cache.page is not None
    second = parse_exposition(om(("0.25", "2", "11")), cache=cache)
    assert second.names is first.names and second.labels is first.labels
    assert second.values == [0.25, 2.0, 11.0]
    variants = [
        om(("0.25", "2", "11")),
        om() + "c_total 1\n",  # content after `# EOF`: an error, as without the cache
        om() + "\n",  # a blank line more after it
        om().replace("# EOF\n", "# EOF"),  # no newline after it
        om().replace("# EOF", "#  EOF "),
        _page(),  # the same page in the text format, no `# EOF`
        om(("1_000", "2", "3")),
        om(),
    ]
    for page in variants:
        assert _same(parse_exposition(page, cache=cache), parse_exposition(page)), page
        assert _same(parse_exposition(page, cache=cache), parse_exposition(page)), page


def test_a_steady_page_takes_only_its_changed_lines_values() -> None:
    """Scrape after scrape of one shape, the lines that did not change keep their values
    and those that did get theirs: every page parses as the full parser reads it, through
    the shape (the same series columns), whichever lines change, and a changed value the
    shape does not take (a timestamp, a "_") still goes to the full parser."""
    from gpuscope.collector.scraping.parse import SeriesCache

    cache = SeriesCache()
    first = parse_exposition(_page(), cache=cache)
    parse_exposition(_page(), cache=cache)
    seq = [("0.5", "1", "10"), ("0.5", "2", "10"), ("0.25", "2", "11"), ("0.25", "2", "11"),
           ("NaN", "3", "11"), ("1", "1", "10"), ("1", "1", "1e3")]  # fmt: skip
    for values in seq:
        got = parse_exposition(_page(values), cache=cache)
        assert _same(got, parse_exposition(_page(values))), values
        assert got.samples.names is first.samples.names
    shape = cache.page
    for odd in (("1", "1", "1_0"), ("1", "1 1700000000000", "10")):
        got = parse_exposition(_page(odd), cache=cache)
        assert _same(got, parse_exposition(_page(odd))), odd
    again = parse_exposition(_page(("7", "8", "9")), cache=cache)
    assert _same(again, parse_exposition(_page(("7", "8", "9"))))
    assert shape is not None and again.samples.values == [7.0, 8.0, 9.0]

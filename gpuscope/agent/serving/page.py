"""The agent's page, written straight from its series: Prometheus text 0.0.4 or OpenMetrics.

Why not prometheus_client: building one ``Metric`` family and one ``Sample`` per series,
then encoding them, sorting and escaping every label of every sample again, was most of a
scrape's CPU (~550 series a scrape, profiled in docs/agent.md), and importing the library
costs the agent's process memory for nothing it needs. Here each family's ``# HELP``/
``# TYPE`` lines are written once, and each series' ``name{label="value",...}`` prefix
(labels in name order, values escaped) is kept between scrapes while its label values do
not change: a scrape formats only the values. What a scrape no longer uses is dropped.

The bytes are what prometheus_client's ``generate_latest`` (text) and
``openmetrics.exposition.generate_latest`` write for the same families (tests hold it to
that, on hostile label values and special floats); :func:`negotiate` picks the format from
the scraper's ``Accept`` header by prometheus_client's own rules. All names come from the
catalogue, so they are valid without escaping.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Content types, as prometheus_client writes them.
TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_1_0_0 = "application/openmetrics-text; version=1.0.0; charset=utf-8"
_ESCAPINGS = ("allow-utf-8", "underscores", "dots", "values")

#: One family's samples: label values in its spec's label order, and the value.
Samples = list[tuple[Sequence[str], float]]


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """What a family's lines need: name (counters without ``_total``), type, help, labels."""

    name: str
    type: str  # "gauge" or "counter"
    help: str
    labels: tuple[str, ...]


def go_float(value: float) -> str:
    """A value as Prometheus clients write it (Go's formatting): ``1.0``, ``+Inf``, ``NaN``,
    and an exponent from seven integer digits on (``1.234567e+06``)."""
    if value - value == 0.0:  # finite: inf - inf and nan - nan are NaN
        text = repr(value)
        if value < 1e6:
            return text
        dot = text.find(".")
        if dot <= 6:  # already in exponent form (from 1e16 on), or not long enough
            return text
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def escape_label_value(value: str) -> str:
    """Backslash, double quote and newline escaped, as both formats want in label values."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def negotiate(accept: str) -> tuple[bool, str]:
    """``(openmetrics, content type)`` for an ``Accept`` header, by prometheus_client's rules:
    the first acceptable entry wins (no q-values), OpenMetrics from version 1.0.0 (or no
    version), text with a version from 1.0.0 says its escaping; anything else is text 0.0.4.
    """
    for entry in (accept or "").split(","):
        toks = entry.split(";")
        kind = toks[0].strip()
        if kind not in ("application/openmetrics-text", "text/plain"):
            continue
        params = [t.strip().split("=", 1) for t in toks[1:] if "=" in t]
        version = next((v for k, v in params if k == "version"), "")
        escaping = next((v for k, v in params if k == "escaping"), "underscores")
        if escaping not in _ESCAPINGS:
            escaping = "underscores"
        if kind == "application/openmetrics-text" and not version:
            return True, OPENMETRICS_1_0_0
        if version and _at_least_1(version):
            if kind == "application/openmetrics-text":
                return True, (
                    f"application/openmetrics-text; version={version}; charset=utf-8; "
                    f"escaping={escaping}"
                )
            return False, f"text/plain; version=1.0.0; charset=utf-8; escaping={escaping}"
    return False, TEXT_0_0_4


def _at_least_1(version: str) -> bool:
    """Whether a version such as ``1.0.0`` is 1.0.0 or later (an unreadable one is not)."""
    try:
        return tuple(int(part) for part in version.split(".")) >= (1, 0, 0)
    except ValueError:
        return False


class _Family:
    """A family's fixed text: headers in both formats, sample name, label order."""

    __slots__ = ("om_head", "order", "sample", "spec", "text_head")

    def __init__(self, spec: FamilySpec) -> None:
        self.spec = spec
        counter = spec.type == "counter"
        self.sample = f"{spec.name}_total" if counter else spec.name
        text_help = spec.help.replace("\\", r"\\").replace("\n", r"\n")
        om_help = text_help.replace('"', r"\"")
        self.text_head = f"# HELP {self.sample} {text_help}\n# TYPE {self.sample} {spec.type}\n"
        self.om_head = f"# HELP {spec.name} {om_help}\n# TYPE {spec.name} {spec.type}\n"
        #: (label name, index into the spec's label values), sorted by name as clients write
        self.order = sorted((name, i) for i, name in enumerate(spec.labels))

    def prefix(self, values: Sequence[str]) -> str:
        if not self.order:
            return f"{self.sample} "
        body = ",".join(f'{name}="{escape_label_value(values[i])}"' for name, i in self.order)
        return f"{self.sample}{{{body}}} "


class PageWriter:
    """Writes pages of a fixed set of families, keeping series prefixes between scrapes."""

    def __init__(self, specs: Iterable[FamilySpec]) -> None:
        self._families = {spec.name: _Family(spec) for spec in specs}
        self._prefixes: dict[tuple[str, tuple[str, ...]], str] = {}

    @property
    def cached_series(self) -> int:
        """How many series prefixes are kept (those of the last page)."""
        return len(self._prefixes)

    def render(self, samples: dict[str, Samples], *, openmetrics: bool = False) -> bytes:
        """The page of ``samples`` (family name -> samples), families in the writer's order;
        a family without samples is left out (as prometheus_client leaves it out)."""
        cached = self._prefixes
        used: dict[tuple[str, tuple[str, ...]], str] = {}
        out: list[str] = []
        append = out.append
        for name, fam in self._families.items():
            got = samples.get(name)
            if not got:
                continue
            append(fam.om_head if openmetrics else fam.text_head)
            for values, value in got:
                key = (name, tuple(values))
                prefix = cached.get(key)
                if prefix is None:
                    prefix = fam.prefix(values)
                used[key] = prefix
                if value - value == 0.0 and value < 1e6:  # the common case, inline
                    append(f"{prefix}{value!r}\n")
                else:
                    append(f"{prefix}{go_float(value)}\n")
        if openmetrics:
            append("# EOF\n")
        self._prefixes = used
        return "".join(out).encode("utf-8")

"""The one record every benchmark returns, so one runner can tabulate them all.

A figure is a single measured number with its unit, the aim the issue set for it (if any)
and, where one exists, a reference measured in the same run (node_exporter beside the
agent, Prometheus's TSDB beside the store, prometheus_client beside the parser): a figure
is only meaningful beside what people use today on the same machine at the same moment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bench.timing import Spread

NOT_INSTALLED = "not installed"


@dataclass(frozen=True)
class Reference:
    """What the figure is compared with, measured in the same run.

    ``value`` is None when the reference could not be measured; ``missing`` says why
    (``"not installed"`` for a reference tool that is absent).
    """

    label: str
    value: float | None = None
    unit: str = ""
    missing: str = ""
    #: min/median/p99 when the reference was timed N times (``value`` is then the median)
    spread: Spread | None = None

    @classmethod
    def not_installed(cls, label: str) -> Reference:
        return cls(label=label, missing=NOT_INSTALLED)

    @classmethod
    def timed(cls, label: str, spread: Spread, unit: str) -> Reference:
        """A reference timed N times beside the product (bench/timing.py)."""
        return cls(label=label, value=spread.median, unit=unit, spread=spread)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "label": self.label,
            "value": self.value,
            "unit": self.unit,
            "missing": self.missing,
        }
        if self.spread is not None:
            d["spread"] = self.spread.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Reference:
        spread = d.get("spread")
        return cls(
            label=str(d["label"]),
            value=None if d.get("value") is None else float(d["value"]),
            unit=str(d.get("unit", "")),
            missing=str(d.get("missing", "")),
            spread=None if spread is None else Spread.from_dict(spread),
        )


@dataclass(frozen=True)
class Figure:
    """One measured number. ``key`` marks the figures the issue's aims are about (bold)."""

    name: str
    value: float
    unit: str
    aim: str | None = None
    reference: Reference | None = None
    notes: str = ""
    key: bool = False
    #: min/median/p99 of N timed runs (``value`` is then the median); None for a figure
    #: measured once by nature (a size on disk, a count, one build)
    spread: Spread | None = None

    @classmethod
    def timed(
        cls,
        name: str,
        spread: Spread,
        unit: str,
        *,
        aim: str | None = None,
        reference: Reference | None = None,
        notes: str = "",
        key: bool = False,
    ) -> Figure:
        """A figure from N timed runs: its value is the median, the row shows min and p99."""
        return cls(name, spread.median, unit, aim, reference, notes, key, spread)

    def to_dict(self) -> dict[str, Any]:
        ref = self.reference
        d: dict[str, Any] = {
            "name": self.name,
            "value": None if math.isnan(self.value) else self.value,
            "unit": self.unit,
            "aim": self.aim,
            "reference": None if ref is None else ref.to_dict(),
            "notes": self.notes,
            "key": self.key,
        }
        if self.spread is not None:
            d["spread"] = self.spread.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Figure:
        ref = d.get("reference")
        value = d.get("value")
        spread = d.get("spread")
        return cls(
            name=str(d["name"]),
            value=float("nan") if value is None else float(value),
            unit=str(d.get("unit", "")),
            aim=d.get("aim"),
            reference=None if ref is None else Reference.from_dict(ref),
            notes=str(d.get("notes", "")),
            key=bool(d.get("key", False)),
            spread=None if spread is None else Spread.from_dict(spread),
        )


def format_value(value: float | None, unit: str = "") -> str:
    """Three significant digits, thousands separated; whole counts stay exact."""
    if value is None or math.isnan(value):
        return "n/a"
    value = float(value)
    a = abs(value)
    if value.is_integer() and a < 1e7:
        text = f"{int(value):,}"
    elif a >= 1000:
        text = f"{float(f'{value:.3g}'):,.0f}"
    elif a >= 100:
        text = f"{value:.0f}"
    elif a >= 10:
        text = f"{value:.1f}"
    elif a >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3g}"
    if unit in {"×", "%"}:
        return f"{text}{unit}"
    return f"{text} {unit}" if unit else text


def spread_suffix(unit: str, spread: Spread | None) -> str:
    """`` (min …, p99 …; n runs)`` after a median, or nothing for a figure measured once."""
    if spread is None:
        return ""
    lo, hi = format_value(spread.min, unit), format_value(spread.p99, unit)
    return f" (min {lo}, p99 {hi}; {spread.n} runs)"


def format_spread(value: float | None, unit: str, spread: Spread | None) -> str:
    """``value`` alone, or ``median (min …, p99 …; n runs)`` when it was timed N times."""
    return format_value(value, unit) + spread_suffix(unit, spread)


def print_figures(figures: list[Figure]) -> None:
    """What ``python bench/X.py`` prints: one line a figure, reference beside it."""
    for f in figures:
        line = f"{f.name}: {format_spread(f.value, f.unit, f.spread)}"
        if f.reference is not None:
            r = f.reference
            ref = r.missing or format_spread(r.value, r.unit, r.spread)
            line += f"   [{r.label}: {ref}]"
        if f.aim:
            line += f"   (aim {f.aim})"
        if f.notes:
            line += f"   -- {f.notes}"
        print(line)


@dataclass(frozen=True)
class ModuleResult:
    """What one benchmark module gave: its figures, or why it gave none."""

    name: str
    area: str
    status: str  # "ok", "missing" (module not there yet) or "error"
    seconds: float = 0.0
    figures: tuple[Figure, ...] = ()
    error: str = ""
    #: When it ran ("2026-11-25 22:19 UTC"): a run with ``--only`` keeps the other modules'
    #: earlier figures, so each module's table says when its own were measured.
    measured: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "area": self.area,
            "status": self.status,
            "seconds": round(self.seconds, 2),
            "error": self.error,
            "measured": self.measured,
            "figures": [f.to_dict() for f in self.figures],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModuleResult:
        return cls(
            name=str(d["name"]),
            area=str(d["area"]),
            status=str(d["status"]),
            seconds=float(d.get("seconds", 0.0)),
            figures=tuple(Figure.from_dict(f) for f in d.get("figures", [])),
            error=str(d.get("error", "")),
            measured=str(d.get("measured", "")),
        )

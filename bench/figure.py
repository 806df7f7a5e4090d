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

    @classmethod
    def not_installed(cls, label: str) -> Reference:
        return cls(label=label, missing=NOT_INSTALLED)


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

    def to_dict(self) -> dict[str, Any]:
        ref = self.reference
        return {
            "name": self.name,
            "value": None if math.isnan(self.value) else self.value,
            "unit": self.unit,
            "aim": self.aim,
            "reference": None
            if ref is None
            else {"label": ref.label, "value": ref.value, "unit": ref.unit, "missing": ref.missing},
            "notes": self.notes,
            "key": self.key,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Figure:
        ref = d.get("reference")
        value = d.get("value")
        return cls(
            name=str(d["name"]),
            value=float("nan") if value is None else float(value),
            unit=str(d.get("unit", "")),
            aim=d.get("aim"),
            reference=None
            if ref is None
            else Reference(
                label=str(ref["label"]),
                value=None if ref.get("value") is None else float(ref["value"]),
                unit=str(ref.get("unit", "")),
                missing=str(ref.get("missing", "")),
            ),
            notes=str(d.get("notes", "")),
            key=bool(d.get("key", False)),
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


def print_figures(figures: list[Figure]) -> None:
    """What ``python bench/X.py`` prints: one line a figure, reference beside it."""
    for f in figures:
        line = f"{f.name}: {format_value(f.value, f.unit)}"
        if f.reference is not None:
            r = f.reference
            ref = r.missing or format_value(r.value, r.unit)
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "area": self.area,
            "status": self.status,
            "seconds": round(self.seconds, 2),
            "error": self.error,
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
        )

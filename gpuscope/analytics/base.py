"""What every detector returns: findings of the shared shape and headline numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuscope.core.records import Finding


@dataclass(frozen=True, slots=True)
class Analysis:
    """A detector's answer: findings (docs/design.md shape) and a summary of headline numbers.

    ``summary`` holds plain JSON values; its numbers become collector gauges for Grafana and
    the ``summary`` object of ``gpuscope analyze ... --json``.
    """

    kinds: tuple[str, ...]
    findings: list[Finding] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

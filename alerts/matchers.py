"""Label matchers in Alertmanager's syntax: ``name="value"``, ``!=``, ``=~`` and ``!~``.

Routes, silences and inhibition rules select alerts with them. Regular expressions are
anchored (they match the whole value), as in Alertmanager; a missing label is "".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

Op = Literal["=", "!=", "=~", "!~"]
_MATCHER = re.compile(r"^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


@dataclass(frozen=True, slots=True)
class Matcher:
    name: str
    op: Op
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        hit = re.fullmatch(self.value, got) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.name}{self.op}"{escaped}"'


def parse_matcher(text: str) -> Matcher:
    """``name=value``, ``name="value"``, ``name=~"regex"``... -> Matcher (ValueError if not)."""
    m = _MATCHER.match(text)
    if m is None:
        raise ValueError(f"bad matcher {text!r}: expected name=value, !=, =~ or !~")
    name, op, value = m.groups()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    if op in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"bad regular expression in {text!r}: {exc}") from None
    return Matcher(name, op, value)  # type: ignore[arg-type]


def parse_matchers(texts: Iterable[str]) -> tuple[Matcher, ...]:
    return tuple(parse_matcher(t) for t in texts)


def match_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)

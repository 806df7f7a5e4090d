"""Label matchers in Alertmanager's syntax: ``name="value"``, ``!=``, ``=~`` and ``!~``.

Routes, silences and inhibition rules select alerts with them. Regular expressions are
anchored (they match the whole value), as in Alertmanager; a missing label is "".

Regular expressions run on RE2 (``google-re2``), the engine Alertmanager's Go ``regexp``
uses: its syntax, and matching in time linear in the label value. Python's backtracking
``re`` would let one silence such as ``(a+)+$`` hold the alerts job for hours on a long
label value; RE2 refuses what it cannot run in linear time (backreferences, look-around).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import re2

Op = Literal["=", "!=", "=~", "!~"]
_MATCHER = re.compile(r"^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")
#: The longest matcher accepted (Alertmanager has no limit; a label value is short).
MAX_MATCHER_LENGTH = 1024
#: RE2's memory budget for one compiled expression; a larger program is refused.
_RE2_MAX_MEM = 1 << 20


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # the error goes into our ValueError, not to stderr
    options.max_mem = _RE2_MAX_MEM
    return options


_OPTIONS = _re2_options()


def compile_regex(value: str) -> Any:
    """An anchored RE2 program for ``value``; ValueError with RE2's reason if it has none."""
    try:
        return re2.compile(f"^(?:{value})$", _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(str(reason)) from None


@dataclass(frozen=True, slots=True)
class Matcher:
    name: str
    op: Op
    value: str
    #: The compiled expression of ``=~`` and ``!~`` (RE2, anchored).
    regex: Any = field(default=None, compare=False, repr=False)

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        regex = self.regex if self.regex is not None else compile_regex(self.value)
        hit = regex.search(got) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.name}{self.op}"{escaped}"'


def parse_matcher(text: str) -> Matcher:
    """``name=value``, ``name="value"``, ``name=~"regex"``... -> Matcher (ValueError if not)."""
    if len(text) > MAX_MATCHER_LENGTH:
        raise ValueError(f"matcher longer than {MAX_MATCHER_LENGTH} characters")
    m = _MATCHER.match(text)
    if m is None:
        raise ValueError(f"bad matcher {text!r}: expected name=value, !=, =~ or !~")
    name, op, value = m.groups()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    regex = None
    if op in ("=~", "!~"):
        try:
            regex = compile_regex(value)
        except ValueError as exc:
            raise ValueError(f"bad regular expression in {text!r}: {exc}") from None
    return Matcher(name, op, value, regex)  # type: ignore[arg-type]


def parse_matchers(texts: Iterable[str]) -> tuple[Matcher, ...]:
    return tuple(parse_matcher(t) for t in texts)


def match_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)

"""The common CEL device selectors of DRA, evaluated on a device record.

A claim or DeviceClass selects devices with CEL expressions over ``device.driver``,
``device.attributes[<domain>].<name>`` and ``device.capacity[<domain>].<name>``. gpuscope
does not embed a CEL interpreter; it understands what GPU claims write in practice: a
conjunction (``&&``) of

- ``device.driver == 'gpu.nvidia.com'`` (and ``!=``);
- ``device.attributes['gpu.nvidia.com'].type == 'mig'`` (strings, integers, booleans;
  ``==``/``!=``), and ``... .productName in ['A', 'B']``;
- ``'profile' in device.attributes['gpu.nvidia.com']`` (the attribute exists);
- ``device.capacity['gpu.nvidia.com'].memory >= quantity('40Gi')`` and the
  ``.compareTo(quantity('40Gi')) >= 0`` form (``>=``, ``>``, ``<=``, ``<``, ``==``).

Any other clause is *not understood*: it is taken as true (the device may match) and
reported, so a caller can say plainly which selector it could not read rather than
silently counting wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuscope.collector.cluster.dra_records import DraDevice
from gpuscope.collector.cluster.inventory_records import parse_quantity

_Q = r"""(?:'([^']*)'|"([^"]*)")"""
_DRIVER = re.compile(rf"^device\.driver\s*(==|!=)\s*{_Q}$")
_ATTR = re.compile(rf"^device\.attributes\[{_Q}\]\.(\w+)\s*(==|!=)\s*(.+)$")
_ATTR_IN = re.compile(rf"^device\.attributes\[{_Q}\]\.(\w+)\s+in\s+\[(.*)\]$")
_HAS = re.compile(rf"^{_Q}\s+in\s+device\.attributes\[{_Q}\]$")
_CAP = re.compile(rf"^device\.capacity\[{_Q}\]\.(\w+)\s*(>=|<=|==|>|<)\s*quantity\(\s*{_Q}\s*\)$")
_CAP_CMP = re.compile(
    rf"^device\.capacity\[{_Q}\]\.(\w+)\.compareTo\(\s*quantity\(\s*{_Q}\s*\)\s*\)"
    r"\s*(>=|<=|==|>|<)\s*(-?\d+)$"
)
_OPS = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the device matches, and the clauses that were not understood."""

    matches: bool
    not_understood: tuple[str, ...] = ()


def _q(m: re.Match[str], i: int) -> str:
    return m.group(i) if m.group(i) is not None else (m.group(i + 1) or "")


def _literal(text: str) -> str | int | bool | None:
    text = text.strip()
    m = re.fullmatch(_Q, text)
    if m:
        return _q(m, 1)
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return None


def _strip_parens(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _clauses(expression: str) -> list[str] | None:
    """The top-level ``&&`` clauses; None when the expression has a top-level ``||``."""
    text = _strip_parens(expression)
    out, depth, start, quote = [], 0, 0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and text.startswith("&&", i):
            out.append(text[start:i])
            start, i = i + 2, i + 2
            continue
        elif depth == 0 and text.startswith("||", i):
            return None
        i += 1
    out.append(text[start:])
    return [_strip_parens(c) for c in out if c.strip()]


def _clause(clause: str, device: DraDevice) -> bool | None:
    """The clause's value on the device, None when not understood."""
    m = _DRIVER.match(clause)
    if m:
        return (device.driver == _q(m, 2)) == (m.group(1) == "==")
    m = _ATTR.match(clause)
    if m:
        want = _literal(m.group(5))
        if want is None:
            return None
        have = device.attributes.get(m.group(3))
        return (have == want) == (m.group(4) == "==")
    m = _ATTR_IN.match(clause)
    if m:
        items = [_literal(x) for x in m.group(4).split(",") if x.strip()]
        if any(x is None for x in items):
            return None
        return device.attributes.get(m.group(3)) in items
    m = _HAS.match(clause)
    if m:
        return _q(m, 1) in device.attributes
    m = _CAP.match(clause)
    if m:
        cap = device.capacity.get(m.group(3))
        return cap is not None and bool(_OPS[m.group(4)](cap, parse_quantity(_q(m, 5))))
    m = _CAP_CMP.match(clause)
    if m:
        size = device.capacity.get(m.group(3))
        if size is None:
            return False
        bound = parse_quantity(_q(m, 4))
        sign = (size > bound) - (size < bound)
        return bool(_OPS[m.group(6)](sign, int(m.group(7))))
    return None


def evaluate(expressions: tuple[str, ...] | list[str], device: DraDevice) -> Verdict:
    """All the expressions on one device (a claim's and its class's selectors)."""
    unknown: list[str] = []
    for expression in expressions:
        clauses = _clauses(expression)
        if clauses is None:
            unknown.append(expression)
            continue
        for clause in clauses:
            value = _clause(clause, device)
            if value is None:
                unknown.append(clause)
            elif not value:
                return Verdict(False, tuple(unknown))
    return Verdict(True, tuple(unknown))


def wanted_attributes(expressions: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Attribute equalities the expressions require (``type``, ``profile``,
    ``productName``...): what a pending request asks for, without a device to test."""
    out: dict[str, str] = {}
    for expression in expressions:
        for clause in _clauses(expression) or ():
            m = _ATTR.match(clause)
            if m and m.group(4) == "==":
                value = _literal(m.group(5))
                if isinstance(value, str):
                    out[m.group(3)] = value
    return out


_NO_DEVICE = DraDevice(driver="", pool="", name="", node="")


def not_understood(expressions: tuple[str, ...] | list[str]) -> list[str]:
    """The clauses (or whole expressions, for a top-level ``||``) this module cannot read."""
    out: list[str] = []
    for expression in expressions:
        clauses = _clauses(expression)
        if clauses is None:
            out.append(expression)
            continue
        out += [c for c in clauses if _clause(c, _NO_DEVICE) is None]
    return out

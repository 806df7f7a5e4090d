"""How InfiniBand counter and attribute values read from sysfs become readings: the rate
text, the 64-bit twins preferred over the 32-bit PMA counters, data words to bytes, and the
reasons a value is left out (gpuscope/agent/devices/infiniband.py's docstring says why each rule).
Pure functions over the values one port's directories gave.
"""

from __future__ import annotations

import math

_U32_MAX = 0xFFFFFFFF


def _after_colon(text: str) -> str:
    """``"4: ACTIVE"`` -> ``"ACTIVE"``; text without a colon is kept whole."""
    head, sep, tail = text.partition(":")
    return tail.strip() if sep else head


def _parse_rate(text: str) -> tuple[float | None, str]:
    """Bytes per second from the rate file, or ``None`` and a reason to count ("" if none)."""
    if not text:
        return None, ""
    parts = text.split(None, 2)
    if len(parts) < 2 or parts[1] != "Gb/sec":
        return None, ""
    try:
        gbits = float(parts[0])
    except ValueError:
        return None, ""
    if not (math.isfinite(gbits) and gbits >= 0):  # "nan Gb/sec", "inf Gb/sec", "-5 Gb/sec"
        return None, "not_finite"
    return gbits * 1e9 / 8, ""


def parse_rate(text: str) -> float | None:
    """``"40 Gb/sec (4X QDR)"`` or ``"2.5 Gb/sec"`` -> bytes per second (``None`` if unknown)."""
    return _parse_rate(text)[0]


def _not_an_integer(raw: bytes) -> str:
    """The reason a counter file without an integer is counted under: "" (not counted)
    for what drivers write on purpose (``N/A (no PMA)`` on iWARP, an empty file), which
    recurs on every scrape of such a device; ``not_an_integer`` for anything else."""
    text = raw.strip()
    return "" if not text or text.startswith(b"N/A") else "not_an_integer"


def _prefer_64(
    ext: dict[str, int],
    counters: dict[str, int],
    name: str,
    garbage: frozenset[str] | set[str] = frozenset(),
) -> tuple[int | None, str]:
    """The 64-bit counter where the device has a working one, else the ``counters/`` value;
    and a reason to count when the pair has no usable value ("" otherwise).

    Some mlx4 firmware creates ``counters_ext`` but never updates it: a 64-bit file reading 0
    while its 32-bit twin has counted is unsupported, not silence (seen in node_exporter's
    fixture: packets_64 = 0 beside 6,235,865 packets). A 32-bit twin stuck at its maximum is
    no value either: nothing is exported rather than a jump to 2**32-1.
    """
    wide = ext.get(name + "_64")
    narrow = counters.get(name)
    if wide == 0 and narrow == _U32_MAX:
        return None, "saturated_32bit"
    if wide == 0 and name in garbage:  # a dead 64-bit twin beside garbage: no value, not 0
        return None, "dead_64bit"
    if wide is None or (wide == 0 and narrow):
        return narrow, ""
    return wide, ""


def _words_to_bytes(
    ext: dict[str, int],
    counters: dict[str, int],
    name: str,
    garbage: frozenset[str] | set[str] = frozenset(),
) -> tuple[int | None, bool, str]:
    """Bytes of one data counter, preferring the 64-bit file; whether it is saturated; and a
    reason to count when it has no usable value."""
    words, reason = _prefer_64(ext, counters, name, garbage)
    if reason:
        return None, True, reason
    if words is not None and name + "_64" in ext and words == ext[name + "_64"]:
        return words * 4, False, ""
    words = counters.get(name)
    if words is None:
        return None, False, ""
    return words * 4, words == _U32_MAX, ""

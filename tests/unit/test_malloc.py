"""gpuscope/core/malloc.py: glibc's settings are asked for through mallopt with glibc's
parameter numbers (malloc.h), and nothing fails where there is no glibc."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscope.core import malloc


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_each_setting_is_its_mallopt_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = FakeLibc()
    monkeypatch.setattr(malloc.ctypes, "CDLL", lambda name: libc)
    assert malloc.return_freed_memory()
    assert malloc.limit_malloc_arenas(3)
    # M_MMAP_THRESHOLD is -3 and M_ARENA_MAX -8 in glibc's malloc.h
    assert libc.calls == [(-3, 128 * 1024), (-8, 3)]


def test_without_glibc_nothing_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Any:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(malloc.ctypes, "CDLL", missing)
    assert not malloc.return_freed_memory()
    assert not malloc.limit_malloc_arenas()

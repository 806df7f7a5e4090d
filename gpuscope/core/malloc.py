"""glibc malloc's settings for a process sized for a small machine, set through
``mallopt`` from inside it (as the ``MALLOC_*`` environment variables would from outside).
Each returns whether it applied: on another C library it does nothing."""

from __future__ import annotations

import ctypes

_M_ARENA_MAX = -8  # from glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def _mallopt(param: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(param, value))
    except (OSError, AttributeError):
        return False


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas (as ``MALLOC_ARENA_MAX`` would). The collector's threads
    (scrape loop, page parsing, writer, API, jobs) each get an arena by default, up to 8 per
    core, and each keeps the memory its thread freed: peak RSS beside four hostile targets
    measured 455 MB so and 406 MB capped at two."""
    return _mallopt(_M_ARENA_MAX, arenas)


def return_freed_memory(threshold: int = 128 * 1024) -> bool:
    """Have glibc's malloc hand freed memory back to the system as it goes (as
    ``MALLOC_MMAP_THRESHOLD_`` would): blocks of ``threshold`` bytes and more mapped on their
    own and unmapped when freed, and the heap's free top trimmed past the same size. By
    default glibc raises both thresholds (up to 32 and 64 MB) each time a large block is
    freed, and keeps what the freed blocks held; ``gpuscope demo``'s peak (the queries and
    replays of the weekly report, then the detectors and policies, each on top of what the
    ones before left) measured 10-15 MB lower so (issue 39)."""
    return _mallopt(_M_MMAP_THRESHOLD, threshold)

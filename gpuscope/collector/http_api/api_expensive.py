"""The gate of the expensive read routes: ``GET /api/v1/whatif``, ``/api/v1/analyze`` and
``/api/v1/report/weekly``.

Each runs a replay, every analysis or a week's report on the live store: seconds to
minutes of CPU and up to gigabytes of memory (seen, issue 38: two concurrent what-if
requests of 30 seeds took 79 s each and left the collector at 1.35 GB). They are open to
readers like every read route unless ``collector.expensive_reads_require_token``, and at
most ``collector.expensive_reads_concurrency`` of them run at once: one more is answered
429 with ``Retry-After``, never queued. After each, the memory it freed is handed back to
the operating system (a full collection, then glibc's ``malloc_trim``), so the collector's
resident size returns near its baseline instead of keeping the request's peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading
from collections.abc import Callable, Iterator

from fastapi import HTTPException, Request

log = logging.getLogger(__name__)

#: Seconds a client is told to wait before it asks again.
RETRY_AFTER_SECONDS = 30


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def release_memory() -> None:
    """Hand the memory a finished request freed back to the operating system."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


def expensive_gate(
    concurrency: int, check: Callable[[Request], None]
) -> Callable[[Request], Iterator[None]]:
    """A dependency for the expensive routes: ``check`` (the token checks) first, then a
    place among ``concurrency`` (429 when none is free), released, with the memory, after."""
    places = threading.BoundedSemaphore(concurrency)

    def gate(request: Request) -> Iterator[None]:
        check(request)
        if not places.acquire(blocking=False):
            raise HTTPException(
                429,
                f"{concurrency} expensive request(s) already running on this collector "
                "(what-if, analyze, weekly report); retry later",
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        try:
            yield
        finally:
            places.release()
            release_memory()

    return gate

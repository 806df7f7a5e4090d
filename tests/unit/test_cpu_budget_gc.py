"""A page's CPU cost leaves out the garbage collector's time (cpu_budget.py): a full
collection walks every live object of the process and runs in whichever thread allocates,
so charged to the page it interrupted it would silence a healthy target."""

from __future__ import annotations

import gc
import time

import pytest

from gpuscope.collector.scraping.cpu_budget import own_cpu_seconds


def test_a_full_collection_is_not_counted_as_the_threads_own_cpu() -> None:
    live = [{"k": (i, str(i))} for i in range(1_000_000)]  # tracked objects to walk
    try:
        own, spent = own_cpu_seconds(), time.thread_time()
        gc.collect()
        gc.collect()
        spent, own = time.thread_time() - spent, own_cpu_seconds() - own
    finally:
        del live
    assert spent > 0.02, spent  # the collections did cost this thread CPU
    assert own < 0.1 * spent, (own, spent)  # and none of it is the thread's own


def test_work_outside_a_collection_is_counted_whole() -> None:
    gc.disable()
    try:
        own, spent = own_cpu_seconds(), time.thread_time()
        total = sum(i * i for i in range(2_000_000))
        spent, own = time.thread_time() - spent, own_cpu_seconds() - own
    finally:
        gc.enable()
    assert total > 0 and spent > 0.02
    assert own == pytest.approx(spent, abs=1e-3)  # read a moment apart

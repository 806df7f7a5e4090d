"""A page's budget cost on a starved CPU: its CPU stretched by the run-queue wait its
thread met (issue 38; gpuscope/collector/scraping/cpu_budget.py). Pure: the scheduler's
times are given, not measured."""

from __future__ import annotations

import pytest

from gpuscope.collector.scraping.cpu_budget import Meter, Stretch, page_cost, ticks_to_skip


def test_a_churning_page_on_a_starved_cpu_is_charged_the_wall_time_it_needed() -> None:
    """0.14 s of CPU at a fiftieth of a core: charged ~7 s, so it gives its next ticks
    away (the CPU alone, 0.14 s, was under the 0.2 s budget of a 2 s interval)."""
    start = Meter(own_cpu=1.0, sched=(10.0, 5.0))
    end = Meter(own_cpu=1.14, sched=(10.14, 12.0))
    cpu, cost = page_cost(start, end, Stretch())
    assert cpu == pytest.approx(0.14)
    assert cost == pytest.approx(0.14 * 7.14 / 0.14)
    assert ticks_to_skip(cpu, 2.0) == 0
    assert ticks_to_skip(cost, 2.0) == 30


def test_a_tiny_page_is_charged_the_recent_stretch_not_one_preemption() -> None:
    stretch = Stretch()
    for _ in range(50):  # the process gets about a tenth of a core
        stretch.add(0.01, 0.09)
    # a 1 ms parse that a 0.2 s preemption fell into: not charged 200 times its CPU
    factor = stretch.add(0.001, 0.2)
    assert 10 <= factor < 20
    calm = Stretch()
    for _ in range(50):
        calm.add(0.01, 0.0)
    assert calm.add(0.001, 0.2) < 5  # a healthy page's 5 ms cost: far under any budget


def test_a_big_page_is_charged_mostly_its_own_stretch() -> None:
    stretch = Stretch()
    for _ in range(50):
        stretch.add(0.001, 0.0)  # unstarved until now
    assert stretch.add(0.14, 7.0) > 40


def test_without_schedstat_the_cost_is_the_cpu() -> None:
    cpu, cost = page_cost(Meter(1.0, None), Meter(1.2, None), Stretch())
    assert (cpu, cost) == pytest.approx((0.2, 0.2))
    # a thread that never waited: no stretch
    cpu, cost = page_cost(Meter(1.0, (5.0, 1.0)), Meter(1.2, (5.2, 1.0)), Stretch())
    assert cost == pytest.approx(cpu)

"""bench/timing.py: N timed runs give min/median/p99, product and reference alternate."""

from collections.abc import Callable

import pytest

from bench.figure import Figure, Reference
from bench.output import markdown
from bench.timing import Spread, time_alternating, time_round_robin
from tests.unit.test_bench_output import MACHINE


def test_spread_of_timings_is_min_median_and_nearest_rank_p99() -> None:
    assert Spread.of([3.0, 1.0, 2.0]) == Spread(1.0, 2.0, 3.0, 3)
    assert Spread.of([4.0, 1.0, 2.0, 3.0]).median == 2.5
    hundred = Spread.of([float(i) for i in range(1, 101)])
    assert (hundred.min, hundred.median, hundred.p99) == (1.0, 50.5, 99.0)
    # fewer than 100 runs: p99 is the slowest run, not an interpolation below it
    assert Spread.of([1.0] * 9 + [10.0]).p99 == 10.0
    with pytest.raises(ValueError):
        Spread.of([])


def test_rate_turns_the_slow_tail_of_times_into_the_slow_tail_of_rates() -> None:
    rate = Spread(1.0, 2.0, 4.0, 3).rate(100.0)
    assert (rate.min, rate.median, rate.p99) == (100.0, 50.0, 25.0)
    assert Spread(1.0, 2.0, 4.0, 3).scaled(1000) == Spread(1000.0, 2000.0, 4000.0, 3)


def test_product_and_reference_alternate_and_are_timed_apart() -> None:
    # each callable advances an injected clock by its planned duration: the timings are
    # then exactly those planned, whatever the machine's load
    now = [0.0]
    calls: list[str] = []
    planned = {"p": iter([1.0, 2.0, 3.0, 4.0]), "r": iter([10.0, 20.0, 30.0, 40.0])}

    def call(name: str) -> str:
        calls.append(name)
        now[0] += next(planned[name])
        return name.upper()

    t = time_alternating(lambda: call("p"), reference=lambda: call("r"), n=4, clock=lambda: now[0])
    assert calls == ["p", "r", "r", "p", "p", "r", "r", "p"]
    assert t.product == Spread(1.0, 2.5, 4.0, 4)
    assert t.reference == Spread(10.0, 25.0, 40.0, 4)
    assert (t.result, t.reference_result) == ("P", "R")


def test_warmup_rounds_are_run_but_not_timed() -> None:
    ran: list[int] = []
    t = time_alternating(lambda: ran.append(1), n=3, warmup=2)
    assert len(ran) == 5 and t.product.n == 3 and t.reference is None
    with pytest.raises(ValueError):
        time_alternating(lambda: None, n=0)


def test_a_timed_figure_shows_its_median_min_and_p99_and_reads_back() -> None:
    from bench.figure import ModuleResult
    from bench.output import read_results, results_json

    spread = Spread(0.0042, 0.0051, 0.0093, 50)
    fig = Figure.timed(
        "full scrape",
        spread.scaled(1000),
        "ms",
        reference=Reference.timed(
            "node_exporter", Spread(0.0063, 0.0072, 0.0124, 50).scaled(1000), "ms"
        ),
        key=True,
    )
    assert fig.value == pytest.approx(5.1)
    module = ModuleResult("agent_scrape", "Agent", "ok", 1.0, (fig,))
    md = markdown(MACHINE, [module], quick=False)
    assert "| full scrape | **5.10 ms** (min 4.20 ms, p99 9.30 ms; 50 runs) |" in md
    assert "7.20 ms (min 6.30 ms, p99 12.4 ms; 50 runs) (node_exporter)" in md
    _, [back], _ = read_results(results_json(MACHINE, [module], quick=False))
    assert back == module


def test_round_robin_rotates_who_goes_first_and_times_each_peer() -> None:
    now = [0.0]
    calls: list[str] = []
    cost = {"planner": 1.0, "hnu": 2.0, "ffd": 3.0}

    def peer(name: str) -> Callable[[], str]:
        def call() -> str:
            calls.append(name)
            now[0] += cost[name]
            return name

        return call

    out = time_round_robin({k: peer(k) for k in cost}, n=3, clock=lambda: now[0])
    assert calls == [
        "planner", "hnu", "ffd",
        "hnu", "ffd", "planner",
        "ffd", "planner", "hnu",
    ]  # fmt: skip
    assert {k: t.product for k, t in out.items()} == {
        k: Spread(c, c, c, 3) for k, c in cost.items()
    }
    assert out["ffd"].result == "ffd"

"""The ``timeout=`` sent to the engine (issue 40): cut to what is left of a cycle's deadline
it is fractional, and Prometheus refuses "47.9s" (bad_data); whole units parse everywhere."""

from gpuscope.collector.querying.query_client import engine_duration


def test_whole_seconds_stay_seconds() -> None:
    assert engine_duration(20.0) == "20s"


def test_fractions_are_whole_milliseconds_rounded_down() -> None:
    assert engine_duration(47.9) == "47900ms"
    assert engine_duration(0.5) == "500ms"
    assert engine_duration(1.23456) == "1234ms"
    assert engine_duration(0.0001) == "1ms"

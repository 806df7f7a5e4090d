"""Analytics: detectors that turn stored history into findings a person can act on.

Each detector is a pure function of its inputs (a read-only DuckDB cursor and a time, or
an in-memory cluster state) returning an :class:`gpuscope.analytics.base.Analysis`. I/O stays at
the edges: the CLI and the collector's scheduler load inputs and store the results.
"""

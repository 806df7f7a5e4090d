"""The shared base below every component: settings, domain records, the metric catalogue,
workload rules, errors, time formatting, logging and the DCGM field map.

Everything imports it and it imports no component, no application module and none of the
heavy libraries (duckdb, polars, fastapi), so the node agent's image stays small
(import-linter checks this, ``pyproject.toml``).
"""

"""The node agent: GPU, workload and InfiniBand sources exposed as Prometheus metrics.

It runs as a DaemonSet on every GPU node, so it imports nothing of the collector,
analytics, alerts or actions, and none of duckdb, polars or fastapi (checked by a test).
"""

"""The node agent: GPU, workload and InfiniBand sources exposed as Prometheus metrics.

It runs as a DaemonSet on every GPU node, so it imports nothing of the collector,
analytics, alerts or actions, and none of duckdb, polars or fastapi (checked by a test);
nor the Kubernetes client (kubeapi.py makes its two lists), nor pydantic (config.py
checks its settings), nor ``http.server`` (server.py) (docs/agent.md, Resident memory).
"""

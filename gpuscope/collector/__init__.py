"""Collector: gathers every agent's samples and the cluster's inventory into one DuckDB file.

The path of a sample: ``targets.py`` says what to scrape, ``scrape_loop.py`` runs one loop
per target, ``scrape.py`` and ``fetch.py`` fetch each page within its deadline and size
limit (``limits.py``), ``parse.py`` turns the text format into columns (``dcgm_ingest.py``
for dcgm-exporter pages, ``promql.py`` to read a Prometheus query API instead), ``batch.py``
holds one target's samples and ``ingest.py`` writes them with per-target isolation.

The store (``store.py``; ``schema.py`` for its migrations, ``store_maintenance.py`` for
roll-ups, retention and compaction, ``store_records.py`` and ``store_alerts.py`` for the
other tables, ``store_sql.py`` for shared plumbing) has one writer. The Kubernetes
inventory (``inventory.py``, ``inventory_records.py``, ``kube_config.py``,
``scheduling_rules.py``) keeps nodes, pods and quotas current by list and watch; every
Kubernetes call, the actions' too, is retried by ``kube_api.py``.
``service.py`` runs it all on a schedule behind the HTTP API (``api*.py``) and the
collector's own ``/metrics`` (``metrics.py``, ``*_gauges.py``).

It is the bottom component layer: it imports the shared ``gpuscope`` modules only, never
analytics, alerts or actions (they import it).
"""

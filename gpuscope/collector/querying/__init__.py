"""Ingest from a Prometheus-compatible query API instead of scraping: pull and fleet
modes, their client, step windows and check."""

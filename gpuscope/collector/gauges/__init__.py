"""The collector's own /metrics: ingest and storage counters, and the inventory's,
analytics' and topology's gauges."""

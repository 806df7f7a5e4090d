"""The DuckDB store: schema and migrations, named SQL, appends, roll-ups, retention,
compaction, records and alert state."""

"""collector: see docs/design.md (filled in by its issue)."""

"""analytics: see DESIGN.md (filled in by its issue)."""

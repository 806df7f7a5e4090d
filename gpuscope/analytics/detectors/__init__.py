"""Detectors over the stored samples: idle GPU sessions (with the rule for gaps in
the data) and hot InfiniBand links and rails. Their SQL is in analytics/sql/."""

"""Per-request records, aggregation into summary.json, and fitness."""

"""Benchmark-only app: the stock Django admin changelist over jobs (never part of the product)."""

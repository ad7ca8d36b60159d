"""Benchmark of POST /experiment-assignments against the raw-SQL floor (docs/benchmarks.md)."""

"""Benchmarks of POST /experiment-assignments and POST /assignments against the raw-SQL floor, of the data
commands and of the staff console (bench/README.md)."""

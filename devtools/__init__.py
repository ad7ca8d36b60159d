"""Development helpers shared by the tests, the benchmarks and the scripts: free ports, the service under
gunicorn as deployed, and throwaway PostgreSQL and Citus clusters. Never imported by the product."""

from __future__ import annotations

from pathlib import Path

# The checkout: servers run from it, and the benchmarks write their results under it.
PROJECT_DIR = Path(__file__).resolve().parent.parent

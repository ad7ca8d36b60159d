"""Development helpers shared by the tests, the benchmarks and the scripts: free ports, the service under
gunicorn as deployed, and throwaway PostgreSQL and Citus clusters. Never imported by the product."""
